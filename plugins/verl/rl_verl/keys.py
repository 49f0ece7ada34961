"""verl's keys, one rule each: mapped onto rl-core's, accepted where the value is what rl-core always does,
passed to the rollout engine, ignored with a warning (no effect on what is computed), or refused by name.

A refusal says that the key is a verl feature rl-core does not have, the nearest rl-core setting, and the
doc or issue that covers it. Nothing is accepted and then silently ignored: an ``ignore`` rule prints a
warning in ``rlcore check`` and ``rlcore train``. ``docs/migrating-from-verl.md`` is generated from
:data:`RULES` (``python -m rl_verl.doc``).

Keys are verl's full dotted names (``actor_rollout_ref.actor.X``); ``*`` matches one or more key parts.
The first matching rule wins; keys no rule names fall back to the section prefixes of
:data:`rl_verl.dialect.VERL_PREFIXES` and are then checked against rl-core's schema.
"""

from __future__ import annotations

import re
from typing import Any, Callable

import attrs

from rl_verl.engines import BACKEND_OF, ROWS as ENGINE_ROWS, VALUE_ROWS as ENGINE_VALUES
from rl_verl.reward_model import KNOBS as RM_KNOBS, NOTES as RM_NOTES, PREFIX as RM_PREFIX
from rl_verl.values import norm

MAP, SAME, ENGINE, IGNORE, REFUSE, TIE = "map", "same", "engine", "ignore", "refuse", "tie"
ALIAS, HOLD = "alias", "hold"  # ALIAS: read as another verl key (target); HOLD: kept for rl_verl.engines.apply

DOC = "docs/migrating-from-verl.md"
OFFLOAD = "issue #32 (LoRA / offload)"
ULYSSES = "issue #33 (sequence parallelism)"
MULTI_TURN = "issue #29 (agentic rollouts)"
REWARD_MODEL = "issue #30 (reward models)"
ASYNC = "issue #34 (asynchronous RL)"
MULTIMODAL = "rl-core reads image inputs only, no video / audio (issue #37; docs/data.md)"


@attrs.frozen(kw_only=True)
class Rule:
    pattern: str
    kind: str
    target: str = ""  # MAP / TIE: rl-core's key; ENGINE: the engine keyword; ALIAS: the verl key it reads as; HOLD: a name
    ok: tuple = ()  # SAME: the values rl-core's behaviour equals (compared after bool / number normalising)
    convert: Callable[[Any], Any] | None = None  # MAP: value -> rl-core's value
    note: str = ""  # what rl-core does (SAME / IGNORE / MAP) or the feature it lacks (REFUSE)
    nearest: str = ""  # REFUSE / SAME: the nearest rl-core setting
    ref: str = DOC
    soft: bool = False  # TIE: a disagreement is a warning (a speed / memory knob), not an error
    # MAP with ``ok``: only those values map; any other is refused naming this verl feature (with ``nearest``)
    refused: str = ""
    # SAME with ``maps``: these values are mapped to ``target`` (with ``convert``) instead (verl's float16 dtypes)
    maps: tuple = ()

    def matches(self, key: str) -> bool:
        return _regex(self.pattern).fullmatch(key) is not None


_CACHE: dict[str, re.Pattern] = {}


def _regex(pattern: str) -> re.Pattern:
    if pattern not in _CACHE:
        _CACHE[pattern] = re.compile(re.escape(pattern).replace(r"\*", r"[^=]+"))
    return _CACHE[pattern]


def _m(pattern, target, convert=None, note=""):
    return Rule(pattern=pattern, kind=MAP, target=target, convert=convert, note=note)


def _same(pattern, ok, note, nearest="", ref=DOC):
    return Rule(pattern=pattern, kind=SAME, ok=tuple(ok), note=note, nearest=nearest, ref=ref)


def _eng(pattern, kwarg, note=""):
    return Rule(pattern=pattern, kind=ENGINE, target=kwarg, note=note)


def _ign(pattern, note):
    return Rule(pattern=pattern, kind=IGNORE, note=note)


def _no(pattern, feature, nearest, ref=DOC):
    return Rule(pattern=pattern, kind=REFUSE, note=feature, nearest=nearest, ref=ref)


def _tie(pattern, target, note):
    return Rule(pattern=pattern, kind=TIE, target=target, note=note)


_RR = ("MoE routing replay (rl-routing-replay): R2 replays the old-log-prob pass's routing in the update, R3 the rollout's (with rollout.enable_rollout_routing_replay) in both; the train backend's card must say it replays (fsdp and megatron do)")


def _RR_REST(engine: str | None) -> list[Rule]:
    """verl's other router_replay keys of an engine section (None: the actor's / ref's own): the reference model routes
    natively (verl's default ref mode is disabled); routing files are not read or written."""
    sec = f".{engine}" if engine else ""
    return [
        _same(f"actor_rollout_ref.ref{sec}.router_replay.mode", ["disabled"], "MoE routing replay in the reference model", "actor.router_replay (the actor's)"),
        _same(f"actor_rollout_ref.*{sec}.router_replay.{{record_file,replay_file}}", [None], "recording MoE routing to a file / replaying it from one", "actor.router_replay"),
    ]


def _strategy(value: Any) -> Any:
    """verl's engine names (fsdp2, dp, megatron_actor, veomni, fsdp_turbo, mlite_actor, ...) -> rl-core's train backend."""
    return BACKEND_OF.get(str(value).lower(), value)


def _row(kind: str, pattern: str, *args: Any) -> Rule:
    """A row of :data:`rl_verl.engines.ROWS` as a :class:`Rule`."""
    if kind in (MAP, TIE, ALIAS, HOLD):
        return Rule(pattern=pattern, kind=kind, target=args[0], note=args[1], convert=args[2] if len(args) > 2 else None)
    if kind == SAME:
        return _same(pattern, args[0], args[1], args[2])
    if kind == REFUSE:
        return _no(pattern, args[0], args[1])
    return _ign(pattern, args[0])


def _resume(value: Any) -> Any:
    v = str(value).lower()
    return {"auto": True, "disable": False}.get(v, value)


def _dtype_name(value: Any) -> Any:
    return {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16"}.get(str(value).lower(), value)


FP16 = ("float16", "fp16", "half")
#: the actor's compute-dtype keys, for messages (rl_verl.dtype)
ACTOR_DTYPE_KEYS = "actor_rollout_ref.actor.megatron.dtype / actor_rollout_ref.actor.fsdp_config.dtype"


def _dtype(pattern: str, ok, note: str) -> Rule:
    """A verl compute-dtype key: bfloat16 spellings ``ok`` as before, float16 ones set model.dtype=float16 (float32
    master weights and AdamW, dynamic loss scaling: rl_core.train_engine.loss_scale); their agreement with the other
    dtype keys is checked after loading (rl_verl.dtype)."""
    return Rule(pattern=pattern, kind=SAME, ok=tuple(ok), note=note, nearest="model.dtype", target="model.dtype", maps=FP16, convert=_dtype_name)


def _loggers(value: Any) -> Any:
    items = value if isinstance(value, (list, tuple)) else [value]
    return ["console" if str(x) == "console" else str(x) for x in items]


_ENGINES = ("fsdp", "fsdp2", "megatron", "dp")
_DYN = "rl-core forms the log-prob passes' micro-batches like the update's (actor.use_dynamic_bsz, actor.ppo_max_token_len_per_gpu)"
_OFF = "offloading parameters / gradients / optimizer states to CPU"
_PERF = "a speed / memory knob of verl's implementation; rl-core computes the same values its own way"

_OVERLONG = ("reward_model.reward_kwargs.overlong_buffer_cfg", "reward.reward_kwargs.overlong_buffer_cfg", "reward_model.overlong_buffer")
_OVERLONG_KEYS = (
    ("enable", "enable", None, "DAPO's overlong-response penalty on the training rewards (validation scores are left as the task scores them)"),
    ("len", "buffer_length", lambda v: None if norm(v) == 0 else v, "the buffer L in tokens (verl's 0 = unset)"),
    ("penalty_factor", "penalty_factor", None, ""),
    ("log", "log", None, "reward/overlong_penalty_mean and reward/overlong_fraction in the metrics"),
)

#: per-role prefixes verl repeats: the actor's, the reference model's and the critic's settings
_ROLES = ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic")

RULES: tuple[Rule, ...] = (
    # ---------------------------------------------------------------- engine selection (Hydra groups)
    _m("model_engine", "train.name", _strategy,
       note="verl's engine group: dp and veomni -> fsdp, megatron -> megatron (rl_verl.engines); torchtitan and automodel are refused"),
    _m("actor@actor_rollout_ref.actor", "train.name", _strategy,
       note="dp_actor / veomni_actor -> fsdp, megatron_actor / mlite_actor (Megatron Lite) -> megatron"),
    _m("actor_rollout_ref.actor.strategy", "train.name", _strategy,
       note="fsdp / fsdp2 / veomni / fsdp_turbo -> fsdp (rl-core's FSDP is FSDP2), megatron / mlite -> megatron"),
    _tie("actor_rollout_ref.ref.strategy", "train.name", "the reference model runs on the actor's train backend"),
    _tie("critic.strategy", "train.name", "the critic runs on the actor's train backend"),
    _tie("ref@actor_rollout_ref.ref", "train.name", "the reference model runs on the actor's train backend"),
    _tie("critic@critic", "train.name", "the critic runs on the actor's train backend"),
    _ign("rollout@actor_rollout_ref.rollout", "verl's rollout config group; rl-core picks the engine by rollout.name"),
    _m("actor_rollout_ref.actor.megatron.tensor_model_parallel_size", "train.tensor_model_parallel_size"),
    _m("actor_rollout_ref.actor.megatron.pipeline_model_parallel_size", "train.pipeline_model_parallel_size"),
    _m("actor_rollout_ref.actor.megatron.expert_model_parallel_size", "train.expert_model_parallel_size",
       note="Megatron expert parallelism: each MoE layer's experts split over EP ranks (Qwen2-MoE / Qwen3-MoE on the megatron backend)"),
    _m("actor_rollout_ref.actor.megatron.expert_tensor_parallel_size", "train.expert_tensor_parallel_size",
       note="the TP size of each expert (1 or the TP size; null = TP)"),
    _m("actor_rollout_ref.actor.megatron.context_parallel_size", "train.context_parallel_size",
       note="the megatron backend's context parallelism: 2 x CP load-balanced chunks per sequence, keys / values all-gathered (rl_train_megatron.context_parallel)"),
    _m("actor_rollout_ref.actor.megatron.virtual_pipeline_model_parallel_size", "train.options.virtual_pipeline_model_parallel_size",
       note="Megatron virtual (interleaved) pipeline stages: model chunks per pipeline stage, megatron-core's interleaved layer layout (megatron backend)"),
    _m("actor_rollout_ref.actor.megatron.sequence_parallel", "train.options.transformer_config.sequence_parallel",
       note="Megatron sequence parallelism with TP > 1 (rl_train_megatron.sequence_parallel; needed by MoE models with TP > 1); with TP 1 off, as in megatron-core"),
    _ign("actor_rollout_ref.ref.megatron.sequence_parallel", "the reference model is built with the actor's TransformerConfig (its sequence parallelism)"),
    _tie("actor_rollout_ref.ref.megatron.tensor_model_parallel_size", "train.tensor_model_parallel_size", "the reference model uses the actor's parallel layout"),
    _tie("actor_rollout_ref.ref.megatron.pipeline_model_parallel_size", "train.pipeline_model_parallel_size", "the reference model uses the actor's parallel layout"),
    _tie("critic.megatron.tensor_model_parallel_size", "train.tensor_model_parallel_size", "the critic uses the actor's parallel layout"),
    _tie("critic.megatron.pipeline_model_parallel_size", "train.pipeline_model_parallel_size", "the critic uses the actor's parallel layout"),
    _tie("actor_rollout_ref.ref.megatron.expert_model_parallel_size", "train.expert_model_parallel_size", "the reference model uses the actor's parallel layout"),
    _tie("actor_rollout_ref.ref.megatron.expert_tensor_parallel_size", "train.expert_tensor_parallel_size", "the reference model uses the actor's parallel layout"),
    _tie("actor_rollout_ref.ref.megatron.context_parallel_size", "train.context_parallel_size", "the reference model uses the actor's parallel layout"),
    _tie("critic.megatron.context_parallel_size", "train.context_parallel_size", "the critic uses the actor's parallel layout"),
    _tie("actor_rollout_ref.ref.megatron.virtual_pipeline_model_parallel_size", "train.options.virtual_pipeline_model_parallel_size",
         "the reference model uses the actor's parallel layout"),
    _tie("critic.megatron.virtual_pipeline_model_parallel_size", "train.options.virtual_pipeline_model_parallel_size",
         "the critic uses the actor's parallel layout"),
    # Megatron offload between phases (rl_train_megatron.options, rl_offload.offload)
    *(_m(f"actor_rollout_ref.actor.megatron.{k}_offload", f"train.options.{k}_offload",
         note=f"the actor's {dict(param='parameters', grad='gradients', optimizer='AdamW state')[k]} in host memory between phases (megatron backend)") for k in ("param", "grad", "optimizer")),
    _m("actor_rollout_ref.ref.megatron.param_offload", "train.options.ref_param_offload",
       note="the reference model's parameters in host memory between its log-prob passes (megatron backend)"),
    *(_ign(f"actor_rollout_ref.ref.megatron.{k}_offload", "the reference model has no gradients or optimizer to offload") for k in ("grad", "optimizer")),
    *(_same(f"critic.megatron.{k}_offload", [False], _OFF + " (the Megatron critic)", "train.options.param_offload / optimizer_offload (the actor's)", OFFLOAD)
      for k in ("param", "grad", "optimizer")),
    *(_ign(f"{r}.megatron.{k}", "how verl converts HF weights for Megatron; rl-core converts Llama / Qwen2 / Qwen3 (dense) weights itself (rl_train_megatron.convert)")
      for r in _ROLES for k in ("use_mbridge", "vanilla_mbridge", "use_dist_checkpointing", "dist_checkpointing_path")),
    # Megatron-FSDP: fully sharded data parallelism of the Megatron model (rl_train_megatron.fully_sharded), on torch FSDP2's
    # fully_shard, not megatron-core's megatron_fsdp package (CUDA streams; cannot run on the CPU): the same sharding and numbers
    _m("actor_rollout_ref.actor.megatron.use_megatron_fsdp", "train.options.fully_shard",
       note="fully sharded data parallelism (ZeRO-3) of the Megatron model: parameters, gradients and AdamW state sharded over the "
            "data-parallel ranks of each TP shard, gathered layer by layer, gradients reduce-scattered; on torch FSDP2's fully_shard, not "
            "NVIDIA's megatron_fsdp package (same sharding and numbers, other kernels and overlap); dense models, TP x DP "
            "(rl_train_megatron.fully_sharded)"),
    _tie("actor_rollout_ref.ref.megatron.use_megatron_fsdp", "train.options.fully_shard", "the reference model uses the actor's parallel layout"),
    _tie("critic.megatron.use_megatron_fsdp", "train.options.fully_shard", "the critic uses the actor's parallel layout"),
    *(_dtype(f"{r}.megatron.dtype", ["bfloat16", "bf16"], "a Megatron compute dtype other than bfloat16 / float16") for r in _ROLES),
    _ign("actor_rollout_ref.*.megatron.override_transformer_config.*_fusion",
         "a Megatron kernel-fusion switch (" + _PERF + ")"),
    _ign("actor_rollout_ref.*.megatron.override_transformer_config.use_fused_*", "a Megatron kernel-fusion switch (" + _PERF + ")"),
    _ign("actor_rollout_ref.*.megatron.override_transformer_config.{use_flash_attn,persist_layer_norm,deallocate_pipeline_outputs,moe_grouped_gemm}",
         "a Megatron kernel switch (" + _PERF + ")"),
    # MindSpeed's (Ascend) TransformerConfig fields that verl's Ascend scripts pass: its context-parallel algorithm (rl-core's CP is the
    # KV all-gather one: rl_train_megatron.context_parallel) and its naive (torch) L2 norm instead of a fused kernel
    _same("actor_rollout_ref.*.megatron.override_transformer_config.context_parallel_algo", ["kvallgather_cp_algo"],
          "a context-parallel algorithm other than the keys / values all-gather (MindSpeed's megatron_cp_algo ring attention, ulysses_cp_algo, "
          "hybrid_cp_algo)", "train.context_parallel_size (rl-core's Megatron CP all-gathers the keys and values: kvallgather_cp_algo)"),
    _ign("actor_rollout_ref.*.megatron.override_transformer_config.use_naive_l2norm", "MindSpeed's choice of a plain L2-norm kernel (" + _PERF + ")"),
    _same("actor_rollout_ref.*.megatron.override_transformer_config.swiglu", [True], "a Megatron MLP other than SwiGLU", "none (rl-core's Megatron MLP is SwiGLU)"),
    _m("actor_rollout_ref.actor.megatron.override_transformer_config.use_distributed_optimizer", "train.distributed_optimizer",
       note="Megatron's distributed optimizer: AdamW's state sharded over the data-parallel ranks that hold the same weights (ZeRO-1, "
            "rl_train_megatron.zero; megatron-core's own DistributedOptimizer needs CUDA parameters, so the megatron backend deals "
            "whole tensors to owner ranks and broadcasts their update: the same numbers as the plain optimizer)"),
    _ign("actor_rollout_ref.ref.megatron.override_transformer_config.use_distributed_optimizer", "the reference model has no optimizer"),
    _m("actor_rollout_ref.actor.megatron.override_transformer_config.*", "train.options.transformer_config.*",
       note="fields of megatron-core's TransformerConfig: activation recomputation (recompute_*) is passed to the model, and for MoE models "
            "the router / aux-loss / dispatcher fields (moe_router_dtype, moe_aux_loss_coeff, moe_z_loss_coeff, moe_router_load_balancing_type, "
            "moe_token_dispatcher_type, moe_enable_deepep, ...: rl_train_megatron.options.MOE_PASSED); any other field only "
            "at the value rl-core builds with (checked against the dataclass by the megatron backend); aux-loss-free expert bias "
            "(moe_router_enable_expert_bias, moe_router_bias_update_rate) for the sigmoid-routed HY-V3 / GLM-4-MoE only; "
            "sequence_parallel runs Megatron sequence parallelism with TP > 1. Uneven pipeline stages (num_layers_in_first / last_pipeline_stage, "
            "account_for_embedding / loss_in_pipeline_split) and megatron-core's custom pipeline_model_parallel_layout are passed and the "
            "conversion follows them (rl_train_megatron.stages, rl_train_megatron.layout). DeepSeek sparse attention's indexer fields "
            "(dsa_indexer_*) have no effect (warning): no model the backend builds has DSA, and a DSA model is refused by its architecture"),
    Rule(pattern="actor_rollout_ref.ref.megatron.override_transformer_config.*", kind=TIE, target="train.options.transformer_config.*",
         note="the reference model is built with the actor's TransformerConfig fields"),
    _same("actor_rollout_ref.*.megatron.use_remove_padding", [True, False], "padding removal is a speed knob; rl-core masks padding"),
    _m("actor_rollout_ref.actor.megatron.router_replay.mode", "actor.router_replay", note=_RR),
    *_RR_REST("megatron"),
    _no("actor_rollout_ref.*.megatron.*", "this Megatron setting", "train.tensor_model_parallel_size, train.pipeline_model_parallel_size"),
    _no("critic.megatron.*", "this Megatron setting", "train.tensor_model_parallel_size, train.pipeline_model_parallel_size"),
    # ---------------------------------------------------------------- FSDP settings
    # the actor's offload is rl-core's (one device: rl_train_fsdp.offload; several ranks: FSDP2's CPUOffloadPolicy for
    # either switch); the reference never trains (no optimizer) and,
    # under LoRA, is the actor itself with its adapters off
    *(_m(f"actor_rollout_ref.actor.fsdp_config.{k}_offload", f"actor.fsdp_config.{k}_offload") for k in ("param", "optimizer")),
    *(_ign(f"actor_rollout_ref.ref.fsdp_config.{k}_offload", "offloading the reference model (rl-core keeps it on the device; "
           "with LoRA there is no reference copy: the actor with its adapters off)") for k in ("param", "optimizer")),
    *(_m(f"critic.{s}.{k}", f"critic.fsdp_config.{k}", note="the critic's offload, as the actor's (fsdp backend)")
      for s in ("fsdp", "model.fsdp_config") for k in ("param_offload", "optimizer_offload", "offload_policy")),
    _m("actor_rollout_ref.actor.fsdp_config.offload_policy", "actor.fsdp_config.offload_policy",
       note="FSDP2's CPUOffloadPolicy when sharded (parameters, gradients, AdamW state and its step in host memory); "
            "on one device rl-core's param_offload + optimizer_offload"),
    _ign("actor_rollout_ref.ref.fsdp_config.offload_policy", "offloading the reference model (rl-core keeps it on the device; "
         "with LoRA there is no reference copy: the actor with its adapters off)"),
    # Ulysses sequence parallelism (#33): one size for every role of the fsdp backend, the actor's
    *(_m(f"actor_rollout_ref.actor.{s}ulysses_sequence_parallel_size", "actor.ulysses_sequence_parallel_size",
         note="Ulysses sequence parallelism (rl_train_fsdp.ulysses); every role uses the actor's size") for s in ("", "fsdp_config.")),
    *(_tie(f"{r}.{s}ulysses_sequence_parallel_size", "actor.ulysses_sequence_parallel_size",
           "rl-core runs every role with the actor's Ulysses size (actor.ulysses_sequence_parallel_size)")
      for r in ("actor_rollout_ref.ref", "actor_rollout_ref.rollout", "critic", "critic.model") for s in ("", "fsdp_config.")),
    _m("actor_rollout_ref.actor.fsdp_config.fsdp_size", "actor.fsdp_config.fsdp_size",
       note="hybrid sharding (HSDP): each model copy sharded over fsdp_size ranks, world / fsdp_size copies; every role uses the actor's"),
    *(Rule(pattern=f"{r}.fsdp_config.fsdp_size", kind=TIE, target="actor.fsdp_config.fsdp_size", soft=True,
           note="every role of the fsdp backend is sharded like the actor (actor.fsdp_config.fsdp_size): only where its memory lives differs")
      for r in ("actor_rollout_ref.ref", "actor_rollout_ref.rollout", "critic.model")),
    _ign("actor_rollout_ref.*.fsdp_config.reshard_after_forward", "FSDP2 resharding after forward (" + _PERF + "; rl-core reshards)"),
    _ign("actor_rollout_ref.*.fsdp_config.entropy_checkpointing", "recomputing the entropy in backward (" + _PERF + ")"),
    _ign("actor_rollout_ref.*.fsdp_config.{forward_prefetch,use_orig_params,limit_all_gathers}", _PERF),
    _ign("actor_rollout_ref.*.fsdp_config.entropy_from_logits_with_chunking", "computing the entropy in chunks (" + _PERF + "; rl-core chunks with model.logprob_chunk_size)"),
    _ign("actor_rollout_ref.*.fsdp_config.wrap_policy.*", "FSDP wrapping (rl-core shards every decoder layer)"),
    _same("actor_rollout_ref.*.fsdp_config.model_dtype", ["fp32", "float32", "bfloat16", "bf16"],
          "FSDP parameters kept in half precision", "model.dtype"),
    _dtype("actor_rollout_ref.*.fsdp_config.mixed_precision.param_dtype", ["bf16", "bfloat16"], "FSDP mixed precision other than bfloat16 / float16 parameters"),
    _dtype("actor_rollout_ref.*.fsdp_config.dtype", ["bf16", "bfloat16"], "an FSDP engine compute dtype other than bfloat16 / float16"),
    _m("actor_rollout_ref.actor.fsdp_config.mixed_precision.reduce_dtype", "actor.fsdp_config.reduce_dtype", _dtype_name,
       note="the dtype the actor's gradients are reduced in across ranks (FSDP2 MixedPrecisionPolicy); float32 / bfloat16"),
    _ign("actor_rollout_ref.ref.fsdp_config.mixed_precision.reduce_dtype", "the reference model computes no gradients, so there is nothing to reduce"),
    _same("actor_rollout_ref.*.fsdp_config.mixed_precision.buffer_dtype", ["fp32", "float32"], "FSDP buffers in a dtype other than float32", "model.dtype"),
    # verl's veomni / fsdp_turbo / megatron-lite engines' settings (rl_verl.engines)
    *(_row(*r) for r in ENGINE_ROWS),
    _no("actor_rollout_ref.*.torchtitan.*", "verl's torchtitan engine", "train.name=fsdp or megatron"),
    _m("actor_rollout_ref.actor.fsdp_config.pad_to_length_bucket", "actor.fsdp_config.pad_to_length_bucket"),
    _ign("actor_rollout_ref.ref.fsdp_config.pad_to_length_bucket", "the reference model's packed-row granularity (" + _PERF + "; it follows the actor's)"),
    _no("actor_rollout_ref.*.fsdp_config.*", "this FSDP setting", "train.name=fsdp (FSDP2 over all ranks, bf16 mixed precision on GPU)"),
    _no("critic.fsdp.*", "this FSDP setting of the critic", "train.name=fsdp"),
    # ---------------------------------------------------------------- model
    _m("actor_rollout_ref.model.use_remove_padding", "actor.use_remove_padding",
       note="packed sequences in the train forwards (rl_train_fsdp.packing); the same values as padded, computed faster"),
    Rule(pattern="critic.model.use_remove_padding", kind=TIE, target="actor.use_remove_padding", soft=True,
         note="every role of the fsdp backend packs as the actor does (actor.use_remove_padding)"),
    _ign("actor_rollout_ref.model.use_fused_kernels", "verl's fused LM-head log-prob kernel; rl-core computes the log-probs in chunks (model.logprob_chunk_size) with the same values"),
    _ign("actor_rollout_ref.model.fused_kernel_options.*", "options of verl's fused LM-head kernel (see use_fused_kernels)"),
    _m("actor_rollout_ref.model.enable_activation_offload", "model.enable_activation_offload",
       note="the activations a training forward saves are kept in host memory until backward (fsdp backend; rl_train_fsdp.activations)"),
    _tie("critic.model.enable_activation_offload", "model.enable_activation_offload", "the critic follows model.enable_activation_offload"),
    _same("actor_rollout_ref.model.use_shm", [False], "loading the model through shared memory", "model.path (a local folder)"),
    # LoRA (rl-lora, docs/lora.md): verl's keys have rl-core's meaning ("all-linear" or a list of names)
    *(_m(f"actor_rollout_ref.model.{k}", f"model.{k}") for k in ("lora_rank", "lora_alpha", "target_modules", "lora_adapter_path")),
    _m("actor_rollout_ref.model.exclude_modules", "model.exclude_modules", lambda v: [] if v is None else v),
    _no("actor_rollout_ref.model.lora_*", "this LoRA setting", "model.lora_rank, lora_alpha, target_modules, exclude_modules, lora_dropout, lora_adapter_path", "docs/lora.md"),
    _no("actor_rollout_ref.model.mtp.*", "multi-token-prediction (MTP) heads", "none"),
    _same("actor_rollout_ref.model.external_lib", [None], "importing a model library at start-up", "model.trust_remote_code"),
    _m("actor_rollout_ref.model.enable_gradient_checkpointing", "model.enable_gradient_checkpointing"),
    _tie("critic.model.enable_gradient_checkpointing", "model.enable_gradient_checkpointing", "the critic follows model.enable_gradient_checkpointing"),
    _m("critic.model.path", "critic.model_path"),
    _same("critic.model.tokenizer_path", [None], "a critic with a tokenizer of its own", "the actor's tokenizer is used"),
    _tie("critic.model.trust_remote_code", "model.trust_remote_code", "the critic follows model.trust_remote_code"),
    _m("actor_rollout_ref.model.override_config.*", "model.override_config.*"),
    # ---------------------------------------------------------------- actor / ref / critic
    _m("actor_rollout_ref.actor.clip_ratio_low", "actor.clip_ratio_low"),
    _m("actor_rollout_ref.actor.policy_loss.loss_mode", "actor.policy_loss"),
    _m("actor_rollout_ref.actor.policy_loss.*", "actor.policy_loss_options.*", note="knobs of single policy losses (SAPO's tau_pos / tau_neg, clip_cov_*, kl_cov_ratio, ppo_kl_coef, dro_beta)"),
    *(_m(f"actor_rollout_ref.actor.{k}", f"actor.policy_loss_options.{k}") for k in ("tau_pos", "tau_neg")),
    _m("actor_rollout_ref.actor.grad_clip", "actor.optim.grad_clip"),
    _m("actor_rollout_ref.actor.optim.clip_grad", "actor.optim.grad_clip"),
    _m("critic.grad_clip", "critic.optim.grad_clip"),
    _m("critic.optim.clip_grad", "critic.optim.grad_clip"),
    _same("actor_rollout_ref.actor.optim.optimizer", ["AdamW", "adamw", "adam"], "an optimizer other than AdamW", "actor.optim.*"),
    _m("actor_rollout_ref.actor.optim.min_lr", "actor.optim.min_lr", lambda v: None if not v else v,
       note="the end of the LR decay as an absolute rate (megatron-core's min_lr; 0 = verl's default = no floor)"),
    _same("actor_rollout_ref.actor.optim.lr_warmup_init", [0, None], "a warm-up starting above 0", "actor.optim.lr_warmup_steps"),
    _m("actor_rollout_ref.actor.optim.warmup_style", "actor.optim.lr_scheduler"),
    _m("actor_rollout_ref.actor.optim.lr_scheduler_type", "actor.optim.lr_scheduler", note="verl's newer name of warmup_style: constant / cosine"),
    _m("actor_rollout_ref.actor.optim.lr_decay_style", "actor.optim.lr_scheduler",
       note="verl's Megatron optimizer's decay: constant / linear / cosine (inverse_square_root is refused by rl-core's choices)"),
    _ign("actor_rollout_ref.actor.optim.override_optimizer_config.{overlap_cpu_optimizer_d2h_h2d,use_precision_aware_optimizer}",
         "Megatron optimizer placement (" + _PERF + ")"),
    _m("actor_rollout_ref.actor.optim.override_optimizer_config.optimizer_cpu_offload", "train.options.optimizer_cpu_offload",
       note="megatron-core's CPU optimizer: AdamW's state and step on the host (megatron backend; rl_offload.offload.host_step)"),
    _m("actor_rollout_ref.actor.optim.override_optimizer_config.{optimizer_offload_fraction,offload_fraction}", "train.options.optimizer_offload_fraction",
       note="the share (by numel) of parameters the CPU optimizer steps on the host, the rest on the device (megatron-core's "
       "optimizer_offload_fraction; offload_fraction is Megatron Lite's spelling)"),
    _no("actor_rollout_ref.actor.optim.override_optimizer_config.*", "overriding Megatron's optimizer config", "actor.optim.*"),
    _ign("actor_rollout_ref.*.use_torch_compile", "torch.compile of verl's log-prob / entropy functions (" + _PERF + "; rl-core's model.compile compiles the decoder layers)"),
    _ign("actor_rollout_ref.*.entropy_from_logits_with_chunking", "computing the entropy in chunks (" + _PERF + "; rl-core chunks with model.logprob_chunk_size)"),
    _ign("actor_rollout_ref.*.entropy_checkpointing", "recomputing the entropy in backward (" + _PERF + ")"),
    _m("actor_rollout_ref.actor.checkpoint.save_contents", "trainer.save_contents",
       note="what each checkpoint holds: model, optimizer, extra (the LR schedule), hf_model (an HF folder); model is required"),
    _m("actor_rollout_ref.actor.checkpoint.load_contents", "trainer.load_contents",
       note="what a resume reads; without optimizer AdamW starts fresh, without extra the LR schedule is put at the resumed step"),
    _tie("critic.checkpoint.save_contents", "trainer.save_contents", "one checkpoint setting for every role"),
    _tie("critic.checkpoint.load_contents", "trainer.load_contents", "one checkpoint setting for every role"),
    _ign("actor_rollout_ref.actor.checkpoint.strict", "strict checkpoint loading: rl-core always checks a checkpoint against the model"),
    _m("actor_rollout_ref.actor.pad_to_length", "actor.pad_to_length",
       note="every packed micro-batch padded up to a multiple of actor.fsdp_config.pad_to_length_bucket tokens (fixed shapes; same numbers)"),
    _tie("actor_rollout_ref.ref.pad_to_length", "actor.pad_to_length", "the reference model's forward follows the actor's packing"),
    # verl's per-role profiler: which roles' calls profiler.tool records (rl_profiling.profiling)
    *(_m(f"actor_rollout_ref.{r}.profiler.enable", f"profiler.{r}", note=f"record the {r}'s calls in the chosen steps") for r in ("actor", "rollout", "ref")),
    _m("actor_rollout_ref.actor.profiler.ranks", "profiler.ranks", note="the worker ranks that record (rl-core's ranks hold every colocated role)"),
    _m("actor_rollout_ref.actor.profiler.all_ranks", "profiler.all_ranks"),
    *(_tie(f"actor_rollout_ref.{r}.profiler.{k}", f"profiler.{k}", "one set of profiled ranks for every role (the roles share the workers)")
      for r in ("rollout", "ref") for k in ("ranks", "all_ranks")),
    _m("critic.profiler.enable", "profiler.critic", note="record the critic's calls in the chosen steps"),
    *(_tie(f"critic.profiler.{k}", f"profiler.{k}", "one set of profiled ranks for every role (the roles share the workers)") for k in ("ranks", "all_ranks")),
    _tie("critic.profiler.tool", "profiler.tool", "one profiler tool for every role (global_profiler.tool)"),
    _tie("critic.profiler.save_path", "profiler.save_path", "one trace folder for every role (global_profiler.save_path)"),
    _no("critic.profiler.*", "this setting of verl's per-role profiler", "profiler.* (torch.profiler traces of the chosen steps)"),
    _tie("actor_rollout_ref.*.profiler.tool", "profiler.tool", "one profiler tool for every role (global_profiler.tool)"),
    _tie("actor_rollout_ref.*.profiler.save_path", "profiler.save_path", "one trace folder for every role (global_profiler.save_path)"),
    _no("actor_rollout_ref.*.profiler.tool_config.npu.*", "Ascend NPU profiler settings (verl's npu tool)", "profiler.tool=torch"),
    _no("actor_rollout_ref.*.profiler.*", "this setting of verl's per-role profiler", "profiler.* (torch.profiler traces of the chosen steps)"),
    _same("actor_rollout_ref.actor.ppo_micro_batch_size", [None], "a global micro-batch size (verl's deprecated spelling)",
          "actor.ppo_micro_batch_size_per_gpu (sequences per rank)"),
    _same("actor_rollout_ref.{rollout,ref}.log_prob_micro_batch_size", [None], "a global micro-batch size (verl's deprecated spelling)",
          "actor.log_prob_micro_batch_size_per_gpu (sequences per rank)"),
    _tie("actor_rollout_ref.ref.log_prob_use_dynamic_bsz", "actor.use_dynamic_bsz", _DYN),
    *(Rule(pattern=f"actor_rollout_ref.{r}.log_prob_max_token_len_per_gpu", kind=TIE, target="actor.ppo_max_token_len_per_gpu", soft=True,
           note=_DYN + ": a different budget only changes how many rows a no-gradient pass takes at once, not the log-probs")
      for r in ("ref", "rollout")),
    _tie("actor_rollout_ref.rollout.log_prob_use_dynamic_bsz", "actor.use_dynamic_bsz", _DYN),
    _tie("critic.use_dynamic_bsz", "actor.use_dynamic_bsz", "the critic's micro-batches follow the actor's setting"),
    _ign("critic.ppo_max_token_len_per_gpu", "the critic's token budget: rl-core's critic uses critic.ppo_micro_batch_size_per_gpu sequences per micro-batch (same gradients)"),
    _ign("critic.forward_max_token_len_per_gpu", "the critic's forward token budget (see critic.ppo_max_token_len_per_gpu)"),
    _m("critic.model.override_config.*", "model.override_config.*"),
    _tie("trainer.max_critic_ckpt_to_keep", "trainer.max_ckpt_to_keep", "one limit for every role's checkpoints (trainer.max_ckpt_to_keep)"),
    _no("critic.model.*", "this critic model setting", "critic.model_path; the critic is built like the actor"),
    _m("actor_rollout_ref.actor.router_replay.mode", "actor.router_replay", note=_RR),
    *_RR_REST(None),
    # ---------------------------------------------------------------- rollout
    _m("actor_rollout_ref.rollout.val_kwargs.temperature", "rollout.val_temperature"),
    _m("actor_rollout_ref.rollout.val_kwargs.n", "rollout.val_n"),
    _m("actor_rollout_ref.rollout.val_kwargs.top_p", "rollout.val_top_p"),
    _m("actor_rollout_ref.rollout.val_kwargs.top_k", "rollout.val_top_k"),
    _m("actor_rollout_ref.rollout.val_kwargs.do_sample", "rollout.val_do_sample"),
    _m("actor_rollout_ref.rollout.response_length", "data.max_response_length"),
    _tie("actor_rollout_ref.rollout.prompt_length", "data.max_prompt_length", "the rollout's prompt budget is data.max_prompt_length"),
    _m("actor_rollout_ref.rollout.free_cache_engine", "rollout.enable_sleep", note="the engine frees its memory between rollouts"),
    _eng("actor_rollout_ref.rollout.enable_chunked_prefill", "enable_chunked_prefill"),
    _eng("actor_rollout_ref.rollout.max_num_batched_tokens", "max_num_batched_tokens"),
    _eng("actor_rollout_ref.rollout.max_num_seqs", "max_num_seqs"),
    _eng("actor_rollout_ref.rollout.max_model_len", "max_model_len"),
    _eng("actor_rollout_ref.rollout.enforce_eager", "enforce_eager"),
    _eng("actor_rollout_ref.rollout.enable_prefix_caching", "enable_prefix_caching"),
    _eng("actor_rollout_ref.rollout.cudagraph_capture_sizes", "cudagraph_capture_sizes"),
    _eng("actor_rollout_ref.rollout.disable_log_stats", "disable_log_stats", note="the engine's periodic statistics log lines (logging only)"),
    _same("actor_rollout_ref.rollout.moe_tensor_parallel_size", [1, None],
          "tensor parallelism of MoE layers in the rollout engine (verl itself refuses a size > 1 with the vllm and sglang rollouts, "
          "taking one only with its TensorRT-LLM rollout: 'moe_tensor_parallel_size is only supported for trtllm'; vLLM has no MoE TP size, "
          "SGLang derives it as TP / EP)",
          "rollout.expert_parallel_size"),
    _dtype("actor_rollout_ref.rollout.dtype", ["bfloat16", "bf16", "auto"], "a rollout engine dtype other than bfloat16 / float16"),
    _same("actor_rollout_ref.rollout.load_format", ["dummy", "dummy_dtensor", "auto", "safetensors", "hf"], "loading the engine's weights in another format", "none (rl-core syncs the actor's weights)"),
    _same("actor_rollout_ref.rollout.ignore_eos", [False], "generating past the end-of-sequence token", "none"),
    _same("actor_rollout_ref.rollout.mode", ["async", "sync"], "a rollout mode other than verl's sync / async (rl-core's engines batch the step's prompts)"),
    _m("actor_rollout_ref.rollout.data_parallel_size", "rollout.data_parallel_size",
       note="data-parallel attention: one engine spans TP x DP devices (vLLM's data_parallel_size; rl_core.rollout.moe_parallel)"),
    _m("actor_rollout_ref.rollout.expert_parallel_size", "rollout.expert_parallel_size",
       note="the MoE experts spread over the engine's TP x DP ranks (vLLM's enable_expert_parallel, SGLang's ep_size)"),
    _same("actor_rollout_ref.rollout.pipeline_model_parallel_size", [1], "pipeline parallelism in the rollout engine", "rollout.tensor_model_parallel_size"),
    _ign("actor_rollout_ref.rollout.checkpoint_engine.*", "how verl moves weights into the rollout engine (" + _PERF + "; rl-core syncs them in buckets itself)"),
    _ign("actor_rollout_ref.rollout.multi_stage_wake_up", "waking the engine in stages (" + _PERF + ")"),
    _ign("actor_rollout_ref.rollout.layered_summon", "gathering FSDP weights layer by layer for the sync (" + _PERF + ")"),
    _same("actor_rollout_ref.rollout.skip_tokenizer_init", [True, False],
          "token ids in and out of the rollout engine (rl-core's engines take prompt token ids and return token ids, whatever this says)"),
    _m("actor_rollout_ref.rollout.enable_rollout_routing_replay", "rollout.return_routed_experts",
       note="the rollout engine returns each token's routed experts, for router_replay.mode=R3 (rl-routing-replay)"),
    _m("actor_rollout_ref.rollout.multi_turn.{enable,max_assistant_turns,max_tool_response_length,tool_response_truncate_side,tool_config_path,format,max_parallel_calls}",
       "rollout.multi_turn.*", note="multi-turn / tool-calling rollouts (docs/agents.md)"),
    _m("actor_rollout_ref.rollout.multi_turn.tokenization_sanity_check_mode", "rollout.multi_turn.check_tokens",
       lambda v: str(v) != "disable", note="strict / ignore_strippable -> true, disable -> false"),
    _same("actor_rollout_ref.rollout.multi_turn.max_user_turns", [None], "simulated user turns (verl's interactions)", "rollout.multi_turn.max_assistant_turns", MULTI_TURN),
    _same("actor_rollout_ref.rollout.multi_turn.interaction_config_path", [None], "simulated user turns (verl's interactions)", "none", MULTI_TURN),
    _same("actor_rollout_ref.rollout.multi_turn.use_inference_chat_template", [False], "re-rendering the trajectory with the inference chat template", "rollout.multi_turn.check_tokens", MULTI_TURN),
    _no("actor_rollout_ref.rollout.multi_turn.*", "this multi-turn setting", "rollout.multi_turn.* (docs/agents.md)", MULTI_TURN),
    _m("actor_rollout_ref.rollout.agent.default_agent_loop", "rollout.multi_turn.agent_loop",
       lambda v: "tool_agent" if str(v) == "single_turn_agent" else v,
       note="tool_agent is rl-core's built-in of that name; single_turn_agent needs no loop (rollout.multi_turn.enable=false)"),
    _no("actor_rollout_ref.rollout.agent.*", "this setting of verl's agent loop", "rollout.multi_turn.* (docs/agents.md)", MULTI_TURN),
    _no("actor_rollout_ref.rollout.trace.*", "rollout tracing", "none"),
    _m("actor_rollout_ref.rollout.engine_kwargs.*", "rollout.engine_kwargs.*", note="the chosen engine's part (engine_kwargs.vllm.* for vllm, .sglang.* for sglang) is passed to the engine"),
    _no("actor_rollout_ref.rollout.profiler.*", "verl's rollout profiler", "rlcore train's timing/* metrics"),
    _no("actor_rollout_ref.rollout.quantization*", "a quantized rollout model", "none"),
    # ---------------------------------------------------------------- top level of actor_rollout_ref
    _m("actor_rollout_ref.nccl_timeout", "ray.collective_timeout_s", note="the workers' torch.distributed timeout (seconds)"),
    # ---------------------------------------------------------------- split pools / async (issue #34, the rl-async package)
    _same("actor_rollout_ref.hybrid_engine", [True, False],
          "true: actor and rollout share workers; false (verl's split pools) takes the rollout pool's size from "
          "rollout.n_gpus_per_node / rollout.nnodes, rl-core's keys of the same name (verl requires them with false too)"),
    _same("async_training.staleness_threshold", [0], "verl's fully async trainer's share of a batch that may come from older weights",
          "async.max_staleness=N (policy versions a batch may lag; 1 is verl's one-step off-policy)", ASYNC),
    _same("async_training.trigger_parameter_sync_step", [1], "syncing weights every N trainer steps", "none: rl-core syncs after every update", ASYNC),
    _same("async_training.partial_rollout", [False], "partial rollouts (a generation interrupted by a sync and continued)", "none yet", ASYNC),
    _same("async_training.require_batches", [1], "several rollout batches per update", "data.train_batch_size", ASYNC),
    _same("async_training.use_rollout_log_probs", [False], "the rollout's log-probs as the old policy's (no recomputation)",
          "rollout.calculate_log_probs=true with algorithm.rollout_correction.* (rl-core recomputes the old log-probs and reweights)", ASYNC),
    _no("async_training.*", "this setting of verl's fully async trainer", "async.max_staleness, async.on_stale", ASYNC),
    # ---------------------------------------------------------------- data

    _same("data.return_raw_chat", [True, False], "whether verl hands the rollout the chat messages or token ids: rl-core's rollout engines take the token ids of the chat-templated prompt either way"),
    _same("data.return_raw_input_ids", [False], "tokenizing twice for a reward model", "reward_model.model.tokenizer_path", REWARD_MODEL),
    _same("data.return_full_prompt", [False], "returning the templated prompt", "none (rl-core logs the prompts it renders)"),
    _ign("data.filter_overlong_prompts_workers", "processes that filter the prompts (" + _PERF + ")"),
    _ign("data.dataloader_num_workers", "data-loader processes (" + _PERF + "; rl-core tokenizes once at start-up)"),
    _same("data.use_shm", [False], "shared-memory data loading", "none"),
    _same("data.min_response_length", [0, None], "a minimum response length (generating past the end-of-sequence token)", "none"),
    _same("data.train_max_samples", [-1, None], "using only the first rows of the training set", "rlcore data (write a smaller file)"),
    _m("data.val_max_samples", "data.val_max_samples", lambda v: None if norm(v) == -1 else v),
    _same("data.tokenizer", [None], "a tokenizer other than the model's", "model.tokenizer_path"),
    _same("data.reward_fn_key", ["data_source"], "choosing the reward by another row key", "reward.name"),
    _same("data.validation_shuffle", [False], "shuffling the validation set", "none"),
    _m("data.image_key", "data.image_key", note="the row key of a row's images (docs/data.md, image inputs)"),
    _m("data.video_key", "data.video_key", note="the row key of videos: a row that holds some is refused (images only)"),
    _same("data.audio_key", ["audios"], "audio inputs under another row key", "none", MULTIMODAL),
    _m("data.image_patch_size", "data.image_patch_size", note="accepted where it equals the model processor's patch_size (images are resized by the processor)"),
    _same("data.return_multi_modal_inputs", [True, False], "image inputs", "none", MULTIMODAL),
    _no("data.mm_processor_kwargs.*", "image / video processing", "none", MULTIMODAL),
    _m("data.apply_chat_template_kwargs", "data.chat_template_kwargs"),
    _m("data.apply_chat_template_kwargs.*", "data.chat_template_kwargs.*"),
    _m("data.custom_cls.path", "data.custom_cls.path", note="the .py file of the user's dataset class; its items become rl-core's rows (rl_data.custom, rl-data)"),
    _m("data.custom_cls.name", "data.custom_cls.name", note="the dataset class in data.custom_cls.path, built as verl builds it (data_files, tokenizer, config, processor, max_samples)"),
    _tie("data.tool_config_path", "rollout.multi_turn.tool_config_path", "the tools of multi-turn rollouts (verl's data copy of the rollout's key)"),
    _no("data.function_tool_path", "tools defined as Python functions in a file (code named in the config)", "rollout.multi_turn.tools (registered tools)", MULTI_TURN),
    _m("data.gen_batch_size", "data.gen_batch_size", note="prompts per generation round of DAPO's dynamic sampling (algorithm.filter_groups)"),
    _no("data.datagen.*", "generating data with a custom class", "data.train_generator"),
    _tie("data.trust_remote_code", "model.trust_remote_code", "the tokenizer / processor follow model.trust_remote_code"),
    # verl's SFT trainer (sft_trainer.yaml): rl-core's trainer.kind=sft (rl-sft, docs/sft.md)
    _m("data.response_key", "trainer.kind_options.response_key", note="an SFT row's response (trainer.kind=sft: rl-sft, docs/sft.md)"),
    _m("data.multiturn.messages_key", "trainer.kind_options.messages_key", note="an SFT chat row's messages (trainer.kind=sft)"),
    _m("data.multiturn.tools_key", "trainer.kind_options.tools_key", note="an SFT chat row's tool schemas (trainer.kind=sft)"),
    _same("data.multiturn.enable", [True, False], "rl-sft reads a row with messages as a conversation, one with a response as prompt / response, either way"),
    _m("data.max_length", "trainer.kind_options.max_length", note="tokens per SFT sequence (trainer.kind=sft)"),
    _m("data.micro_batch_size_per_gpu", "actor.ppo_micro_batch_size_per_gpu", note="SFT micro-batches (trainer.kind=sft)"),
    _m("model.partial_pretrain", "model.path", note="the model an SFT run starts from (trainer.kind=sft)"),
    _m("optim.lr", "actor.optim.lr", note="verl's SFT trainer's optimizer is the actor's (trainer.kind=sft)"),
    _m("optim.weight_decay", "actor.optim.weight_decay"),
    _m("optim.clip_grad", "actor.optim.grad_clip"),
    # ---------------------------------------------------------------- trainer
    _m("trainer.resume_mode", "trainer.resume", _resume, note="auto -> true, disable -> false; resume_path is refused (rl-core resumes from trainer.output_dir)"),
    _ign("trainer.resume_from_path", "verl reads it only with trainer.resume_mode=resume_path (refused: rl-core resumes from the latest complete checkpoint in trainer.output_dir)"),
    _same("trainer.critic_warmup", [0], "training only the critic for the first steps", "none (rl-core updates the actor from the first step)"),
    _same("trainer.balance_batch", [True, False],
          "reordering a step's sequences so that every data-parallel rank gets about the same number of tokens: a speed knob, the values computed are the same"),
    _m("trainer.log_val_generations", "trainer.log_val_generations"),
    _m("trainer.max_actor_ckpt_to_keep", "trainer.max_ckpt_to_keep"),
    _m("trainer.default_local_dir", "trainer.output_dir"),
    _m("trainer.logger", "trainer.loggers", _loggers),
    _same("trainer.use_legacy_worker_impl", ["auto", "disable", "enable"], "verl's worker implementation switch (rl-core has one)"),
    _ign("trainer.ray_wait_register_center_timeout", "a timeout of verl's Ray start-up (rl-core's is ray.start_timeout_s)"),
    _same("trainer.del_local_ckpt_after_load", [False], "deleting checkpoints after loading them", "trainer.max_ckpt_to_keep"),
    _same("trainer.esi_redundant_time", [0], "elastic server expiry (ESI) saving", "trainer.save_freq"),
    _same("trainer.remove_previous_ckpt_in_save", [False], "deleting the previous checkpoint when saving", "trainer.max_ckpt_to_keep=1"),
    _same("trainer.val_only", [False], "a validation-only run inside rlcore train", "`rlcore eval RUN_DIR_OR_MODEL [CONFIG]` (validation only, scores per data source)"),
    _no("trainer.profile_steps", "verl's profiler", "rlcore train's timing/* metrics"),
    Rule(pattern="global_profiler.tool", kind=MAP, target="profiler.tool", ok=("torch", "nsys", None),
         note="torch: torch.profiler traces of the chosen steps; nsys: NVTX ranges + cudaProfilerStart/Stop for nsys's capture range (rl_profiling.profiling)",
         refused="profiling with a tool other than torch.profiler / Nsight Systems (verl's npu / torch_memory / precision_debugger)", nearest="profiler.tool=torch"),
    _m("global_profiler.global_tool_config.nsys.discrete", "profiler.discrete", note="tool=nsys: a capture range per call (true) or per step (false)"),
    _no("global_profiler.global_tool_config.nsys.*", "starting Ray's workers under nsys (verl's worker_nsight_options / controller_nsight_options)",
        "profiler.tool=nsys in a local run started as nsys profile --capture-range=cudaProfilerApi ... rlcore train"),
    _m("global_profiler.steps", "profiler.steps", lambda v: [] if v is None else v),
    _m("global_profiler.save_path", "profiler.save_path"),
    _same("global_profiler.profile_continuous_steps", [False], "one profile database over consecutive steps (verl's nsys / npu)", "profiler.steps (a trace per call)"),
    _no("global_profiler.*", "this setting of verl's profiler", "profiler.* (torch.profiler traces of the chosen steps)"),
    _no("trainer.rollout_data_dir", "dumping rollouts to a folder", "trainer.log_val_generations; the jsonl logger"),
    _no("trainer.validation_data_dir", "dumping validation generations to a folder", "trainer.log_val_generations"),
    # ---------------------------------------------------------------- algorithm
    _m("algorithm.filter_groups.{enable,metric,max_num_gen_batches}", "algorithm.filter_groups.*",
       note="DAPO's dynamic sampling (rl-algorithms: rl_algorithms.dynamic_sampling): rounds of data.gen_batch_size prompts, groups of equal "
            "metric dropped, until data.train_batch_size groups are kept; metric seq_final_reward is refused with algorithm.use_kl_in_reward"),
    _ign("algorithm.filter_groups._target_", "the Python class verl builds the section with"),
    _no("algorithm.filter_groups.*", "this dynamic-sampling setting", "algorithm.filter_groups.enable / metric / max_num_gen_batches"),
    _no("algorithm.rollout_correction.rollout_token_veto_threshold", "vetoing a whole sequence for one token's importance ratio (an older verl's key)",
        "algorithm.rollout_correction.rollout_rs / rollout_rs_threshold (rejection sampling by the sequence's ratio)"),
    _no("algorithm.rollout_correction.rollout_rs_threshold_lower", "a separate lower rejection threshold (an older verl's key; verl's config has no such key now)",
        "algorithm.rollout_correction.rollout_rs_threshold='LOWER_UPPER' (e.g. '0.99_1.01', the lower bound in the one threshold, as verl writes it now)"),
    _same("algorithm.use_pf_ppo", [False], "PF-PPO (reweighting samples by reward)", "none"),
    _no("algorithm.pf_ppo.*", "PF-PPO", "none"),
    _no("algorithm.gdpo_reward_keys", "GDPO's per-component rewards", "algorithm.adv_estimator"),
    # ---------------------------------------------------------------- reward
    *(_same(k, ["naive", "prime", "dapo"], "verl's batch reward manager (one call scores a list of samples)",
            "a per-sample reward function; reward.num_workers scores in parallel processes")
      for k in ("reward_model.reward_manager", "reward.reward_manager.name")),
    _m("reward.num_workers", "reward.num_workers"),
    # DAPO's overlong-response penalty (rl-algorithms: rl_algorithms.overlong); reward_model.overlong_buffer.* is the older DAPO recipe's spelling
    *(_m(f"{p}.{k}", f"reward.overlong_penalty.{ours}", conv, note=note)
      for p in _OVERLONG for k, ours, conv, note in _OVERLONG_KEYS),
    *(_no(f"{p}.*", "this overlong-buffer setting", "reward.overlong_penalty.enable / buffer_length / penalty_factor / log") for p in _OVERLONG),
    *(_m(f"{p}.max_resp_len", "reward.overlong_penalty.max_response_length",
         note="the length the overlong penalty counts back from (verl's DAPO reward manager reads it for nothing else)")
      for p in ("reward_model.reward_kwargs", "reward.reward_kwargs")),
    _m("reward_model.reward_kwargs.*", "reward.kwargs.*"),
    _m("reward.reward_kwargs.*", "reward.kwargs.*"),
    _no("reward_model.launch_reward_fn_async", "scoring asynchronously with the next step's generation", "reward.num_workers"),
    _no("reward_model.sandbox_fusion.*", "verl's sandbox-fusion code scoring", "a custom reward function (reward.custom.path)"),
    _no("sandbox_fusion.*", "verl's sandbox-fusion code scoring", "a custom reward function (reward.custom.path)"),
    # a reward model served by a rollout engine (rl_verl.reward_model); reward_model.rollout.* is verl's older spelling
    *(Rule(pattern=f"reward.reward_model.rollout.{k}", kind=HOLD, target=RM_PREFIX + k,
           note=RM_NOTES[k] + ("; vllm / sglang" if k == "name" else "") + "; accepted with a warning") for k in RM_KNOBS),
    _m("reward.reward_model.rollout.max_model_len", "reward_model.max_length",
       note="the longest input verl's reward-model server takes (null: the model's max_position_embeddings; verl fails a longer one, "
            "rl-core keeps its end); without it a served reward model's reward_model.max_length is null, not rl-core's 4096"),
    _m("reward.reward_model.rollout.dtype", "reward_model.model.dtype", _dtype_name),
    *(Rule(pattern=f"reward_model.rollout.{k}", kind=ALIAS, target=f"reward.reward_model.rollout.{k}", note="verl's older spelling")
      for k in (*RM_KNOBS, "max_model_len", "dtype")),
    *(_no(f"{p}.*", "this setting of verl's reward-model server", "reward.reward_model.rollout.name / max_model_len (rl-core scores with "
          "reward_model.name=classifier's own forward: reward_model.micro_batch_size_per_gpu, reward_model.strategy)", REWARD_MODEL)
      for p in ("reward.reward_model.rollout", "reward_model.rollout")),
    _ign("reward_model.model.input_tokenizer", "rl-core decodes with the policy's tokenizer and encodes with reward_model.model.tokenizer_path (or the reward model's own)"),
    _ign("reward_model.model.{use_remove_padding,external_lib}", "a speed knob of verl's reward-model worker"),
    _ign("reward_model.{use_dynamic_bsz,forward_max_token_len_per_gpu}", "the reward model's micro-batches are reward_model.micro_batch_size_per_gpu sequences (same scores)"),
    _ign("reward_model.model.fsdp_config.*", "FSDP settings of verl's reward-model worker (reward_model.strategy)"),
    _no("reward_model.micro_batch_size", "a global reward-model micro-batch", "reward_model.micro_batch_size_per_gpu", REWARD_MODEL),
    _m("reward.reward_model.model_path", "reward_model.model.path", note="newer verl's spelling of reward_model.model.path"),
    _m("reward.reward_model.*", "reward_model.*", note="newer verl's spelling of reward_model.*"),
    _no("reward_model.*", "this reward-model setting", "reward_model.* (docs/config.md)", REWARD_MODEL),
    _m("custom_reward_function.*", "reward.custom.*"),
    _m("reward.custom_reward_function.*", "reward.custom.*"),
    # ---------------------------------------------------------------- whole verl features
    _no("distillation.*", "verl's on-policy distillation keys", "the rl-distill plugin: algorithm.adv_estimator=distill, algorithm.options.teacher_path (docs/distill.md)"),
    _no("transfer_queue.*", "verl's transfer queue", "none"),
    _no("ray_kwargs.timeline_json_file", "Ray timelines", "none"),
    _ign("hydra.*", "Hydra's own settings (its output folder, logging, searchpath): rl-core writes to trainer.output_dir"),
    _ign("ray_kwargs.ray_init.runtime_env.py_executable", "the Python that verl's Ray workers start with (rl-core's workers use the driver's; ray.runtime_env for the rest)"),
    _m("ray_kwargs.ray_init.*", "ray.*"),
    _m("ray_init.*", "ray.*"),
)

#: (key, value) pairs of keys rl-core shares with verl whose value names a verl feature rl-core lacks
VALUES: dict[tuple[str, str], Rule] = {
    ("trainer.resume_mode", "resume_path"): _no("trainer.resume_mode", "resuming from a checkpoint outside the run's folder",
                                                "trainer.output_dir (rl-core resumes from the latest complete checkpoint there)"),
    ("trainer.device", "npu"): _no("trainer.device", "training on Ascend NPUs", "trainer.device=cuda (or cpu)"),
    **{("actor_rollout_ref.rollout.name", e): _no("actor_rollout_ref.rollout.name", f"the {e} rollout engine", "rollout.name=vllm or sglang")
       for e in ("trtllm", "hf_trtllm")},
    **{(k, e): _no(k, f"verl's {e} train engine", "train.name=fsdp or megatron")
       for k in ("model_engine", "actor@actor_rollout_ref.actor", "actor_rollout_ref.actor.strategy", "actor_rollout_ref.ref.strategy", "critic.strategy")
       for e in ("torchtitan", "automodel", "torchtitan_actor", "automodel_actor")},
    **{kv: _no(kv[0], feature, nearest) for kv, (feature, nearest) in ENGINE_VALUES.items()},
}

#: verl keys whose rl-core name is a different word of the same meaning: the only "did you mean" offered
#: for an unknown verl-spelled key beyond the rules (never a near-spelled key of another meaning)
SAME_MEANING: dict[str, str] = {
    "micro_batch_size": "ppo_micro_batch_size_per_gpu (rl-core sizes micro-batches per rank)",
    "ppo_micro_batch_size": "ppo_micro_batch_size_per_gpu (rl-core sizes micro-batches per rank)",
    "log_prob_micro_batch_size": "log_prob_micro_batch_size_per_gpu (per rank)",
    "max_ckpt_to_keep": "trainer.max_ckpt_to_keep",
    "logger": "trainer.loggers",
    "default_local_dir": "trainer.output_dir",
    "val_kwargs": "rollout.val_temperature / val_n / val_top_p / val_top_k / val_do_sample",
}


def rule_for(key: str) -> Rule | None:
    """The first rule whose pattern matches ``key`` (a verl key, ``+`` / ``~`` already stripped)."""
    for rule in RULES:
        if any(rx.fullmatch(key) is not None for rx in _alternatives(rule.pattern)):
            return rule
    return None


def _alternatives(pattern: str) -> tuple[re.Pattern, ...]:
    """The regexes of ``pattern`` with its ``{a,b}`` alternatives expanded (as :func:`_expand`), built once per pattern:
    every key of a config is looked up in the whole table."""
    if pattern not in _ALTERNATIVES:
        _ALTERNATIVES[pattern] = tuple(_regex(r.pattern) for r in _expand(Rule(pattern=pattern, kind=""))) if "{" in pattern else (_regex(pattern),)
    return _ALTERNATIVES[pattern]


_ALTERNATIVES: dict[str, tuple[re.Pattern, ...]] = {}


def _expand(rule: Rule) -> list[Rule]:
    m = re.search(r"\{([^}]*)\}", rule.pattern)
    if m is None:
        return [rule]
    out = []
    for alt in m.group(1).split(","):
        out.extend(_expand(attrs.evolve(rule, pattern=rule.pattern[: m.start()] + alt + rule.pattern[m.end():])))
    return out


def star_target(rule: Rule, key: str) -> str:
    """A MAP rule's target for ``key``, with the part ``*`` matched carried over."""
    if not rule.target.endswith("*"):
        return rule.target
    head = rule.pattern[: min(i for i in (rule.pattern.find("*"), rule.pattern.find("{")) if i >= 0)]
    return rule.target[:-1] + key[len(head):]
