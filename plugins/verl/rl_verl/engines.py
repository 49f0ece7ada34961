"""verl's other train engines as names for rl-core's backends: ``veomni`` and ``fsdp_turbo`` run on the fsdp backend,
``mlite`` (Megatron Lite) on the megatron backend, each engine's settings mapped by what they do.

What verl's engines do, read from their code (verl 1dda039b; VeOmni d9774494), and what rl-core does for it:

* **veomni** (``model_engine=veomni``, ``actor.strategy=veomni``; verl/workers/engine/veomni): FSDP2 over
  ``dp_replicate x (dp_shard x ulysses)`` ranks, fp32 master weights with bf16 compute (``mixed_precision``),
  VeOmni's model classes with selectable kernels (``*_implementation``), param / optimizer offload between
  phases (``self.to('cpu', ...)``, as verl's FSDP engine), ``enable_fsdp_offload`` = FSDP2's CPUOffloadPolicy,
  ``enable_full_shard`` = reshard after forward (ZeRO-3; false: ZeRO-2), Ulysses SP, and an AdamW whose LR
  schedule defaults to **cosine** to ``lr_min=0`` over the run (verl's ``optim/veomni.yaml``; the fsdp engine's
  default is constant). The kernels, resharding, wrapping and prefetching change speed and memory only: each is
  accepted with a warning that names it. ``expert_parallel_size`` maps to train.expert_model_parallel_size (the fsdp
  backend's expert parallelism); ``router_replay.mode`` to actor.router_replay (rl-routing-replay).
* **fsdp_turbo** (``actor.strategy=fsdp_turbo``; verl/workers/engine/fsdp/fsdp_turbo_impl.py): verl's FSDP engine
  with the model wrapped by the fsdp-turbo library: ``turbo_config.distributed.fully_shard_parallel_size`` ranks per
  model copy, its own Ulysses (``ulysses_parallel_size``), module plans for wrapping / hooks (speed), recompute of
  the listed modules (``memory.recompute``: activation checkpointing, rl-core's model.enable_gradient_checkpointing),
  bf16 parameters / fp32 reduction (``fsdp_plan.*_dtype``); the FSDP engine's optimizer defaults.
* **mlite** (``actor@actor_rollout_ref.actor=mlite_actor``; Megatron-LM experimental/lite's verl engine):
  ``actor.engine.{tp,pp,vpp,cp,ep,etp}`` are Megatron's parallel sizes and ``{param,optimizer,grad}_offload`` its
  offload switches: they read as the megatron engine's keys (``actor.megatron.*``), so they map exactly as those do.

The rows are plain tuples (``(kind, pattern, ...)``) turned into :class:`rl_verl.keys.Rule` there;
:func:`apply` runs after the translation for what one key alone cannot decide (sizes that depend on the world or
on another key, the engine's profile defaults).
"""

from __future__ import annotations

from typing import Any

from rl_core.config.load import config_to_dict, set_dotted
from rl_core.config.schema import RunConfig
from rl_core.problems import Problem
from rl_verl.profile import get_dotted
from rl_verl.values import norm

#: verl's engine names (model_engine / actor.strategy / Hydra actor group option) -> rl-core's train backend
BACKEND_OF = {
    "fsdp": "fsdp", "fsdp2": "fsdp", "dp": "fsdp", "dp_actor": "fsdp", "dp_ref": "fsdp", "dp_critic": "fsdp",
    "megatron": "megatron", "megatron_actor": "megatron", "megatron_ref": "megatron", "megatron_critic": "megatron",
    "veomni": "fsdp", "veomni_actor": "fsdp", "veomni_ref": "fsdp", "veomni_critic": "fsdp",
    "fsdp_turbo": "fsdp",
    "mlite": "megatron", "mlite_actor": "megatron", "mlite_ref": "megatron",
}
#: the verl engine a selection names (only the engines whose settings need more than one key's rule)
ENGINE_OF = {"veomni": "veomni", "veomni_actor": "veomni", "veomni_ref": "veomni", "veomni_critic": "veomni",
             "fsdp_turbo": "fsdp_turbo", "mlite": "mlite", "mlite_actor": "mlite", "mlite_ref": "mlite"}

SELECTED = {
    "veomni": "verl's VeOmni engine runs as rl-core's fsdp backend (FSDP2, fp32 master weights with bf16 compute on GPU, "
              "the same losses); VeOmni's own kernels and model classes are not used (each *_implementation key is a warning)",
    "fsdp_turbo": "verl's FSDP-Turbo engine runs as rl-core's fsdp backend (FSDP2 over the same ranks, the same losses); "
                  "the fsdp-turbo library's module plans are not used (each is a warning)",
    "mlite": "verl's Megatron Lite engine runs as rl-core's megatron backend (megatron-core); its actor.engine.* sizes "
             "and offload switches are the megatron engine's",
}

#: under the verl profile, the engine's own defaults where verl's differ from its FSDP engine's (verl's optim/veomni.yaml):
#: rl-core key -> (verl's value, the Hydra group selections that load that optimizer config). verl's ``model_engine``
#: picks the actor's / ref's / critic's groups; ``actor.strategy=veomni`` alone changes the engine, not the config group
PROFILE_DEFAULTS: dict[str, dict[str, tuple[Any, tuple[str, ...]]]] = {
    # lr_scheduler_type: cosine, lr_min 0, lr_decay_ratio 1, no warm-up (the actor's and veomni_critic's optimizer)
    "veomni": {"actor.optim.lr_scheduler": ("cosine", ("model_engine", "actor@actor_rollout_ref.actor")),
               "critic.optim.lr_scheduler": ("cosine", ("model_engine", "critic@critic"))},
}

_KERNEL = "a kernel choice of VeOmni's model code (speed only: the same function computed); rl-core's fsdp backend runs the model's transformers code"
_PERF = "a speed / memory knob of verl's implementation; rl-core computes the same values its own way"
_EP_MAP = ("an MoE model's experts spread over this many ranks, tokens exchanged by all-to-all (the fsdp backend's expert parallelism, "
           "rl_train_fsdp.experts); the rest stays FSDP-sharded")
_EP_TIE = "every role's experts are spread like the actor's (train.expert_model_parallel_size)"
_AR = "actor_rollout_ref"
_V = f"{{{_AR}.*,critic}}.veomni"  # the actor's, the reference's and the critic's (veomni_critic) sections
_T = f"{_AR}.*.fsdp_config.turbo_config"
_E = f"{_AR}.actor.engine"

#: (kind, pattern, *args): map (target, note) / alias (verl key it reads as, note) / same (ok values, feature, nearest) /
#: ignore (note) / refuse (feature, nearest) / tie (target, note) / hold (name, note: kept for :func:`apply`)
ROWS: tuple[tuple, ...] = (
    # ------------------------------------------------------------------ veomni (verl/trainer/config/engine/veomni.yaml)
    ("alias", f"{_AR}.actor.veomni.param_offload", f"{_AR}.actor.fsdp_config.param_offload",
     "the actor's parameters in host memory between phases (VeOmni's engine moves them as verl's FSDP engine does)"),
    ("alias", f"{_AR}.actor.veomni.optimizer_offload", f"{_AR}.actor.fsdp_config.optimizer_offload", "AdamW's state in host memory between updates"),
    ("alias", f"{_AR}.actor.veomni.enable_fsdp_offload", f"{_AR}.actor.fsdp_config.offload_policy", "FSDP2's CPUOffloadPolicy"),
    ("alias", f"{_AR}.actor.veomni.ulysses_parallel_size", f"{_AR}.actor.ulysses_sequence_parallel_size", "Ulysses sequence parallelism"),
    ("hold", f"{_AR}.actor.veomni.fsdp_size", "veomni.fsdp_size",
     "VeOmni shards a model copy over fsdp_size x ulysses_parallel_size ranks (-1 or >= world / ulysses: all ranks): "
     "actor.fsdp_config.fsdp_size = fsdp_size x ulysses (HSDP), or -1"),
    ("ignore", f"{_AR}.ref.veomni.{{param_offload,optimizer_offload,enable_fsdp_offload}}",
     "offloading the reference model (rl-core keeps it on the device; with LoRA there is no reference copy)"),
    *(("alias", f"critic.veomni.{k}", f"critic.fsdp.{m}", "the critic's offload, as the actor's")
      for k, m in (("param_offload", "param_offload"), ("optimizer_offload", "optimizer_offload"), ("enable_fsdp_offload", "offload_policy"))),
    ("tie", "critic.veomni.ulysses_parallel_size", "actor.ulysses_sequence_parallel_size", "every role uses the actor's Ulysses size"),
    ("ignore", f"{{{_AR}.ref,critic}}.veomni.fsdp_size", "the reference model and the critic are sharded like the actor (actor.fsdp_config.fsdp_size)"),
    ("tie", f"{_AR}.ref.veomni.ulysses_parallel_size", "actor.ulysses_sequence_parallel_size", "every role uses the actor's Ulysses size"),
    ("map", f"{_AR}.actor.veomni.expert_parallel_size", "train.expert_model_parallel_size", _EP_MAP),
    ("tie", f"{{{_AR}.ref,critic}}.veomni.expert_parallel_size", "train.expert_model_parallel_size", _EP_TIE),
    ("map", f"{_AR}.actor.veomni.router_replay.mode", "actor.router_replay",
     "MoE routing replay (rl-routing-replay): R2 replays the old-log-prob pass's routing in the update, R3 the rollout's in both"),
    ("same", f"{{{_AR}.ref,critic}}.veomni.router_replay.mode", ["disabled"], "MoE routing replay in the reference model / critic", "actor.router_replay"),
    ("same", f"{_V}.router_replay.{{record_file,replay_file}}", [None], "recording MoE routing to a file / replaying it from one", "actor.router_replay"),
    ("ignore", f"{_V}.*_implementation", _KERNEL),
    ("alias", f"{_AR}.actor.veomni.pad_to_length", f"{_AR}.actor.pad_to_length", "packed micro-batches padded to a bucket multiple"),
    ("alias", f"{_AR}.actor.veomni.pad_to_length_bucket", f"{_AR}.actor.fsdp_config.pad_to_length_bucket", "the bucket of pad_to_length, in tokens"),
    ("ignore", f"{_V}.{{pad_to_length,pad_to_length_bucket}}", "the reference model's / critic's packed-row granularity (it follows the actor's)"),
    ("same", f"{_V}.mixed_precision", [True], "VeOmni without mixed precision (bf16 parameters and optimizer)", "model.dtype"),
    ("ignore", f"{_V}.enable_full_shard",
     "resharding parameters after forward (true: ZeRO-3, false: ZeRO-2): memory / speed only; rl-core reshards after forward"),
    ("ignore", f"{_V}.{{init_device,forward_prefetch,basic_modules,enable_reentrant,activation_gpu_limit,force_use_huggingface,"
               f"use_torch_compile,entropy_from_logits_with_chunking,entropy_checkpointing}}", _PERF),
    ("ignore", f"{_V}.seed", "the seed of VeOmni's determinism mode (the weights are loaded, not drawn); rl-core seeds with trainer.seed"),
    ("ignore", f"{_V}.forward_only", "verl sets it for the reference model (no optimizer); rl-core builds none for it either"),
    ("same", f"{_V}.strategy", ["veomni"], "another engine under the veomni section", "train.name"),
    ("same", f"{_V}.ckpt_manager", ["dcp"], "a checkpoint format other than torch.distributed.checkpoint", "none (rl-core's fsdp checkpoints are DCP)"),
    ("same", f"{_V}.full_determinism", [False], "deterministic kernels for debugging", "none"),
    ("same", f"{_V}.load_checkpoint_path", [None], "loading a checkpoint from a given path", "trainer.resume (the latest checkpoint in trainer.output_dir)"),
    ("refuse", f"{_V}.*", "this setting of verl's veomni engine", "actor.fsdp_config.*, actor.ulysses_sequence_parallel_size"),
    # VeOmni's optimizer (verl/trainer/config/optim/veomni.yaml): lr_min is absolute
    ("alias", f"{_AR}.actor.optim.lr_min", f"{_AR}.actor.optim.min_lr", "the end of VeOmni's LR decay, an absolute rate (m = lr_min / lr)"),
    ("alias", "critic.optim.lr_min", "critic.optim.min_lr", "the end of the critic's LR decay, an absolute rate"),
    ("same", f"{{{_AR}.actor,critic}}.optim.lr_start", [0, 0.0], "a warm-up starting above 0", "actor.optim.lr_warmup_steps_ratio"),
    ("same", f"{{{_AR}.actor,critic}}.optim.lr_decay_ratio", [1, 1.0], "decaying the learning rate over part of the run", "actor.optim.lr_scheduler"),
    # ------------------------------------------------------------------ fsdp_turbo (verl/trainer/config/engine/fsdp.yaml turbo_config)
    ("hold", f"{_AR}.actor.fsdp_config.turbo_config.distributed.fully_shard_parallel_size", "turbo.fsdp_size",
     "ranks a model copy is sharded over: actor.fsdp_config.fsdp_size (-1 when it is the world size or more)"),
    ("alias", f"{_AR}.actor.fsdp_config.turbo_config.distributed.ulysses_parallel_size", f"{_AR}.actor.ulysses_sequence_parallel_size",
     "FSDP-Turbo's Ulysses sequence parallelism (heads exchanged by all-to-all)"),
    ("tie", f"{_AR}.ref.fsdp_config.turbo_config.distributed.ulysses_parallel_size", "actor.ulysses_sequence_parallel_size",
     "every role uses the actor's Ulysses size"),
    ("ignore", f"{_AR}.ref.fsdp_config.turbo_config.distributed.fully_shard_parallel_size",
     "the reference model is sharded like the actor (actor.fsdp_config.fsdp_size)"),
    ("map", f"{_AR}.actor.fsdp_config.turbo_config.distributed.expert_parallel_size", "train.expert_model_parallel_size", _EP_MAP),
    ("tie", f"{_AR}.ref.fsdp_config.turbo_config.distributed.expert_parallel_size", "train.expert_model_parallel_size", _EP_TIE),
    ("same", f"{_T}.distributed.expert_fully_shard_parallel_size", [1], "sharding each expert over FSDP ranks inside expert parallelism "
     "(FSDP-Turbo's expert_fully_shard_parallel_size)", "1: the fsdp backend keeps a rank's experts whole and replicates them over the "
     "expert-data-parallel ranks (expert_parallel_size spreads them)"),
    ("same", f"{_T}.distributed.tensor_parallel_size", [1], "tensor parallelism in FSDP-Turbo (reserved there)", "none"),
    ("ignore", f"{_T}.distributed.ep_plan.*", "FSDP-Turbo's expert-parallel plan (read only with expert_parallel_size > 1)"),
    ("ignore", f"{_T}.distributed.fsdp_plan.{{apply_modules,hook_modules,fsdp_implementation,num_to_forward_prefetch,num_to_backward_prefetch}}",
     "FSDP-Turbo's wrapping / hook / prefetch plan (" + _PERF + "; rl-core shards every decoder layer)"),
    ("same", f"{_T}.distributed.fsdp_plan.{{param_dtype,output_dtype}}", ["bf16", "bfloat16"], "FSDP mixed precision other than bfloat16", "model.dtype"),
    ("alias", f"{_AR}.actor.fsdp_config.turbo_config.distributed.fsdp_plan.reduce_dtype", f"{_AR}.actor.fsdp_config.mixed_precision.reduce_dtype",
     "the dtype gradients are reduced in"),
    ("ignore", f"{_AR}.ref.fsdp_config.turbo_config.distributed.fsdp_plan.reduce_dtype", "the reference model computes no gradients"),
    ("hold", f"{_AR}.actor.fsdp_config.turbo_config.memory.recompute", "turbo.recompute",
     "activation recomputation: model.enable_gradient_checkpointing (either switch on recomputes every decoder layer)"),
    ("ignore", f"{_AR}.ref.fsdp_config.turbo_config.memory.recompute", "recomputation in a forward without gradients does nothing"),
    ("ignore", f"{_T}.memory.recompute_plan", "the modules FSDP-Turbo recomputes: rl-core recomputes every decoder layer (" + _PERF + ")"),
    ("refuse", f"{_T}.*", "this FSDP-Turbo setting (its code patches name Python functions in the config)",
     "actor.ulysses_sequence_parallel_size (rl-core's Ulysses wraps the attention itself)"),
    # ------------------------------------------------------------------ mlite (Megatron-LM experimental/lite/examples/verl engine/mlite.yaml)
    *(("alias", f"{_E}.{k}", f"{_AR}.actor.megatron.{m}", "Megatron's parallel size (megatron backend)") for k, m in (
        ("tp", "tensor_model_parallel_size"), ("pp", "pipeline_model_parallel_size"), ("vpp", "virtual_pipeline_model_parallel_size"),
        ("cp", "context_parallel_size"), ("ep", "expert_model_parallel_size"), ("etp", "expert_tensor_parallel_size"))),
    *(("alias", f"{_E}.{k}_offload", f"{_AR}.actor.megatron.{k}_offload", "the megatron backend's offload between phases")
      for k in ("param", "grad")),
    ("alias", f"{_E}.optimizer_offload", f"{_AR}.actor.optim.override_optimizer_config.optimizer_cpu_offload",
     "Megatron Lite sets its optimizer's offload_fraction to 1: AdamW's state and step on the host, megatron-core's CPU optimizer"),
    ("alias", f"{_E}.router_aux_loss_coef", f"{_AR}.actor.megatron.override_transformer_config.moe_aux_loss_coeff",
     "the MoE router's load-balancing loss coefficient"),
    ("ignore", f"{_E}.attention_backend_override", "Megatron Lite's attention kernel (" + _PERF + ")"),
    ("ignore", f"{_E}.impl_cfg.use_thd", "packed (THD) sequences: " + _PERF + " (rl-core masks padding)"),
    ("hold", f"{_E}.impl_cfg.recompute", "mlite.recompute",
     "[full]: every layer recomputed (model.enable_gradient_checkpointing: megatron-core recompute full / uniform / 1)"),
    # dist_opt: megatron-core's distributed optimizer; fsdp2: Megatron Lite's FSDP2 wrapper (parameters too): both shard over
    # the data-parallel ranks what every rank would otherwise hold whole, read as Megatron's use_distributed_optimizer
    ("alias", f"{_E}.impl_cfg.optimizer", f"{_AR}.actor.megatron.override_transformer_config.use_distributed_optimizer",
     "dist_opt / fsdp2: optimizer state sharded over the data-parallel ranks (Megatron's use_distributed_optimizer)", lambda v: v is not None),
    ("same", f"{_E}.{{dtype,export_dtype}}", ["bfloat16", "bf16"], "a Megatron compute dtype other than bfloat16", "model.dtype"),
    ("same", f"{_E}.{{impl,model_name}}", ["lite", "auto"], "choosing Megatron Lite's model implementation", "none"),
    ("same", f"{_E}.strategy", ["mlite"], "another engine under actor.engine", "train.name"),
    ("refuse", f"{_AR}.*.engine.*", "this setting of verl's megatron-lite (mlite) train engine", "train.tensor_model_parallel_size, train.options.*"),
)


#: (key, value) pairs refused although the key's rule accepts other values: (feature, nearest)
VALUE_ROWS: dict[tuple[str, str], tuple[str, str]] = {
    (f"{_AR}.{r}.veomni.attn_implementation", "native-sparse"): ("native sparse attention (NSA: a different attention than softmax attention)", "none")
    for r in ("actor", "ref")
}


def _int(value: Any) -> int:
    """A size read from the tree, 1 when it is not a positive integer (the schema check reports a bad one)."""
    v = value if isinstance(value, int) else None
    try:
        v = int(str(value)) if v is None else v
    except ValueError:
        return 1
    return v if v > 0 else 1


def engine_of(selected: dict[str, Any]) -> str | None:
    """The verl engine (veomni / fsdp_turbo / mlite) that the config's engine selections name, if any."""
    for value in selected.values():
        engine = ENGINE_OF.get(str(value))
        if engine is not None:
            return engine
    return None


def apply(tree: dict[str, Any], tr: Any, profile: str) -> tuple[list, list]:
    """The fix-ups one key cannot decide alone, on the translated ``tree`` (profile defaults applied) of the
    :class:`rl_verl.translate.Translation` ``tr``: ``(problems, profile defaults applied as (key, value,
    rl-core's own))``. A key set here is named as the user wrote it in later problems (``tr.origin``)."""

    problems: list = []
    applied: list = []
    held, selected = tr.held, tr.selected
    engine = engine_of(selected)
    if engine is not None:
        written = next(k for k, v in selected.items() if ENGINE_OF.get(str(v)) == engine)
        problems.append(Problem(key=written, what=f"is {selected[written]!r}: {SELECTED[engine]}", severity="warning"))
    own = RunConfig()
    trainer = own.trainer
    world = _int(get_dotted(tree, "trainer.nnodes", trainer.nnodes)) * _int(get_dotted(tree, "trainer.n_gpus_per_node", trainer.n_gpus_per_node))
    sp = _int(get_dotted(tree, "actor.ulysses_sequence_parallel_size", 1))
    for name in ("veomni.fsdp_size", "turbo.fsdp_size"):  # a value that is no integer: said here, the rest skipped
        if name in held and not isinstance(norm(held[name][1]), int):
            written, value = held.pop(name)
            problems.append(Problem(key=written, what=f"is {value!r}, not a number of ranks", fix="give an integer, or -1 for all ranks"))
    if "veomni.fsdp_size" in held:
        written, value = held["veomni.fsdp_size"]
        size, dp = norm(value), max(1, world // sp)
        if 0 < size < dp and dp % size:
            problems.append(Problem(key=written, what=f"is {size}, which does not divide the {dp} data-parallel ranks (world {world} / ulysses {sp})",
                                    fix=f"set it to a divisor of {dp}, or -1 to shard over all ranks"))
        else:
            set_dotted(tree, "actor.fsdp_config.fsdp_size", size * sp if 0 < size < dp else -1)
            tr.origin["actor.fsdp_config.fsdp_size"] = written
    if "turbo.fsdp_size" in held:
        written, value = held["turbo.fsdp_size"]
        size = norm(value)
        set_dotted(tree, "actor.fsdp_config.fsdp_size", size if 0 < size < world else -1)
        tr.origin["actor.fsdp_config.fsdp_size"] = written
    for name in ("turbo.recompute", "mlite.recompute"):
        if name not in held:
            continue
        written, value = held[name]
        on = norm(value) is True or (isinstance(value, (list, tuple)) and [str(v) for v in value] == ["full"])
        if not on and not (norm(value) is False or value in ([], None)):
            problems.append(Problem(key=written, what=f"is {value!r}: recomputing only some modules of a layer is a verl feature rl-core does not have",
                                    fix="nearest rl-core setting: model.enable_gradient_checkpointing (every layer; [full]); or remove the key"))
        elif on:  # verl recomputes when either its engine's switch or the model's is on
            set_dotted(tree, "model.enable_gradient_checkpointing", True)
    for section in ("actor", "critic"):
        warmup = get_dotted(tree, f"{section}.optim.lr_warmup_steps")
        if engine == "veomni" and isinstance(norm(warmup), (int, float)) and norm(warmup) > 0:  # VeOmni's build_lr_scheduler takes only the ratio
            problems.append(Problem(key=f"{section}.optim.lr_warmup_steps", what=f"is {warmup}, and verl's veomni engine does not read it (its "
                                    "schedule warms up for lr_warmup_steps_ratio x the total steps only): the run would not warm up as written",
                                    fix="set the optimizer's lr_warmup_steps_ratio instead, or remove lr_warmup_steps"))
    if profile == "verl" and get_dotted(tree, "train.name") == "megatron":
        # verl's megatron engine config (engine/megatron.yaml): sequence_parallel and use_distributed_optimizer default to
        # True; rl-core's megatron backend runs both (sequence parallelism with TP > 1, with or without CP)
        megatron_defaults = {"train.distributed_optimizer": True, "train.options.transformer_config.sequence_parallel": True}
        marker = object()
        for key, value in megatron_defaults.items():
            if get_dotted(tree, key, marker) is marker:
                applied.append((key, value, get_dotted(config_to_dict(own, mask=False), key, False)))
                set_dotted(tree, key, value)
    if profile == "verl" and engine in PROFILE_DEFAULTS:
        marker = object()
        for key, (value, groups) in PROFILE_DEFAULTS[engine].items():
            chosen = any(k.lstrip("+") in groups and ENGINE_OF.get(str(v)) == engine for k, v in selected.items())
            if chosen and get_dotted(tree, key, marker) is marker:
                applied.append((key, value, get_dotted(config_to_dict(own, mask=False), key)))
                set_dotted(tree, key, value)
    return problems, applied
