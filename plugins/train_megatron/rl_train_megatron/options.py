"""What ``train.options`` may hold with ``train.name=megatron`` (the card's typed options; checked by ``rlcore check``).

Offload between phases (verl's ``actor_rollout_ref.{actor,ref}.megatron.*_offload`` and the actor's
``optim.override_optimizer_config.optimizer_cpu_offload``), with :mod:`rl_offload.offload`'s mechanisms:

``param_offload``
    The actor's parameters live in host memory between phases (log-prob pass, update, weight sync) and are copied
    to the device for each phase.
``grad_offload``
    Gradients left between phases live in host memory. The engine clears the gradients at every optimizer step,
    so after a complete update there are none; verl's Megatron engine keeps a persistent gradient buffer instead,
    which is what verl moves.
``optimizer_offload``
    AdamW's state lives in host memory; the step brings it to the device a chunk of parameters at a time.
``optimizer_cpu_offload``
    megatron-core's CPU optimizer (its ``OptimizerConfig.optimizer_cpu_offload``): AdamW's state lives in host
    memory and the step runs on the CPU (each parameter and gradient copied to the host, the parameter copied back).
    ``optimizer_offload_fraction`` (megatron-core's ``optimizer_offload_fraction``; default 1: all of it) steps only
    that share of the parameters (by numel, in order) on the host, the rest on the device.
``ref_param_offload``
    The reference model's parameters in host memory between its log-prob passes.

Each changes where memory lives, not what is computed (AdamW is element-wise). On a CPU-only machine the copies are
host to host (what the tests check); none of it was run on a GPU here.

``virtual_pipeline_model_parallel_size``
    Virtual (interleaved) pipeline stages (verl's ``megatron.virtual_pipeline_model_parallel_size``; megatron-core's
    field of that name): each of the ``train.pipeline_model_parallel_size`` stages holds this many model chunks of
    ``layers / (PP x VPP)`` layers, interleaved as megatron-core lays them out (:func:`rl_train_megatron.stages.virtual_split`);
    a micro-batch goes through chunk 0 of every stage, then chunk 1, ... (:mod:`rl_train_megatron.pipeline`).

``fully_shard``
    Fully sharded data parallelism (verl's ``megatron.use_megatron_fsdp``; ZeRO-3): parameters, gradients and AdamW
    state sharded over the data-parallel ranks of each TP shard with torch FSDP2's ``fully_shard`` on megatron-core's
    modules, gathered layer by layer for forward and backward, gradients reduce-scattered; the numbers of plain data
    parallelism (:mod:`rl_train_megatron.fully_sharded`). Not NVIDIA's ``megatron_fsdp`` package (CUDA only): the same
    sharding on torch's FSDP2 kernels. Dense models with TP x DP; not with pipeline / virtual stages, context
    parallelism, MoE models, LoRA or offload (refused by key).

``ddp_config``
    Fields of megatron-core's ``DistributedDataParallelConfig`` for ``train.distributed_optimizer`` where megatron-core's
    DistributedOptimizer runs (:mod:`rl_train_megatron.dist_optimizer`; verl's ``megatron.override_ddp_config``):
    ``overlap_grad_reduce`` (the buckets' reduce-scatter overlapped with the last micro-batch's backward) and
    ``bucket_size``; others are refused by name (``overlap_param_gather``: not built here).

``transformer_config``
    Fields of megatron-core's ``TransformerConfig`` passed to the model the engine builds (verl's
    ``megatron.override_transformer_config``): activation recomputation (``recompute_granularity``,
    ``recompute_method``, ``recompute_num_layers``, ``recompute_modules``); any other field only at the value the
    engine builds with (:mod:`rl_train_megatron.plugin` checks them against the dataclass). For an MoE model also the
    router / aux-loss / dispatcher fields of :data:`MOE_PASSED`.
"""

from __future__ import annotations

from typing import Any

import attrs
from rl_core.card_options import Options


@attrs.frozen(kw_only=True)
class MegatronOptions(Options):
    weight_bucket_mb: float = 256.0  # the weight sync's bucket size (named_weights)
    param_offload: bool = False
    grad_offload: bool = False
    optimizer_offload: bool = False
    optimizer_cpu_offload: bool = False
    optimizer_offload_fraction: float = 1.0  # with optimizer_cpu_offload: the share (by numel) of parameters stepped on the host
    ref_param_offload: bool = False
    # virtual (interleaved) pipeline stages: each pipeline stage holds this many model chunks (null / 1: one)
    virtual_pipeline_model_parallel_size: int | None = attrs.field(default=None, validator=attrs.validators.optional(attrs.validators.ge(1)))
    transformer_config: dict[str, Any] = attrs.field(factory=dict)
    # fully sharded data parallelism (verl's megatron.use_megatron_fsdp): rl_train_megatron.fully_sharded
    fully_shard: bool = False
    # megatron-core's DistributedDataParallelConfig fields for train.distributed_optimizer on GPUs (verl's
    # megatron.override_ddp_config): DDP_KEYS
    ddp_config: dict[str, Any] = attrs.field(factory=dict)


#: model.enable_gradient_checkpointing on the megatron backend: each layer's input kept, the layer recomputed in backward
#: (what HF's per-layer gradient checkpointing does), unless transformer_config sets recomputation itself
LAYER_CHECKPOINTING = {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}


def transformer_overrides(config, opts: "MegatronOptions") -> dict[str, Any]:
    """The TransformerConfig fields the engine passes: ``transformer_config``, and model.enable_gradient_checkpointing as
    :data:`LAYER_CHECKPOINTING` when no recompute_* field is given."""
    given = dict(opts.transformer_config)
    if getattr(config.model, "enable_gradient_checkpointing", False) and not any(k.startswith("recompute_") for k in given):
        given.update(LAYER_CHECKPOINTING)
    return given


def virtual_stages(opts: "MegatronOptions") -> int:
    """The model chunks per pipeline stage (1 without virtual stages)."""
    return int(opts.virtual_pipeline_model_parallel_size or 1)


def megatron_options(config) -> MegatronOptions:
    """The run's options (unknown keys are refused at check time; here they are left out)."""
    given = dict(config.train.options or {})
    names = {f.name for f in attrs.fields(MegatronOptions)}
    return MegatronOptions(**{k: v for k, v in given.items() if k in names})


#: TransformerConfig fields passed through from ``transformer_config``: activation recomputation (memory for compute;
#: the same values), which megatron-core's TransformerBlock / attention apply in the forward the engine calls
PASSED_THROUGH = ("recompute_granularity", "recompute_method", "recompute_num_layers", "recompute_modules")

#: TransformerConfig fields of MoE layers passed through from ``transformer_config`` to an MoE model's layers (verl's
#: ``override_transformer_config.moe_*``): megatron-core's router, losses and token dispatcher read them. On the CPU only
#: the ``allgather`` dispatcher runs; :data:`MOE_GPU_ONLY` names the values that need CUDA (an error at start there).
MOE_PASSED = (
    "moe_router_dtype",
    "moe_aux_loss_coeff",
    "moe_z_loss_coeff",
    "moe_router_load_balancing_type",
    "moe_token_dispatcher_type",
    "moe_shared_expert_overlap",
    "moe_router_bias_update_rate",
    "moe_enable_deepep",
    "moe_flex_dispatcher_backend",
    "moe_input_jitter_eps",
    "moe_router_topk_scaling_factor",
    "moe_per_layer_logging",
)

#: MoE settings megatron-core runs with CUDA only: (field, the values that need CUDA, why)
MOE_GPU_ONLY = (
    ("moe_token_dispatcher_type", ("alltoall", "flex"), "its dispatcher synchronises CUDA streams"),
    ("moe_enable_deepep", (True,), "DeepEP's all-to-all kernels need CUDA (and the deep_ep package)"),
    ("moe_shared_expert_overlap", (True,), "the shared expert runs on a CUDA side stream"),
)


def moe_cpu_problems(given: dict[str, Any]) -> list[tuple[str, str]]:
    """``(field, why)`` for each MoE setting in ``given`` that megatron-core cannot run on the CPU."""
    out = []
    for name, values, why in MOE_GPU_ONLY:
        value = given.get(name)
        if value is None:
            continue
        norm = value if isinstance(value, bool) else str(value).strip("'\"").lower()
        if isinstance(value, str) and norm in ("true", "false"):
            norm = norm == "true"
        if norm in values:
            out.append((name, f"is {value!r}: {why}; on the CPU the engine runs the allgather dispatcher"))
    return out


#: what the engine builds every model with besides its shape (rl_train_megatron.model.transformer_config);
#: ``activation_func`` (SiLU) and the dtypes are set there too
FIXED: dict[str, Any] = dict(
    normalization="RMSNorm",
    gated_linear_unit=True,
    add_bias_linear=False,
    hidden_dropout=0.0,
    attention_dropout=0.0,
    bias_activation_fusion=False,
    bias_dropout_fusion=False,
    masked_softmax_fusion=False,
    apply_rope_fusion=False,
    persist_layer_norm=False,
    gradient_accumulation_fusion=False,
    attention_softmax_in_fp32=True,
    use_cpu_initialization=True,
    perform_initialization=False,
)


#: train.options.ddp_config keys passed to megatron-core's DistributedDataParallelConfig, with their types
DDP_KEYS = {"overlap_grad_reduce": bool, "bucket_size": (int, type(None))}


def ddp_config_problems(given) -> list[tuple[str, str]]:
    """``(key, why)`` for each ``train.options.ddp_config`` entry that is not passed through (unknown or mistyped)."""
    if given is None:
        return []
    if not isinstance(given, dict):
        return [("", f"is {type(given).__name__}, a mapping of {', '.join(DDP_KEYS)} was expected")]
    out = []
    for key, value in given.items():
        kind = DDP_KEYS.get(key)
        if kind is None:
            why = ("overlaps the parameter all-gather with the next forward; not built here (the weight sync would read "
                   "parameters before their gather)") if key == "overlap_param_gather" else f"is not passed through (passed: {', '.join(DDP_KEYS)})"
            out.append((key, why))
        elif isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
            out.append((key, f"is {value!r}; expected {'true / false' if kind is bool else 'a number of elements or null'}"))
        elif key == "bucket_size" and value is not None and value < 1:
            out.append((key, f"is {value}; a bucket holds at least one element (null: megatron-core's default)"))
    return out


def fully_shard_problems(config, moe_type: str | None = None) -> list[tuple[str, str, str]]:
    """``(key, what, fix)`` for each setting ``train.options.fully_shard`` is not built with (dense TP x DP is;
    :mod:`rl_train_megatron.fully_sharded`); ``moe_type``: the model_type of an MoE model (refused), None for a dense one."""
    opts = dict(config.train.options or {})
    if opts.get("fully_shard") is not True:
        return []
    t, off = config.train, "; or set train.options.fully_shard=false (verl: megatron.use_megatron_fsdp=False)"
    out = []
    sizes = (("train.pipeline_model_parallel_size", t.pipeline_model_parallel_size, "pipeline stages"),
             ("train.options.virtual_pipeline_model_parallel_size", opts.get("virtual_pipeline_model_parallel_size") or 1, "virtual pipeline stages"),
             ("train.context_parallel_size", t.context_parallel_size, "context parallelism"),
             ("train.expert_model_parallel_size", getattr(t, "expert_model_parallel_size", 1) or 1, "expert parallelism"))
    for key, value, what in sizes:
        if value != 1:
            out.append((key, f"is {value} with train.options.fully_shard=true: fully sharded data parallelism is built for TP x DP only, "
                             f"not with {what}", f"set {key}=1{off}"))
    if moe_type:
        out.append(("train.options.fully_shard", f"is true for an MoE model ({moe_type}): its routed experts are not sharded this way",
                    "set train.options.fully_shard=false (train.distributed_optimizer shards the AdamW state of MoE models)"))
    for name in ("param_offload", "grad_offload", "optimizer_offload", "optimizer_cpu_offload", "ref_param_offload"):
        if opts.get(name) is True:
            out.append((f"train.options.{name}", "is true with train.options.fully_shard=true: the offload between phases moves whole "
                        "parameters, not FSDP's shards", f"set train.options.{name}=false (fully sharded: each rank holds 1 / DP of the state){off}"))
    if (getattr(config.model, "lora_rank", 0) or 0) > 0:
        out.append(("model.lora_rank", "is > 0 with train.options.fully_shard=true: LoRA adapters are not sharded this way",
                    f"set model.lora_rank=0{off}"))
    return out
