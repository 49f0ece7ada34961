"""Fixtures: a tiny random model whose chat template renders tools (the helpers: openai_testkit.py)."""

from __future__ import annotations

import pytest
from openai_testkit import TOOLS_TEMPLATE


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    from rl_core.modeling import load_tokenizer
    from rl_core_testing.tiny_model import make_tiny_model_dir

    # qwen2 with head_dim 64: a shape vLLM's and SGLang's CPU engines run (vLLM's CPU attention has no head_dim 16;
    # SGLang's llama path imports torchvision, which its CPU venv lacks), the same model on every backend
    path = make_tiny_model_dir(tmp_path_factory.mktemp("openai_agent") / "m", "qwen2", hidden=128, heads=2, kv_heads=1, seed=0)
    tok = load_tokenizer(path)
    tok.chat_template = TOOLS_TEMPLATE
    tok.save_pretrained(path)
    return path
