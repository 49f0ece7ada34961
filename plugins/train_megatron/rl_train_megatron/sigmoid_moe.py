"""Sigmoid-routed MoE families (HY-V3, GLM-4.5 MoE) and megatron-core's aux-loss-free expert bias.

Both families route as DeepSeek-V3 does: ``sigmoid(router logits)`` per expert, the top-k chosen on the scores plus a
per-expert bias (transformers' ``e_score_correction_bias`` buffer), the chosen scores renormalised to sum 1 and
multiplied by a scaling factor (HY-V3's ``router_scaling_factor``, GLM's ``routed_scaling_factor``); GLM may first
keep the ``topk_group`` best of ``n_group`` expert groups (each group scored by its two best biased scores). They add
an ungated shared expert (``moe_intermediate_size x`` the number of shared experts) and start with dense layers
(HY-V3's ``mlp_layer_types``, GLM's ``first_k_dense_replace``). megatron-core builds the same with
``moe_router_score_function="sigmoid"``, ``moe_router_enable_expert_bias`` (its router's ``expert_bias``),
``moe_router_topk_scaling_factor``, ``moe_router_num_groups`` / ``moe_router_group_topk`` (it scores a group by its
``topk / group_topk`` best: equal to transformers' two when ``topk = 2 x topk_group``), an ungated
``moe_shared_expert_intermediate_size`` and a ``moe_layer_freq`` list.

The expert bias is a routing bias, not trained by gradients. megatron-core moves it after each optimizer step
(``finalize_model_grads``): the tokens each expert received in the step's training forwards
(``local_tokens_per_expert``), summed over the ranks of the pipeline stage (TP x CP x DP), give
``bias += sign(mean load - load) x moe_router_bias_update_rate``. The engine does the same in
:func:`update_expert_bias` (its own gradient code replaces ``finalize_model_grads``). The rate defaults to 0 here: the
bias stays the checkpoint's (as transformers uses it); verl's ``moe_router_bias_update_rate`` sets it. The bias is held
as a parameter that takes no gradient (:func:`hold_bias_as_parameter`), so conversion, weight sync, export,
checkpoints and offload carry it with the weights.

Padding positions are routed and counted as megatron-core counts every token it is given without a padding mask (the
engine passes none: megatron-core 0.16.1 reads its MoE padding mask one way for the bias count and the other way for
the z loss).
"""

from __future__ import annotations

import dataclasses

import torch

SIGMOID_TYPES = ("hy_v3", "glm4_moe")
ARCHITECTURES = ("HYV3ForCausalLM", "Glm4MoeForCausalLM")

# config.json entries that are not model fields and change nothing the backend builds
_HARMLESS = {"_name_or_path", "auto_map", "model_type", "output_attentions", "torch_dtype", "use_cache", "output_router_logits",
             "initializer_range", "transformers_version", "enable_moe_fp32_combine",
             "head_dim", "partial_rotary_factor", "rope_theta"}  # (the last three: read by model_shape / the rotary embedding)
# multi-token-prediction layers: transformers drops their weights when it loads the model; the backend does not build them
_MTP = ("num_nextn_predict_layers", "num_mtp_layers", "mtp_num_layers")


def _error(key: str, msg: str):
    from rl_train_megatron.model import UnsupportedModelError

    return UnsupportedModelError(f"{key}: {msg}")


def shape_fields(hf_config, key: str) -> dict:
    """The :class:`~rl_train_megatron.model.ModelShape` fields of an HY-V3 / GLM-4-MoE config; every field it cannot
    build is refused by name."""
    mtype = hf_config.model_type
    _refuse_unknown(hf_config, key)
    for name in _MTP:
        n = getattr(hf_config, name, None)
        if isinstance(n, int) and n > 0:
            raise _error(key, f"{name}={n}: multi-token-prediction (MTP) layers are not built by the megatron train backend (transformers "
                              f"drops their weights too, so they would be neither trained nor exported); set model.override_config."
                              f"{name}=0 to train the model without them, or use train.name=fsdp")
    layers = int(hf_config.num_hidden_layers)
    if mtype == "hy_v3":
        types = list(hf_config.mlp_layer_types or [])
        bad = sorted({t for t in types if t not in ("dense", "sparse")})
        if len(types) != layers or bad:
            raise _error(key, f"mlp_layer_types={types}: the Megatron backend builds one 'dense' or 'sparse' entry per layer ({layers})")
        if getattr(hf_config, "attention_bias", False):
            raise _error(key, "attention_bias=true (HY-V3's o_proj bias) is not supported by the Megatron conversion (set train.name=fsdp)")
        dense = tuple(i for i, t in enumerate(types) if t == "dense")
        out = dict(experts=int(hf_config.num_experts), shared=int(hf_config.num_shared_experts or 0),
                   scale=float(hf_config.router_scaling_factor), qk_norm=True, qkv_bias=False, groups=None, group_topk=None)
    else:
        if not getattr(hf_config, "norm_topk_prob", True):
            raise _error(key, "norm_topk_prob=false: megatron-core's sigmoid router always renormalises the top-k scores (set train.name=fsdp)")
        k = int(hf_config.first_k_dense_replace or 0)
        dense = tuple(range(min(k, layers)))
        groups, group_topk = int(hf_config.n_group or 1), int(hf_config.topk_group or 1)
        topk = int(hf_config.num_experts_per_tok)
        if groups > 1 and topk != 2 * group_topk:
            raise _error(key, f"n_group={groups}, topk_group={group_topk}, num_experts_per_tok={topk}: transformers scores an expert group by "
                              "its 2 best experts, megatron-core by its num_experts_per_tok / topk_group best; they agree only when "
                              "num_experts_per_tok = 2 x topk_group (set train.name=fsdp)")
        out = dict(experts=int(hf_config.n_routed_experts), shared=int(hf_config.n_shared_experts or 0),
                   scale=float(hf_config.routed_scaling_factor), qk_norm=bool(hf_config.use_qk_norm),
                   qkv_bias=bool(hf_config.attention_bias), groups=groups if groups > 1 else None, group_topk=group_topk if groups > 1 else None)
    topk = int(hf_config.num_experts_per_tok)
    if topk < 2:
        raise _error(key, f"num_experts_per_tok={topk}: with one expert per token transformers' weight is 1 (renormalised), "
                          "megatron-core's the sigmoid score; the Megatron backend needs 2 or more (set train.name=fsdp)")
    moe_ffn = int(hf_config.moe_intermediate_size)
    return dict(
        qk_norm=out["qk_norm"], qkv_bias=out["qkv_bias"], experts=out["experts"], topk=topk, moe_ffn=moe_ffn, shared_ffn=moe_ffn * out["shared"],
        norm_topk=True, score="sigmoid", topk_scale=out["scale"], groups=out["groups"], group_topk=out["group_topk"], dense_layers=dense,
        family=mtype,
    )


def _refuse_unknown(hf_config, key: str) -> None:
    """A config.json entry the config class does not define (e.g. a newer release's field) is refused by name."""
    known = {f.name for f in dataclasses.fields(type(hf_config))} | set(getattr(type(hf_config), "attribute_map", {}).values())
    extra = sorted(set(hf_config.to_dict()) - known - _HARMLESS - set(_MTP))
    if extra:
        raise _error(key, f"config field(s) {', '.join(extra)} of model_type {hf_config.model_type!r} are not known to the Megatron conversion "
                          "(it would build the model without them); remove them from config.json (or model.override_config) if they do "
                          "not change the model, or use train.name=fsdp")


def moe_config(shape, passed: dict | None) -> dict:
    """The sigmoid router's TransformerConfig fields (the rest: :func:`rl_train_megatron.model.moe_config`)."""
    out = dict(
        moe_router_score_function="sigmoid",
        moe_router_pre_softmax=False,
        moe_router_enable_expert_bias=True,
        moe_router_bias_update_rate=float(bias_update_rate(passed)),
        moe_router_topk_scaling_factor=shape.topk_scale,
        moe_shared_expert_gate=False,
    )
    if shape.groups:
        out.update(moe_router_num_groups=shape.groups, moe_router_group_topk=shape.group_topk)
    if shape.dense_layers:
        out["moe_layer_freq"] = [0 if i in shape.dense_layers else 1 for i in range(shape.layers)]
    return out


def check_expert_bias(shape, passed: dict | None) -> None:
    """``moe_router_enable_expert_bias`` as given must be the model's router (the same rule as
    :func:`rl_train_megatron.router_checks.router_field`, at build time for a config.json the check could not read)."""
    value = (passed or {}).get("moe_router_enable_expert_bias")
    if value is None:
        return
    on = value is True or str(value).strip("'\"").lower() == "true"
    key = "train.options.transformer_config.moe_router_enable_expert_bias"
    if on and shape.moe and not shape.expert_bias:  # (a dense model: no routers, a warning at check time)
        raise _error(key, f"is true, but the model ({shape.family}) routes with a softmax: megatron-core applies the expert bias to sigmoid "
                          "routers only; remove it (softmax routers balance with moe_aux_loss_coeff)")
    if not on and shape.expert_bias:
        raise _error(key, f"is {value!r}, but the model ({shape.family}) routes with its checkpoint's expert bias (e_score_correction_bias); "
                          "remove it, or set it to true (the bias moves only with moe_router_bias_update_rate > 0)")


def bias_update_rate(passed: dict | None) -> float:
    """``moe_router_bias_update_rate`` as given (verl's override_transformer_config), 0 when not given."""
    value = (passed or {}).get("moe_router_bias_update_rate")
    return 0.0 if value is None else float(str(value).strip("'\""))


# --------------------------------------------------------------------- names
def router_names(shape) -> dict[str, str]:
    """An MoE layer's one-to-one names of this family (Megatron suffix -> HF suffix)."""
    if shape.family not in SIGMOID_TYPES:  # Qwen2-MoE / Qwen3-MoE
        out = {"mlp.router.weight": "mlp.gate.weight"}
        if shape.shared_ffn:
            out.update({"mlp.shared_experts.linear_fc2.weight": "mlp.shared_expert.down_proj.weight",
                        "mlp.shared_experts.gate_weight": "mlp.shared_expert_gate.weight"})
        return out
    bias = "mlp.e_score_correction_bias" if shape.family == "hy_v3" else "mlp.gate.e_score_correction_bias"
    out = {"mlp.router.weight": "mlp.gate.weight", "mlp.router.expert_bias": bias}
    if shape.shared_ffn:
        out["mlp.shared_experts.linear_fc2.weight"] = "mlp.shared_experts.down_proj.weight"
    return out


def shared_fc1_names(shape) -> tuple[str, str]:
    """HF's shared-expert gate and up projections (Megatron's ``mlp.shared_experts.linear_fc1``)."""
    p = "mlp.shared_experts." if shape.family in SIGMOID_TYPES else "mlp.shared_expert."
    return p + "gate_proj.weight", p + "up_proj.weight"


# ---------------------------------------------------------------- expert bias
def routers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The routers with an expert bias, in module order."""
    return [m for m in model.modules() if getattr(m, "expert_bias", None) is not None and hasattr(m, "local_tokens_per_expert")]


def hold_bias_as_parameter(model: torch.nn.Module) -> None:
    """Each router's ``expert_bias`` buffer becomes a parameter that takes no gradient (same tensor, same name)."""
    for router in routers(model):
        bias = router._buffers.pop("expert_bias")
        router.expert_bias = torch.nn.Parameter(bias, requires_grad=False)


def is_expert_bias(name: str) -> bool:
    return name.endswith("mlp.router.expert_bias")


def update_expert_bias(model: torch.nn.Module, group) -> None:
    """megatron-core's update once per step: tokens per expert summed over ``group`` (the stage's TP x CP x DP ranks),
    ``bias += sign(mean - tokens) x moe_router_bias_update_rate``; the counts are cleared (also with rate 0)."""
    found = routers(model)
    if not found:
        return
    rate = float(found[0].config.moe_router_bias_update_rate)
    counts = torch.stack([r.local_tokens_per_expert for r in found]).float()
    if group is not None and torch.distributed.get_world_size(group) > 1:
        torch.distributed.all_reduce(counts, group=group)
    step = torch.sign(counts.mean(-1, keepdim=True) - counts) * rate
    with torch.no_grad():
        for r, s in zip(found, step):
            if rate:
                r.expert_bias.add_(s.to(r.expert_bias.device))
            r.local_tokens_per_expert.zero_()


def stage_group():
    """The ranks that hold this pipeline stage's routers and see different tokens or the same: TP x CP x DP (megatron-core's
    group for the token counts)."""
    from megatron.core import parallel_state as mpu

    return mpu.get_tensor_and_data_parallel_group(with_context_parallel=True)
