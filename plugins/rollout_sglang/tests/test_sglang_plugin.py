"""The ``sglang`` card and its checks through the real resolver (no engine needed)."""

from __future__ import annotations

import importlib.metadata as md
import os
import subprocess
import sys
import types

import pytest
import rl_core.plan.resolver as resolver
from rl_core import hookimpl
from rl_core.cards import Provider, TrainCard
from rl_core.config.load import load_config
from rl_core.plugins import PluginManager
from rl_core.problems import errors
from rl_core_testing.tiny_model import make_tiny_model_dir
from rl_rollout_sglang import plugin
from rl_rollout_sglang.plugin import SGLANG_ROLLOUT, check_engine_kwargs


def _registry():
    """Installed plugins, plus this one (and a stand-in fsdp card) where they are not installed."""
    pm = PluginManager()
    pm.load_entrypoints()
    registry = pm.build_registry()
    extra = []
    if "sglang" not in registry.names("rollout"):
        extra.append((plugin, Provider(distribution="rl-rollout-sglang", version="0.1.0", entry_point="rollout_sglang")))
    if "fsdp" not in registry.names("train"):
        stub = types.SimpleNamespace(
            rl_core_register_train_backends=hookimpl(lambda register: register(TrainCard(name="fsdp", factory="x:y")))
        )
        extra.append((stub, Provider(distribution="test-stub-fsdp")))
    for module, provider in extra:
        pm.register_module(module, provider)
    return pm.build_registry() if extra else registry


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return str(make_tiny_model_dir(tmp_path_factory.mktemp("m"), "llama", hidden=64, heads=4, kv_heads=2))


def _resolve(model_path, *overrides):
    cfg = load_config(
        overrides=[
            f"model.path={model_path}", "rollout.name=sglang", "train.name=fsdp", "trainer.device=cpu", "reward.name=null",
            "data.train_batch_size=4", "rollout.n=2", "actor.ppo_mini_batch_size=2", "actor.ppo_micro_batch_size_per_gpu=2",
            *overrides,
        ]
    )
    return resolver.resolve(cfg, _registry())


@pytest.fixture
def sglang_version(monkeypatch):
    """Pretend sglang at the given version is installed."""
    real = md.version

    def set_version(version: str | None):
        def fake(dist):
            if dist == "sglang":
                if version is None:
                    raise md.PackageNotFoundError(dist)
                return version
            return real(dist)

        monkeypatch.setattr(resolver.md, "version", fake)

    set_version("0.5.23")
    return set_version


def test_card_declares_its_capabilities():
    card = SGLANG_ROLLOUT
    assert card.name == "sglang" and card.factory == "rl_rollout_sglang.engine:build"
    assert card.devices == {"cpu", "cuda"} and card.weight_formats == {"hf"}
    assert card.memory_fraction and card.logprobs and card.max_tp == 8
    assert card.engine == "sglang" and card.engine_versions == "==0.5.17||==0.5.23"
    assert check_engine_kwargs in card.checks


def test_entry_points_are_declared():
    """``rl_core`` finds the card; SGLang's own plugin group finds the CPU seeding hook."""
    text = (plugin.__file__ and open(os.path.join(os.path.dirname(plugin.__file__), "..", "pyproject.toml")).read())
    assert 'rollout_sglang = "rl_rollout_sglang.plugin"' in text
    assert '[project.entry-points."sglang.srt.plugins"]' in text and "rl_rollout_sglang.sglang_quirks:sglang_plugin" in text


def test_plugin_module_does_not_import_sglang_or_torch():
    code = "import sys, rl_rollout_sglang.plugin; print(sorted(m for m in ('sglang', 'torch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": ":".join(sys.path)})
    assert out.stdout.strip() == "[]"


def test_supported_stack_resolves_cleanly(model_path, sglang_version):
    stack, problems = _resolve(model_path)
    assert stack is not None, [p.render() for p in problems]
    assert stack.rollout.name == "sglang" and not errors(problems)


def test_tp_not_dividing_the_devices_is_one_problem(model_path, sglang_version):
    stack, problems = _resolve(model_path, "trainer.n_gpus_per_node=4", "rollout.tensor_model_parallel_size=3")
    assert stack is None
    errs = errors(problems)
    assert len(errs) == 1, [p.render() for p in problems]
    assert errs[0].key == "rollout.tensor_model_parallel_size"
    assert "rollout TP 3 does not divide the 4 devices" in errs[0].what
    assert errs[0].fix


def test_tp_above_the_cards_maximum_is_one_problem(model_path, sglang_version):
    stack, problems = _resolve(model_path, "trainer.n_gpus_per_node=16", "rollout.tensor_model_parallel_size=16", "data.train_batch_size=16", "actor.ppo_mini_batch_size=8", "actor.ppo_micro_batch_size_per_gpu=1")
    errs = errors(problems)
    assert stack is None and len(errs) == 1, [p.render() for p in problems]
    assert errs[0].key == "rollout.tensor_model_parallel_size" and "up to 8, got 16" in errs[0].what


def test_engine_version_outside_the_range_is_one_problem(model_path, sglang_version, monkeypatch):
    monkeypatch.delenv(resolver.ALLOW_UNTESTED_ENV, raising=False)
    sglang_version("0.5.24")
    stack, problems = _resolve(model_path)
    assert stack is None
    errs = errors(problems)
    assert len(errs) == 1, [p.render() for p in problems]
    assert errs[0].key == "rollout.name"
    assert "installed sglang 0.5.24 is outside the versions 'sglang' was tested with (==0.5.17||==0.5.23)" in errs[0].what
    assert "pip install 'sglang==0.5.17'" in errs[0].fix and resolver.ALLOW_UNTESTED_ENV in errs[0].fix


def test_untested_version_is_a_warning_when_allowed(model_path, sglang_version, monkeypatch):
    monkeypatch.setenv(resolver.ALLOW_UNTESTED_ENV, "1")
    sglang_version("0.5.10")
    stack, problems = _resolve(model_path)
    assert stack is not None and not errors(problems)
    assert any("0.5.10" in p.what and p.severity == "warning" for p in problems)


def test_missing_engine_is_one_problem_naming_the_package(model_path, sglang_version):
    sglang_version(None)
    stack, problems = _resolve(model_path)
    assert stack is None
    errs = errors(problems)
    assert len(errs) == 1, [p.render() for p in problems]
    assert errs[0].key == "rollout.name"
    assert "needs the engine sglang, which is not installed" in errs[0].what
    assert "pip install 'sglang==0.5.17'" in errs[0].fix and "CPU install" in errs[0].fix


def test_missing_plugin_names_the_distribution(model_path):
    """Without rl-rollout-sglang installed, the problem names the distribution that provides 'sglang'."""
    pm = PluginManager()
    registry = pm.build_registry()  # built-ins only
    cfg = load_config(overrides=[f"model.path={model_path}", "rollout.name=sglang", "reward.name=null"])
    stack, problems = resolver.resolve(cfg, registry)
    msgs = [p.render() for p in errors(problems) if p.key == "rollout.name"]
    assert stack is None and msgs and "rl-rollout-sglang" in msgs[0], msgs


def test_engine_kwargs_checks(model_path, sglang_version):
    stack, problems = _resolve(model_path, "rollout.engine_kwargs.server_url=localhost:30000", "rollout.engine_kwargs.weight_sync_bucket_mb=0")
    assert stack is None
    keys = sorted(p.key for p in errors(problems))
    assert keys == ["rollout.engine_kwargs.server_url", "rollout.engine_kwargs.weight_sync_bucket_mb"], [p.render() for p in problems]
    cfg = load_config(overrides=[f"model.path={model_path}", "rollout.engine_kwargs.server_url=http://127.0.0.1:30000", "trainer.nnodes=2"])
    (p,) = check_engine_kwargs(cfg)
    assert "cannot serve 2 nodes" in p.what and "remove rollout.engine_kwargs.server_url" in p.fix
    ok = load_config(overrides=[f"model.path={model_path}", "rollout.engine_kwargs.server_url=http://127.0.0.1:30000"])
    assert check_engine_kwargs(ok) == []


def test_installed_engine_is_in_the_declared_range():
    try:
        import sglang  # noqa: F401
    except Exception:  # noqa: BLE001
        pytest.skip("SGLang not importable here: the declared range is checked against it where it is")
    assert resolver.engine_version_problem(SGLANG_ROLLOUT, "rollout.name") is None


def test_engine_arguments_are_checked_before_the_engine_starts(model_path, sglang_version, monkeypatch):
    """A typo or a key rl-core sets itself: one problem each; with a server_url nothing goes to an engine."""
    monkeypatch.setattr(plugin, "sglang_argument_names", lambda: {"chunked_prefill_size", "context_length", "log_level"})
    stack, problems = _resolve(
        model_path, "rollout.engine_kwargs.chunked_prefil_size=128", "rollout.engine_kwargs.tp_size=2", "rollout.engine_kwargs.log_level=info"
    )
    by_key = {p.key: p for p in errors(problems)}
    assert stack is None and sorted(by_key) == ["rollout.engine_kwargs.chunked_prefil_size", "rollout.engine_kwargs.tp_size"], [
        p.render() for p in problems
    ]
    assert "(did you mean 'chunked_prefill_size'?)" in by_key["rollout.engine_kwargs.chunked_prefil_size"].what
    assert "set rollout.tensor_model_parallel_size instead" in by_key["rollout.engine_kwargs.tp_size"].fix
    cfg = load_config(overrides=[f"model.path={model_path}", "rollout.engine_kwargs.server_url=http://127.0.0.1:30000", "rollout.engine_kwargs.tp_size=2"])
    assert check_engine_kwargs(cfg) == []


def test_sglang_argument_names_come_from_the_installed_engine():
    names = plugin.sglang_argument_names()
    if names is None:
        pytest.skip("SGLang is not importable here (its own venv runs this)")
    assert {"context_length", "mem_fraction_static", "chunked_prefill_size", "tp_size", "random_seed"} <= names


def test_expert_parallelism_is_sglangs_ep_size_and_dp_attention_is_refused(model_path, sglang_version):
    """verl's rollout.expert_parallel_size (= TP) reaches sglang.Engine as ep_size; DP attention is not run (refused)."""
    from rl_core.backends import WorkerContext
    from rl_rollout_sglang.engine import SGLangRollout

    ep = ("trainer.n_gpus_per_node=2", "rollout.tensor_model_parallel_size=2", "rollout.expert_parallel_size=2")
    stack, problems = _resolve(model_path, *ep)
    assert stack is not None and not errors(problems), [p.render() for p in problems]
    stack, problems = _resolve(model_path, "trainer.n_gpus_per_node=2", "rollout.data_parallel_size=2")
    (p,) = errors(problems)
    assert p.key == "rollout.data_parallel_size" and "does not run data-parallel attention" in p.what
    cfg = load_config(overrides=[f"model.path={model_path}", "rollout.name=sglang", "trainer.device=cuda", *ep])
    engine = SGLangRollout.__new__(SGLangRollout)
    engine.config, engine.context, engine.tp = cfg, WorkerContext(rank=0, world_size=2, device="cuda"), 2
    engine.device_type, engine.release_enabled = "cuda", False
    args = engine.engine_args({})
    assert (args["tp_size"], args["ep_size"]) == (2, 2)
    engine.config = load_config(overrides=[f"model.path={model_path}", "rollout.name=sglang", "trainer.device=cuda"])
    assert "ep_size" not in engine.engine_args({})
    try:
        from sglang.srt.server_args import ServerArgs
    except Exception:  # noqa: BLE001
        pytest.skip("SGLang is not importable here (its own venv runs this)")
    server = ServerArgs(**{k: args[k] for k in ("model_path", "tp_size", "ep_size")})  # SGLang's own record takes them
    assert (server.tp_size, server.ep_size) == (2, 2)


def test_lora_engine_args_and_where_sglang_keeps_each_adapter_tensor():
    """rollout.lora_sync=adapter: SGLang starts with one adapter slot of model.lora_rank on the adapted modules
    (torch_native backend on CPU); q/k/v and gate/up adapters are read back from SGLang's stacked rows."""
    from types import SimpleNamespace

    from rl_rollout_sglang.lora import lora_engine_args, stacked_location

    cfg = SimpleNamespace(model=SimpleNamespace(lora_rank=8, target_modules="all-linear", exclude_modules=["down_proj"]))
    args = lora_engine_args(cfg, "cpu")
    assert args == dict(enable_lora=True, max_lora_rank=8, lora_target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj"],
                        max_loras_per_batch=1, lora_backend="torch_native")
    assert "lora_backend" not in lora_engine_args(cfg, "cuda")
    shapes = {f"model.layers.3.self_attn.{m}.weight": s for m, s in (("q_proj", (64, 64)), ("k_proj", (32, 64)), ("v_proj", (32, 64)))}
    shapes.update({f"model.layers.3.mlp.{m}.weight": (96, 64) for m in ("gate_proj", "up_proj")})
    pre = "base_model.model.model.layers.3"
    assert stacked_location(f"{pre}.self_attn.v_proj.lora_A.weight", shapes, 8) == (f"{pre}.self_attn.qkv_proj.lora_A.weight", 16)
    assert stacked_location(f"{pre}.self_attn.v_proj.lora_B.weight", shapes, 8) == (f"{pre}.self_attn.qkv_proj.lora_B.weight", 96)
    assert stacked_location(f"{pre}.mlp.up_proj.lora_B.weight", shapes, 8) == (f"{pre}.mlp.gate_up_proj.lora_B.weight", 96)
    assert stacked_location(f"{pre}.self_attn.o_proj.lora_B.weight", shapes, 8) == (f"{pre}.self_attn.o_proj.lora_B.weight", 0)
