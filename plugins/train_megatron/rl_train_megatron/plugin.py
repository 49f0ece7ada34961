"""Registers the ``megatron`` train backend and its checks (imports neither torch nor megatron-core).

The checks read the model's ``config.json`` (with ``model.override_config``)
and report, one problem per key, a tensor-parallel size that does not divide
the attention heads, key/value heads, MLP width or vocabulary, and a
pipeline size that does not divide the layers. Architectures the conversion
cannot handle are declared on the card, so the resolver rejects them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from rl_core import hookimpl
from rl_core.cards import TrainCard
from rl_core.problems import Problem, nearest_divisors

from rl_train_megatron.native import FEATURES, check_native
from rl_train_megatron.options import ddp_config_problems
from rl_train_megatron.router_checks import MOE_TYPES, check_model_fields, num_experts, router_field

ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM", "HYV3ForCausalLM",
                 "Glm4MoeForCausalLM")


def _model_config(config) -> dict[str, Any] | None:
    if not config.model.path:
        return None
    try:
        data = json.loads((Path(os.path.expanduser(config.model.path)) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return {**data, **(config.model.override_config or {})} if isinstance(data, dict) else None


def check_expert_sizes(config, data: dict[str, Any] | None) -> list[Problem]:
    """EP must divide the experts (and be 1 for a dense model); the expert TP must be 1 or TP."""
    ep, tp = config.train.expert_model_parallel_size, config.train.tensor_model_parallel_size
    etp = config.train.expert_tensor_parallel_size
    out = []
    if etp is not None and etp not in (1, tp):
        out.append(Problem(key="train.expert_tensor_parallel_size",
                           what=f"is {etp}: the megatron train backend slices each expert over 1 rank or over the TP ranks ({tp})",
                           fix=f"set train.expert_tensor_parallel_size to 1 or {tp} (train.tensor_model_parallel_size), or leave it null"))
    if data is None:
        return out
    # transformers 5 writes num_local_experts, earlier versions (and the published checkpoints) num_experts
    experts = num_experts(data)
    if ep > 1 and not isinstance(experts, int):
        out.append(Problem(key="train.expert_model_parallel_size",
                           what=f"is {ep}, but {config.model.path!r} is not an MoE model the megatron backend builds (model_type {data.get('model_type')!r})",
                           fix="set train.expert_model_parallel_size=1 (expert parallelism splits the experts of Qwen2-MoE / Qwen3-MoE / HY-V3 / "
                               "GLM-4-MoE layers)"))
    elif isinstance(experts, int) and experts % ep:
        out.append(Problem(key="train.expert_model_parallel_size",
                           what=f"Megatron EP {ep} does not divide the model's {experts} experts (num_experts; {experts} % {ep} = {experts % ep})",
                           why="expert parallelism gives every rank an equal share of each MoE layer's experts",
                           fix=f"set train.expert_model_parallel_size to a divisor of {experts}: {', '.join(map(str, nearest_divisors(ep, experts)))}"))
    from rl_train_megatron.sequence_parallel import wanted

    sp = wanted((config.train.options or {}).get("transformer_config"), tp)
    if isinstance(experts, int) and tp > 1 and not sp:
        out.append(Problem(key="train.tensor_model_parallel_size",
                           what=f"is {tp} with an MoE model ({data.get('model_type')}): megatron-core's MoE layers train with TP > 1 only under "
                                "Megatron sequence parallelism, which is off",
                           fix="set train.options.transformer_config.sequence_parallel=true (verl: actor_rollout_ref.actor.megatron.sequence_parallel=True), "
                               "or set train.tensor_model_parallel_size=1 and split the experts with train.expert_model_parallel_size"))
    moe_ffn = data.get("moe_intermediate_size")
    etp_eff = tp if etp is None else etp
    if isinstance(experts, int) and isinstance(moe_ffn, int) and etp_eff > 1 and moe_ffn % etp_eff:
        out.append(Problem(key="train.expert_tensor_parallel_size",
                           what=f"expert TP {etp_eff} does not divide each expert's width (moe_intermediate_size {moe_ffn})",
                           fix="set train.expert_tensor_parallel_size=1 (each expert whole on its rank)"))
    return out


def _shared_width(data: dict[str, Any]) -> Any:
    """HY-V3 / GLM-4-MoE: the shared expert's width (moe_intermediate_size x shared experts), split over TP."""
    n = data.get("num_shared_experts", data.get("n_shared_experts")) if data.get("model_type") in ("hy_v3", "glm4_moe") else None
    width = data.get("moe_intermediate_size")
    return n * width if isinstance(n, int) and isinstance(width, int) and n > 0 else None


def check_parallel_sizes(config) -> list[Problem]:
    """TP must divide heads, KV heads, intermediate size and vocabulary; PP the layers; EP the experts."""
    data = _model_config(config)
    problems = check_expert_sizes(config, data)
    vpp = _virtual(config)
    if vpp != 1 or _layout(config):  # (without a readable config.json: PP > 1 and no uneven stages; a layout's own form)
        problems += _virtual_split(config, (data or {}).get("num_hidden_layers"), vpp)
    if data is None:
        return problems
    tp, pp = config.train.tensor_model_parallel_size, config.train.pipeline_model_parallel_size
    heads = data.get("num_attention_heads")
    dims = [
        ("attention heads (num_attention_heads)", heads),
        ("key/value heads (num_key_value_heads)", data.get("num_key_value_heads") or heads),
        ("MLP width (intermediate_size)", data.get("intermediate_size") if data.get("model_type") not in ("qwen2_moe", "qwen3_moe") else None),
        ("shared expert width", _shared_width(data)),
        ("vocabulary (vocab_size)", data.get("vocab_size")),
    ]
    for what, n in dims:
        if tp > 1 and isinstance(n, int) and n % tp:
            problems.append(
                Problem(
                    key="train.tensor_model_parallel_size",
                    what=f"Megatron TP {tp} does not divide the model's {n} {what} ({n} % {tp} = {n % tp})",
                    why="tensor parallelism gives every rank an equal share of the heads, the MLP and the vocabulary",
                    fix=f"set train.tensor_model_parallel_size to a divisor of {n}: {', '.join(map(str, nearest_divisors(tp, n)))}",
                )
            )
            break
    layers = data.get("num_hidden_layers")
    from rl_train_megatron.stages import split_fields

    uneven = split_fields(((config.train.options or {}).get("transformer_config") or {}))  # checked by check_transformer_config
    if vpp == 1 and not _layout(config) and pp > 1 and isinstance(layers, int) and layers % pp and not uneven:
        problems.append(
            Problem(
                key="train.pipeline_model_parallel_size",
                what=f"Megatron PP {pp} does not divide the model's {layers} layers ({layers} % {pp} = {layers % pp})",
                why="each pipeline stage holds an equal share of the decoder layers",
                fix=f"set train.pipeline_model_parallel_size to a divisor of {layers}: {', '.join(map(str, nearest_divisors(pp, layers)))}",
            )
        )
    return problems


VPP_KEY = "train.options.virtual_pipeline_model_parallel_size"


def _virtual(config) -> Any:
    value = (config.train.options or {}).get("virtual_pipeline_model_parallel_size")
    return 1 if value is None else value


def _layout(config) -> str | None:
    from rl_train_megatron.layout import layout_string

    given = (config.train.options or {}).get("transformer_config")
    return layout_string(given) if isinstance(given, dict) else None


def _virtual_split(config, layers: Any, vpp: Any) -> list[Problem]:
    """Virtual pipeline stages: PP > 1, no uneven-stage fields, PP x VPP dividing the layers (megatron-core's rule); a
    custom pipeline layout (rl_train_megatron.layout): one megatron-core reads, that the backend can run."""
    from rl_train_megatron.layout import plan
    from rl_train_megatron.stages import VIRTUAL, StageSplitError

    if not isinstance(vpp, int) or isinstance(vpp, bool) or vpp < 1:
        return []  # the typed options report it
    pp = config.train.pipeline_model_parallel_size
    if _layout(config) and not isinstance(layers, int):
        return []  # checked against the model's layers when its config.json is readable (and by the engine)
    try:
        plan(layers if isinstance(layers, int) else pp * vpp, pp, vpp, (config.train.options or {}).get("transformer_config"))
    except ImportError:
        return []  # megatron-core not installed here: check_transformer_config says the config was not checked
    except StageSplitError as exc:
        key = f"train.options.transformer_config.{exc.field}"
        if exc.field == "pipeline_model_parallel_layout":
            return [Problem(key=key, what=str(exc), fix=f"write PP x VPP stages separated by '|' that place the model's {layers} decoder layers ('t', "
                            "at least one per stage) with 'E' first in the first stage and 'L' last in the last one, e.g. 'Et*2|t*2L' for 4 layers "
                            "over PP 2; or remove it (equal stages)")]
        if _layout(config):
            return [Problem(key=key if exc.field != VIRTUAL else VPP_KEY, what=str(exc),
                            fix=f"remove {key if exc.field != VIRTUAL else VPP_KEY} (the layout gives each stage's layers and chunks)")]
        if exc.field != VIRTUAL:
            return [Problem(key=key, what=str(exc), fix=f"remove {exc.field} (each virtual stage then holds an equal share), or set {VPP_KEY}=1")]
        fix = (f"set train.pipeline_model_parallel_size > 1 (verl: actor_rollout_ref.actor.megatron.pipeline_model_parallel_size), or {VPP_KEY}=1"
               if pp == 1 else f"set {VPP_KEY} to a value v with {pp} x v dividing {layers}: "
               f"{', '.join(str(v) for v in range(1, layers + 1) if layers % (pp * v) == 0) or '1'}")
        return [Problem(key=VPP_KEY, what=str(exc), why="megatron-core gives every model chunk the same number of layers" if pp > 1 else "",
                        fix=fix)]
    return []


def check_fully_shard(config) -> list[Problem]:
    """train.options.fully_shard (verl's megatron.use_megatron_fsdp): what it is not built with, by key
    (:func:`rl_train_megatron.options.fully_shard_problems`)."""
    from rl_train_megatron.options import fully_shard_problems

    data = _model_config(config) or {}
    moe = data.get("model_type") if data.get("model_type") in MOE_TYPES else None
    return [Problem(key=key, what=what, fix=fix) for key, what, fix in fully_shard_problems(config, moe)]


def check_router_replay(config) -> list[Problem]:
    """actor.router_replay with a router megatron-core routes without a top-k (sinkhorn): nothing to replay, by key."""
    from rl_train_megatron.router_replay import top_k_free

    mode = getattr(config.actor, "router_replay", "disabled")
    if mode == "disabled" or not top_k_free(dict(config.train.options or {}).get("transformer_config")):
        return []
    return [Problem(key="train.options.transformer_config.moe_router_load_balancing_type",
                    what=f"is sinkhorn with actor.router_replay={mode}: sinkhorn routing has no top-k choice to record or replay",
                    fix="set actor.router_replay=disabled, or another moe_router_load_balancing_type (aux_loss, seq_aux_loss, none)")]


def check_unsupported_options(config) -> list[Problem]:
    """Train-side options of the HF models (and FSDP settings) that the Megatron GPT model does not have."""
    out = []
    if config.model.compile:
        out.append(Problem(
            key="model.compile",
            what="is not supported by the megatron train backend (it compiles HF decoder layers, which Megatron does not run)",
            fix="set model.compile=false with train.name=megatron, or use train.name=fsdp",
        ))
    if getattr(config.model, "enable_activation_offload", False):
        out.append(Problem(
            key="model.enable_activation_offload",
            what="is true, but the megatron train backend does not offload activations to host memory",
            fix="set model.enable_activation_offload=false with train.name=megatron (recomputation: train.options.transformer_config."
                "recompute_granularity), or use train.name=fsdp",
        ))
    opts = dict(getattr(config.train, "options", {}) or {})
    fraction = opts.get("optimizer_offload_fraction", 1.0)
    if not isinstance(fraction, (int, float)) or isinstance(fraction, bool) or not 0 < fraction <= 1:
        out.append(Problem(key="train.options.optimizer_offload_fraction", what=f"is {fraction!r}, not a share in (0, 1]",
                           fix="e.g. train.options.optimizer_offload_fraction=0.5 (1: the whole optimizer)"))
    elif fraction < 1 and not opts.get("optimizer_cpu_offload", False):
        out.append(Problem(key="train.options.optimizer_offload_fraction", what=f"is {fraction} without train.options.optimizer_cpu_offload: "
                           "it is the share of the CPU optimizer's parameters (megatron-core reads it only then)",
                           fix="set train.options.optimizer_cpu_offload=true, or leave optimizer_offload_fraction at 1"))
    for name, why in ddp_config_problems(opts.get("ddp_config")):  # megatron-core's DistributedDataParallelConfig fields passed through
        out.append(Problem(key="train.options.ddp_config" + (f".{name}" if name else ""), what=why,
                           fix="pass only train.options.ddp_config.overlap_grad_reduce (true / false) and bucket_size (elements), or remove the key"))
    if getattr(config.actor, "pad_to_length", False):
        out.append(Problem(
            key="actor.pad_to_length",
            what="is true, but the megatron train backend runs padded micro-batches, not the packed rows this pads to fixed lengths",
            fix="set actor.pad_to_length=false with train.name=megatron, or use train.name=fsdp",
        ))
    fsdp = getattr(config.actor, "fsdp_config", None)  # rl-train-fsdp's section (absent without that package)
    if getattr(fsdp, "fsdp_size", -1) != -1:
        out.append(Problem(
            key="actor.fsdp_config.fsdp_size",
            what=f"is {fsdp.fsdp_size}, an FSDP setting (hybrid sharding): the megatron train backend lays out ranks by "
                 "train.tensor_model_parallel_size x pipeline_model_parallel_size x data parallelism",
            fix="set actor.fsdp_config.fsdp_size=-1 with train.name=megatron, or use train.name=fsdp",
        ))
    if getattr(fsdp, "reduce_dtype", "float32") != "float32":
        out.append(Problem(
            key="actor.fsdp_config.reduce_dtype",
            what=f"is {fsdp.reduce_dtype!r}, an FSDP setting: the megatron train backend reduces gradients in float32",
            fix="set actor.fsdp_config.reduce_dtype=float32 with train.name=megatron, or use train.name=fsdp",
        ))
    return out


_MOE = ("num_moe_experts", "expert_model_parallel_size", "expert_tensor_parallel_size")
_FEATURES = {
    "hierarchical_context_parallel_sizes": "hierarchical context parallelism (rl-core's CP is one group: train.context_parallel_size)",
    "fp8": "FP8 training",
    "fp8_recipe": "FP8 training",
    "fp4": "FP4 training",
}
_FEATURE_PREFIXES = {  # field families of model architectures the backend does not build
    "mtp_": "multi-token-prediction (MTP) layers",
}
#: fields megatron-core reads only in DeepSeek sparse attention (DSA, DeepSeek-V3.2 / V4): no model the backend builds has
#: it (MODEL_TYPES), and a DSA model is refused when its config.json is read, so they can never change a run
_DSA_PREFIXES = ("dsa_indexer_", "experimental_attention_variant")


def _dsa_field(key: str, name: str, value: Any) -> list[Problem] | None:
    """None for a field outside DSA; else its problems (none for the default attention variant)."""
    if not name.startswith(_DSA_PREFIXES):
        return None
    from rl_train_megatron.model import MODEL_TYPES

    if name == "experimental_attention_variant":
        if str(value).strip("'\"").lower() in ("none", "null", ""):
            return []
        return [Problem(key=key, what=f"is {value!r}: an attention other than softmax attention (megatron-core's experimental variants, "
                        "DeepSeek sparse attention among them) is a feature rl-core's megatron train backend does not have",
                        fix=f"remove {key}")]
    return [Problem(key=key, severity="warning",
                    what=f"is {value!r} and has no effect: megatron-core reads it in DeepSeek sparse attention's indexer only, and no "
                         f"model the megatron train backend builds ({', '.join(MODEL_TYPES)}) has one (a DeepSeek-V3.2 / V4 model is "
                         "refused when its config.json is read)",
                    fix=f"remove {key}")]


def _feature(name: str) -> str | None:
    return _FEATURES.get(name) or next((f for p, f in _FEATURE_PREFIXES.items() if name.startswith(p)), None)


_SHAPE = ("num_layers", "hidden_size", "num_attention_heads", "num_query_groups", "kv_channels", "ffn_hidden_size",
          "layernorm_epsilon", "add_qkv_bias", "tensor_model_parallel_size", "pipeline_model_parallel_size")


def _same_value(given: Any, ours: Any) -> bool:
    ours = getattr(ours, "name", ours)  # enums (attention_backend): by name
    if isinstance(ours, bool) or isinstance(given, bool):
        return given is ours or (isinstance(given, str) and given.lower() == str(ours).lower())
    return given == ours or str(given).strip("'\"").lower() == str(ours).lower()


def check_transformer_config(config) -> list[Problem]:
    """train.options.transformer_config (verl's megatron.override_transformer_config) against megatron-core's
    TransformerConfig: recomputation fields are passed to the model; any other field only at the value the engine
    builds with; MoE, context parallelism, uneven pipeline stages and fields the dataclass lacks are refused."""
    from rl_train_megatron.options import FIXED, MOE_PASSED, PASSED_THROUGH, moe_cpu_problems
    from rl_train_megatron.stages import FIELDS as SPLIT_FIELDS

    given = (config.train.options or {}).get("transformer_config") or {}
    if not isinstance(given, dict) or not given:
        return []
    base = "train.options.transformer_config"
    try:
        import dataclasses

        from megatron.core.transformer.transformer_config import TransformerConfig
    except ImportError:
        return [Problem(key=base, severity="warning", what="not checked against megatron-core's TransformerConfig: megatron-core is not installed here",
                        fix="pip install megatron-core==0.16.1 to check it here; the engine checks it when it builds the model")]
    fields = {f.name: f for f in dataclasses.fields(TransformerConfig)}
    out = []
    if config.trainer.device == "cpu":
        out += [Problem(key=f"{base}.{name}", what=f"{why}; it runs on a GPU only (trainer.device=cpu)",
                        fix=f"remove {base}.{name} to train on the CPU, or run on a GPU") for name, why in moe_cpu_problems(given)]
    data = _model_config(config)
    dense = data is not None and data.get("model_type") not in MOE_TYPES
    for name, value in given.items():
        key = f"{base}.{name}"
        routed = None if dense else router_field(config, key, name, value, data)  # expert bias, router scale (rl_train_megatron.router_checks)
        if routed is not None:
            out.extend(routed)
            continue
        dsa = _dsa_field(key, name, value)
        if dsa is not None:
            out.extend(dsa)
            continue
        if name in MOE_PASSED:
            if name not in fields:
                out.append(Problem(key=key, what=f"is not a field of megatron-core's TransformerConfig (megatron-core {_version()})", fix=f"remove {key}"))
            elif dense:
                out.append(Problem(key=key, severity="warning", what=f"has no effect: {config.model.path!r} is a dense model (no MoE layers to pass it to)",
                                   fix=f"remove {key}"))
            continue
        if name == "moe_router_enable_expert_bias":
            if not _same_value(value, False):
                out.append(Problem(key=key, severity="warning", what=f"has no effect: {config.model.path!r} is a dense model (no MoE routers)",
                                   fix=f"remove {key}"))
        elif name.startswith("moe_") or name in _MOE:
            out.append(Problem(key=key, what=f"is {value!r}: this Megatron MoE setting is a feature rl-core's megatron train backend does not have "
                                             f"(it passes {', '.join(MOE_PASSED)} to MoE layers; the expert layout comes from train.expert_* and the model)",
                               fix=f"remove {key}"))
        elif name not in fields:
            out.append(Problem(key=key, what=f"is not a field of megatron-core's TransformerConfig (megatron-core {_version()})",
                               fix=f"remove {key}, or fix its name"))
        elif name in PASSED_THROUGH or name in SPLIT_FIELDS or name == "pipeline_model_parallel_layout":  # checked by check_parallel_sizes
            continue
        elif name == "sequence_parallel":  # rl_train_megatron.sequence_parallel (with TP > 1; TP 1: off, as megatron-core does; with or without CP)
            continue
        elif name == "virtual_pipeline_model_parallel_size":
            if str(value).strip("'\"").lower() not in ("none", "null", str(_virtual(config))) and not (_virtual(config) == 1 and str(value) == "1"):
                out.append(Problem(key=key, what=f"is {value!r} but {VPP_KEY} is {_virtual(config)} (the engine's virtual pipeline stages)",
                                   fix=f"remove {key} and set {VPP_KEY} (verl: actor_rollout_ref.actor.megatron.virtual_pipeline_model_parallel_size)"))
        elif name in _CP:
            out.extend(_cp_field(config, key, name, value))
        elif name in _SHAPE:
            out.append(Problem(key=key, what="comes from the model: the engine sets it from model.path's config.json and the train.* parallel sizes",
                               fix=f"remove {key}; change the model's shape with model.override_config"))
        else:
            f = fields[name]
            ours = FIXED.get(name, f.default if f.default is not dataclasses.MISSING else None)
            if _same_value(value, ours):
                continue
            feature = _feature(name)
            what = (f"is {value!r}: {feature} is a feature rl-core's megatron train backend does not have" if feature
                    else f"is {value!r}, but the engine builds the model with {name}={getattr(ours, 'name', ours)!r} and passes through only "
                         f"activation recomputation ({', '.join(PASSED_THROUGH)})")
            out.append(Problem(key=key, what=what, fix=f"remove {key}" + ("" if feature else f", or set it to {getattr(ours, 'name', ours)!r}")))
    return out + _stage_split(config, given, data)


def _stage_split(config, given: dict, data: dict | None) -> list[Problem]:
    """Uneven pipeline stages (num_layers_in_first / last_pipeline_stage, account_for_*_in_pipeline_split): the split
    megatron-core would make must exist for the model's layers (checked when its config.json is readable)."""
    from rl_train_megatron.stages import StageSplitError, split_fields, stage_sizes

    if not split_fields(given) or _virtual(config) != 1 or _layout(config):  # with virtual stages or a layout: _virtual_split
        return []
    pp = config.train.pipeline_model_parallel_size
    layers = (data or {}).get("num_hidden_layers")
    try:
        if pp == 1 or isinstance(layers, int):
            stage_sizes(layers if isinstance(layers, int) else 1, pp, given)
    except StageSplitError as exc:
        key = f"train.options.transformer_config.{exc.field}" if exc.field != "pipeline_model_parallel_size" else "train.pipeline_model_parallel_size"
        return [Problem(key=key, what=str(exc), fix="choose stage sizes that add up to the model's layers (num_hidden_layers "
                        f"{layers}), the stages in between sharing the rest equally; or remove the uneven-stage fields")]
    return []


_CP = ("context_parallel_size", "cp_comm_type")


def _cp_field(config, key: str, name: str, value: Any) -> list[Problem]:
    """verl repeats the CP size in override_transformer_config: it must be train.context_parallel_size; the CP
    communication pattern changes only speed (rl-core's CP all-gathers keys / values)."""
    cp = config.train.context_parallel_size
    if name == "context_parallel_size":
        if str(value).strip() == str(cp):
            return []
        return [Problem(key=key, what=f"is {value!r} but train.context_parallel_size is {cp} (the model's context parallelism)",
                        fix=f"remove {key} and set train.context_parallel_size (verl: actor_rollout_ref.actor.megatron.context_parallel_size)")]
    if value in (None, "all_gather") or str(value).lower() in ("none", "null", "all_gather"):
        return []
    return [Problem(key=key, severity="warning", what=f"is {value!r}: rl-core's context parallelism all-gathers keys / values ('all_gather'); "
                    "the pattern changes speed, not the result, so it runs with all_gather", fix=f"remove {key}, or set it to 'all_gather'")]


def _version() -> str:
    try:
        import importlib.metadata as md

        return md.version("megatron-core")
    except Exception:  # noqa: BLE001 - only for the message
        return "?"


def check_native_paths(config) -> list[Problem]:
    """GPU runs: the reference paths they would take, by key (:func:`rl_train_megatron.native.check_native`)."""
    from rl_train_megatron.sequence_parallel import wanted

    data = _model_config(config) or {}
    sp = wanted((config.train.options or {}).get("transformer_config"), config.train.tensor_model_parallel_size)
    return check_native(config, FEATURES, moe=data.get("model_type") in MOE_TYPES or isinstance(num_experts(data), int), sp=sp)


MEGATRON_CARD = TrainCard(
    name="megatron",
    factory="rl_train_megatron.engine:MegatronBackend",
    description="megatron-core GPT models from HF Llama / Qwen2 / Qwen3 and Qwen2-MoE / Qwen3-MoE / HY-V3 / GLM-4-MoE configs; tensor (vocab-parallel log-probs) x "
                "context x pipeline x data parallelism, expert parallelism for MoE layers, MoE routing replay (R2 / R3)",
    devices={"cpu", "cuda"},
    parallelism={"dp", "tp", "pp", "cp", "ep", "distributed_optimizer"},  # (+ train.options.fully_shard: ZeRO-3 over DP)
    roles={"actor", "critic", "ref"},
    export_formats={"hf"},
    architectures=ARCHITECTURES,
    on_policy_without_old_log_probs=True,
    router_replay=True,  # MoE routing replay R2 / R3 in the actor's forwards, every layout (rl_train_megatron.router_replay)
    state_sharding="model",  # each rank holds its tensor x pipeline shard; data-parallel replicas hold copies
    engine="megatron-core",
    engine_versions=">=0.16,<0.17",
    offload=False,  # actor.fsdp_config.*_offload are FSDP's; Megatron's offload is train.options.*_offload (rl_train_megatron.options)
    options="rl_train_megatron.options:MegatronOptions",
    checks=(check_model_fields, check_parallel_sizes, check_unsupported_options, check_transformer_config, check_fully_shard, check_router_replay,
            check_native_paths),
    features=FEATURES,  # native (megatron-core's path) or reference (rl-core's CPU-conformant one), per feature (rl_train_megatron.native)
)


@hookimpl
def rl_core_register_train_backends(register):
    register(MEGATRON_CARD)
