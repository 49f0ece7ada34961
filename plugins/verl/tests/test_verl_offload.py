"""verl's offload switches and Megatron TransformerConfig overrides (issue #37): mapped onto rl-core's keys, or
refused by the key as written, naming the verl feature rl-core lacks."""

from __future__ import annotations

import pytest

from rl_core.config.load import load_config, load_report

V = "actor_rollout_ref"
MEG = ["model_engine=megatron"]


def _problems(*overrides, severity="error"):
    return [p for p in load_report(None, list(overrides)).problems if p.severity == severity]


def test_fsdp_offload_policy_and_activation_offload_map():
    cfg = load_config(None, [f"{V}.actor.fsdp_config.offload_policy=True", f"{V}.model.enable_activation_offload=True"])
    assert cfg.actor.fsdp_config.offload_policy and cfg.model.enable_activation_offload
    cfg = load_config(None, ["critic.model.fsdp_config.param_offload=True", "critic.fsdp.optimizer_offload=True", "critic.fsdp.offload_policy=False"])
    assert (cfg.critic.fsdp_config.param_offload, cfg.critic.fsdp_config.optimizer_offload, cfg.critic.fsdp_config.offload_policy) == (True, True, False)
    (w,) = _problems(f"{V}.ref.fsdp_config.offload_policy=True", severity="warning")
    assert w.key == f"{V}.ref.fsdp_config.offload_policy" and "keeps it on the device" in w.what


def test_megatron_offload_keys_map_to_the_backend_options():
    cfg = load_config(None, [*MEG, *(f"{V}.actor.megatron.{k}_offload=True" for k in ("param", "grad", "optimizer")),
                             f"{V}.ref.megatron.param_offload=True", f"+{V}.actor.optim.override_optimizer_config.optimizer_cpu_offload=True",
                             f"+{V}.actor.optim.override_optimizer_config.optimizer_offload_fraction=1",
                             f"+{V}.actor.megatron.override_transformer_config.recompute_granularity=full"])
    assert cfg.train.name == "megatron"
    assert cfg.train.options == {"param_offload": True, "grad_offload": True, "optimizer_offload": True, "ref_param_offload": True,
                                 "optimizer_cpu_offload": True, "optimizer_offload_fraction": 1,
                                 "transformer_config": {"recompute_granularity": "full", "sequence_parallel": True}}  # SP: verl's megatron default
    (w,) = _problems(*MEG, f"{V}.ref.megatron.grad_offload=True", severity="warning")
    assert "no gradients or optimizer" in w.what
    part = load_config(None, [*MEG, f"+{V}.actor.optim.override_optimizer_config.optimizer_offload_fraction=0.5"])
    assert part.train.options["optimizer_offload_fraction"] == 0.5  # the megatron plugin's check wants optimizer_cpu_offload with it
    cfg = load_config(None, [*MEG, f"+{V}.actor.megatron.override_transformer_config.moe_router_dtype=fp32"])
    assert cfg.train.options["transformer_config"] == {"moe_router_dtype": "fp32", "sequence_parallel": True}  # checked and passed by the megatron backend


def test_backend_options_are_checked_by_the_chosen_backend():
    from rl_core.plugins import get_registry
    from rl_core.plan.resolver import resolve

    registry = get_registry()
    if "fsdp" not in registry.cards["train"]:
        pytest.skip("needs the rl-train-fsdp plugin")
    _, problems = resolve(load_config(None, ["train.name=fsdp", "train.options.param_offload=true"]), registry)
    (p,) = [p for p in problems if p.key.startswith("train.options")]
    assert p.severity == "error" and "is not an option of the train 'fsdp'" in p.what


def test_megatron_checks_transformer_config_fields_against_the_dataclass():
    plugin = pytest.importorskip("rl_train_megatron.plugin", reason="needs the rl-train-megatron plugin")
    pytest.importorskip("megatron.core", reason="needs megatron-core")
    tc = "train.options.transformer_config"
    ok = [f"{tc}.recompute_granularity=full", f"{tc}.recompute_method=uniform", f"{tc}.recompute_num_layers=1",
          f"{tc}.normalization=RMSNorm", f"{tc}.attention_backend=auto", f"{tc}.account_for_loss_in_pipeline_split=false"]
    assert plugin.check_transformer_config(load_config(None, ["train.name=megatron", *ok])) == []
    bad = {"num_layers_in_first_pipeline_stage=3": "pipeline_model_parallel_size is 1",
           "context_parallel_size=2": "context parallelism",
           "moe_layer_freq=2": "Megatron MoE setting",
           "no_such_field=1": "not a field of megatron-core's TransformerConfig", "hidden_size=64": "comes from the model",
           "attention_softmax_in_fp32=false": "builds the model with attention_softmax_in_fp32=True",
           "experimental_attention_variant=dsa": "attention other than softmax attention", "mtp_num_layers=1": "multi-token-prediction"}
    for override, words in bad.items():
        (p,) = plugin.check_transformer_config(load_config(None, ["train.name=megatron", f"{tc}.{override}"]))
        assert p.key == f"{tc}.{override.split('=')[0]}" and words in p.what, (override, p.what)
    # DeepSeek sparse attention's indexer fields: megatron-core reads them only in DSA, which no model the backend builds has (a DSA
    # model is refused by its architecture): a warning that they do nothing, never an error, never silence
    assert plugin.check_transformer_config(load_config(None, ["train.name=megatron", f"{tc}.experimental_attention_variant=null"])) == []
    for override in ("dsa_indexer_use_sparse_loss=true", "dsa_indexer_loss_coeff=0.0", "dsa_indexer_topk=2048"):
        (p,) = plugin.check_transformer_config(load_config(None, ["train.name=megatron", f"{tc}.{override}"]))
        assert p.severity == "warning" and "has no effect" in p.what and "DeepSeek sparse attention" in p.what, (override, p.what)
    # expert bias: judged by the model's router when its config.json is read (plugins/train_megatron/tests/test_megatron_sigmoid_moe.py), by the
    # engine when it builds the model otherwise
    assert plugin.check_transformer_config(load_config(None, ["train.name=megatron", f"{tc}.moe_router_enable_expert_bias=true"])) == []
    (p,) = plugin.check_unsupported_options(load_config(None, ["train.name=megatron", "model.enable_activation_offload=true"]))
    assert p.key == "model.enable_activation_offload"


def test_more_verl_keys_map_or_name_the_feature():
    cfg = load_config(None, [f"{V}.actor.optim.lr_scheduler_type=cosine", f"{V}.rollout.disable_log_stats=True",
                             "reward.reward_model.model_path=/models/rm"])
    assert cfg.actor.optim.lr_scheduler == "cosine" and cfg.rollout.engine_kwargs == {"disable_log_stats": True}
    assert cfg.reward_model.model.path == "/models/rm"
    assert load_config(None, [*MEG, f"{V}.actor.optim.lr_decay_style=linear"]).actor.optim.lr_scheduler == "linear"
    for override, words in {f"{V}.rollout.moe_tensor_parallel_size=2": "tensor parallelism of MoE layers",
                            "+data.min_response_length=4096": "a minimum response length",
                            f"{V}.actor.engine.no_such_knob=8": "megatron-lite",
                            "algorithm.rollout_correction.rollout_token_veto_threshold=1e-4": "vetoing a whole sequence"}.items():
        (p,) = _problems(override)
        assert p.key == override.split("=")[0] and words in p.what and "verl feature rl-core does not have" in p.what, (override, p.what)
