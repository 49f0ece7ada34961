"""Fixtures: a tiny random model whose chat template renders tools (the helpers: openai_testkit.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from openai_testkit import TOOLS_TEMPLATE

# SGLang 0.5.23 on the CPU imports sgl_kernel and torchvision at module level; rl-rollout-sglang's tests provide
# import-only stand-ins for whichever is missing (plugins/rollout_sglang/tests/conftest.py): the same here, so the
# endpoint runs on SGLang's CPU engine in its venv (.ci/engine_venv.sh sglang)
_SGLANG_CONFTEST = Path(__file__).resolve().parents[2] / "rollout_sglang" / "tests" / "conftest.py"
if importlib.util.find_spec("sglang") is not None and _SGLANG_CONFTEST.exists():
    _spec = importlib.util.spec_from_file_location("_rl_sglang_stand_ins", _SGLANG_CONFTEST)
    _spec.loader.exec_module(importlib.util.module_from_spec(_spec))


def _model(tmp_path_factory, name: str, arch: str, **shape):
    from rl_core.modeling import load_tokenizer
    from rl_core_testing.tiny_model import make_tiny_model_dir

    path = make_tiny_model_dir(tmp_path_factory.mktemp(name) / "m", arch, seed=0, **shape)
    tok = load_tokenizer(path)
    tok.chat_template = TOOLS_TEMPLATE
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    return _model(tmp_path_factory, "openai_agent", "llama")


@pytest.fixture(scope="session")
def engine_model_dir(tmp_path_factory):
    """The model of the tests run on every backend: qwen2 with head_dim 64, a shape vLLM's and SGLang's CPU engines
    run (vLLM's CPU attention has no head_dim 16)."""
    return _model(tmp_path_factory, "openai_agent_engines", "qwen2", hidden=128, heads=2, kv_heads=1)
