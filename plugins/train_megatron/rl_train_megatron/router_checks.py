"""``rlcore check`` for the MoE routers the megatron backend builds (imports neither torch nor megatron-core at import).

Softmax routers (Qwen2-MoE, Qwen3-MoE) and sigmoid routers with an expert bias (HY-V3, GLM-4-MoE:
:mod:`rl_train_megatron.sigmoid_moe`). verl's ``override_transformer_config.moe_router_enable_expert_bias=True`` is
what the sigmoid models are built with (their checkpoint's ``e_score_correction_bias`` is the bias), refused for a
softmax-routed model (megatron-core applies the bias to sigmoid routers only) and, set false, refused for a sigmoid
one (its routing would lose the checkpoint's bias). ``moe_router_topk_scaling_factor`` comes from the model's config.
"""

from __future__ import annotations

from typing import Any

from rl_core.problems import Problem

SOFTMAX_TYPES = ("qwen2_moe", "qwen3_moe")
SIGMOID_TYPES = ("hy_v3", "glm4_moe")
MOE_TYPES = SOFTMAX_TYPES + SIGMOID_TYPES
#: the config.json field of each family's routed experts (transformers 5 writes num_local_experts for Qwen)
_EXPERTS = {"qwen2_moe": ("num_experts", "num_local_experts"), "qwen3_moe": ("num_experts", "num_local_experts"),
            "hy_v3": ("num_experts", "num_local_experts"), "glm4_moe": ("n_routed_experts", "num_local_experts")}
_SCALE = {"hy_v3": "router_scaling_factor", "glm4_moe": "routed_scaling_factor"}


def num_experts(data: dict[str, Any]) -> Any:
    names = _EXPERTS.get(data.get("model_type"))
    if not names:
        return None
    return next((data[n] for n in names if n in data), None)


def _true(value: Any) -> bool:
    return value is True or str(value).strip("'\"").lower() == "true"


def router_field(config, key: str, name: str, value: Any, data: dict[str, Any] | None) -> list[Problem] | None:
    """Problems of a router field of train.options.transformer_config (None: not a field handled here)."""
    mtype = (data or {}).get("model_type")
    if name == "moe_router_enable_expert_bias":
        if _true(value) and mtype in SOFTMAX_TYPES:
            return [Problem(key=key, what=f"is true, but {config.model.path!r} ({mtype}) routes with a softmax: megatron-core applies the expert "
                                          "bias to sigmoid routers only (HY-V3, GLM-4-MoE, DeepSeek-V3's), so the bias would change nothing",
                            fix=f"remove {key} (softmax routers balance with moe_aux_loss_coeff)")]
        if not _true(value) and mtype in SIGMOID_TYPES:
            return [Problem(key=key, what=f"is {value!r}, but {config.model.path!r} ({mtype}) routes with its checkpoint's expert bias "
                                          "(e_score_correction_bias): without it the routing would not be the model's",
                            fix=f"remove {key}, or set it to true (the bias moves only with moe_router_bias_update_rate > 0)")]
        return []
    if name == "moe_router_topk_scaling_factor" and mtype in SIGMOID_TYPES:
        ours = (data or {}).get(_SCALE[mtype])
        try:
            same = ours is not None and float(str(value).strip("'\"")) == float(ours)
        except ValueError:
            same = False
        if value is None or str(value).lower() in ("none", "null") or same:
            return []
        return [Problem(key=key, what=f"is {value!r}, but the model's routing scale is {ours} ({_SCALE[mtype]} in config.json): the engine "
                                      "builds the router with the model's", fix=f"remove {key}; change the model's with model.override_config.{_SCALE[mtype]}")]
    return None


def check_model_fields(config) -> list[Problem]:
    """HY-V3 / GLM-4-MoE: what the Megatron conversion cannot build (MTP layers, unknown config fields, routing it
    cannot reproduce), refused by name when config.json is read (the engine raises the same at start)."""
    from rl_train_megatron.plugin import _model_config

    data = _model_config(config)
    if data is None or data.get("model_type") not in SIGMOID_TYPES or getattr(config.train, "name", "megatron") != "megatron":
        return []
    try:
        from transformers import AutoConfig

        from rl_train_megatron.model import UnsupportedModelError, model_shape
    except ImportError:  # noqa: PERF203 - the engine checks at start
        return []
    fields = {k: v for k, v in data.items() if k != "model_type"}
    try:
        hf_config = AutoConfig.for_model(data["model_type"], **fields)
        model_shape(hf_config)
    except UnsupportedModelError as exc:
        what = str(exc).removeprefix("model.path: ")
        return [Problem(key="model.path", what=what, fix="change the config field named here (config.json or model.override_config), or use train.name=fsdp")]
    except (TypeError, ValueError) as exc:
        return [Problem(key="model.path", what=f"config.json could not be read as a {data['model_type']} config: {exc}",
                        fix="fix config.json (or model.override_config)")]
    return []
