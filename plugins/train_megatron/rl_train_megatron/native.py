"""What the megatron train backend runs on megatron-core's own machinery and what through a re-implementation
(imports neither torch nor megatron-core).

:data:`FEATURES` is the card's ``features`` (:class:`rl_core.cards.TrainCard`): ``native`` = megatron-core's own path
(the same on GPUs as in Megatron-LM), ``reference`` = rl-core's plain re-implementation, kept because it runs on the
CPU (gloo) for the conformance tests: correct, and on GPUs slower than megatron-core's path. :data:`WHY` says, per
feature, what runs. :func:`check_native` (one of the card's checks) warns when a run that may use a GPU
(``trainer.device`` cuda or auto) enables a reference path, and refuses a setting that on GPUs would only cost time.
"""

from __future__ import annotations

from typing import Any

from rl_core.problems import Problem

FEATURES = {
    "tensor_parallel": "native",
    "expert_parallel": "native",
    "pipeline_schedule": "native",
    "virtual_stages": "reference",
    "distributed_optimizer": "reference",
    "context_parallel": "reference",
    "fused_adam": "reference",
    "fused_rmsnorm": "reference",
    "fused_rope": "reference",
    "fused_cross_entropy": "reference",
    "transformer_engine": "reference",
}

WHY = {
    "tensor_parallel": "megatron-core's ColumnParallelLinear / RowParallelLinear and vocabulary-parallel embedding",
    "expert_parallel": "megatron-core's MoELayer (SequentialMLP experts, its token dispatchers: allgather on the CPU; alltoall / flex passed "
                       "through on GPUs)",
    "pipeline_schedule": "training steps with PP > 1 go through megatron-core's get_forward_backward_func (1F1B) with rl-core's loss "
                         "(rl_train_megatron.core_pipeline); with an MoE model, context / sequence / expert parallelism, routing replay "
                         "or fully_shard they run rl-core's loop (rl_train_megatron.pipeline: one micro-batch at a time through the "
                         "stages, no overlap)",
    "virtual_stages": "megatron-core's interleaved layer layout, run by rl-core's one-micro-batch loop: no bubble savings, only more "
                      "point-to-point hops (megatron-core's interleaved schedule is not used)",
    "distributed_optimizer": "rl-core's ZeRO-1 (rl_train_megatron.zero: AdamW state sharded over the data-parallel ranks, parameters "
                             "broadcast after the step). megatron-core's DistributedDataParallel + DistributedOptimizer (bucketed "
                             "reduce-scatter, train.options.ddp_config.overlap_grad_reduce) is built (rl_train_megatron.dist_optimizer: "
                             "ZeRO-1's numbers on the CPU with test-only device patches) and off until a GPU run has gone through it "
                             "(bench/megatron_update_mfu_gpu.py's megatron-distopt row)",
    "context_parallel": "rl-core's key/value all-gather attention (rl_train_megatron.context_parallel, MindSpeed's kvallgather); "
                        "megatron-core's ring attention needs TransformerEngine",
    "fused_adam": "torch.optim.AdamW with its fused kernel on GPUs (as the fsdp backend steps); megatron-core's FusedAdam needs apex or "
                  "TransformerEngine, neither installed",
    "fused_rmsnorm": "megatron-core's local layer spec: torch's RMSNorm (no apex / TransformerEngine fused norm)",
    "fused_rope": "the rotary embedding computed by rl-core from the batch's position ids (rl_train_megatron.model), not megatron-core's "
                  "fused RoPE kernel",
    "fused_cross_entropy": "with TP 1 the fsdp backend's chunked LM head (rl_core.logprobs, model.logprob_chunk_size; on GPUs by default), "
                           "with TP > 1 rl-core's vocabulary-parallel log-probs / entropy (rl_train_megatron.model.vocab_parallel_log_probs); "
                           "not megatron-core's fused cross-entropy",
    "transformer_engine": "not used: PyPI has transformer-engine-cu12 2.20.2 as a wheel, but its torch extension "
                          "(transformer-engine-torch 2.20.2) only as a source distribution, built against the local torch + CUDA "
                          "toolkit; the engine builds megatron-core's local (plain torch) layer spec with torch's fused attention "
                          "(scaled_dot_product_attention: flash / memory-efficient kernels, rl_train_megatron.sdpa) in its "
                          "DotProductAttention slot and F.linear where a layer has no tensor-parallel peer (rl_train_megatron.linear)",
}

VPP_KEY = "train.options.virtual_pipeline_model_parallel_size"


def _may_use_gpu(config) -> bool:
    return getattr(config.trainer, "device", "auto") != "cpu"


def _int(value: Any, default: int = 1) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def in_use(config) -> dict[str, str]:
    """The features the config enables that have a setting of their own -> the key that enables it."""
    train = config.train
    opts = dict(getattr(train, "options", None) or {})
    used = {}
    if _int(train.tensor_model_parallel_size) > 1:
        used["tensor_parallel"] = "train.tensor_model_parallel_size"
    if _int(getattr(train, "expert_model_parallel_size", 1)) > 1:
        used["expert_parallel"] = "train.expert_model_parallel_size"
    if _int(train.pipeline_model_parallel_size) > 1:
        used["pipeline_schedule"] = "train.pipeline_model_parallel_size"
    if _int(opts.get("virtual_pipeline_model_parallel_size"), 1) > 1:
        used["virtual_stages"] = VPP_KEY
    if getattr(train, "distributed_optimizer", False) and not opts.get("fully_shard", False):
        used["distributed_optimizer"] = "train.distributed_optimizer"
    if _int(getattr(train, "context_parallel_size", 1)) > 1:
        used["context_parallel"] = "train.context_parallel_size"
    return used


def reference_pipeline(config, moe: bool, sp: bool) -> list[str]:
    """What makes PP > 1 training steps run rl-core's loop instead of megatron-core's schedule
    (:meth:`rl_train_megatron.core_pipeline.CorePipeline.core_pipeline_problem`'s rule, read from the config)."""
    train = config.train
    opts = dict(getattr(train, "options", None) or {})
    return [what for what, on in (("an MoE model", moe), ("train.context_parallel_size", _int(getattr(train, "context_parallel_size", 1)) > 1),
                                  ("sequence parallelism", sp), ("train.expert_model_parallel_size", _int(getattr(train, "expert_model_parallel_size", 1)) > 1),
                                  ("actor.router_replay", getattr(config.actor, "router_replay", "disabled") != "disabled"),
                                  ("train.options.fully_shard", bool(opts.get("fully_shard", False)))) if on]


def check_native(config, features: dict[str, str] | None = None, *, moe: bool = False, sp: bool = False) -> list[Problem]:
    """On a run that may use GPUs: a warning per enabled feature whose path is not native (one more for the unfused
    kernels every run uses, one for pipeline stages that fall back to the reference loop), and an error for virtual
    pipeline stages (no interleaving schedule: they would only add hops). ``features``: the card's (default
    :data:`FEATURES`); ``moe`` / ``sp``: the model has experts / Megatron sequence parallelism is on."""
    if not _may_use_gpu(config):
        return []
    features = FEATURES if features is None else features
    out = []
    used = in_use(config)
    if "pipeline_schedule" in used and features.get("pipeline_schedule") == "native":
        why = reference_pipeline(config, moe, sp)
        if why:
            out.append(Problem(key="train.pipeline_model_parallel_size", severity="warning",
                               what=f"runs rl-core's reference pipeline loop on GPUs (one micro-batch at a time, no overlap) because of "
                                    f"{', '.join(why)}: megatron-core's 1F1B schedule runs dense models without those",
                               fix="expect PP training steps ~PP x slower than megatron-core's schedule; or drop pipeline stages"))
    for name, key in used.items():
        how = features.get(name, "reference")
        if how == "native":
            continue
        if name == "virtual_stages":
            out.append(Problem(key=key, what=f"virtual pipeline stages on a GPU run: {WHY[name]}; they would only cost time",
                               why="virtual stages shrink the pipeline bubble only under an interleaved schedule",
                               fix=f"set {key}=1 (or trainer.device=cpu for a conformance run)"))
            continue
        out.append(Problem(key=key, severity="warning", what=f"runs the megatron backend's {how} path on GPUs: {WHY[name]}",
                           fix="expect lower throughput than Megatron-LM's; the card's features list what runs natively"))
    kernels = [n for n in ("fused_adam", "fused_rmsnorm", "fused_rope", "fused_cross_entropy", "transformer_engine") if features.get(n) != "native"]
    if kernels:
        out.append(Problem(key="train.name", severity="warning",
                           what="the megatron backend on GPUs runs without fused kernels: " + "; ".join(f"{n}: {WHY[n]}" for n in kernels),
                           fix="expect a lower update MFU than the fsdp backend's (bench/megatron_gpu.py measures both)"))
    return out
