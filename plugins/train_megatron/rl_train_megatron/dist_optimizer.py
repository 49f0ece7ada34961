"""megatron-core's own ``DistributedOptimizer`` for ``train.distributed_optimizer`` on GPUs (issue 49).

What runs (:class:`NativeDistributedOptimizer`): the model chunk wrapped in megatron-core's
``DistributedDataParallel`` (contiguous float32 gradient buffers, ``main_grad``, bucketed reduce-scatter over the
data-parallel group; ``train.options.ddp_config``: ``overlap_grad_reduce`` (the buckets' reduce-scatter started in the
last micro-batch's backward) and ``bucket_size`` passed through) and ``megatron.core.optimizer.get_megatron_optimizer``
with ``use_distributed_optimizer``: each data-parallel rank steps AdamW on its shard of every bucket, then the
parameters are all-gathered. The AdamW is torch's (megatron-core's fallback without Apex / TransformerEngine), run with
its fused kernel. The core update loop keeps its contract: gradients summed over the data-parallel ranks (megatron-core
is told ``calculate_per_token_loss``: the loss weights are already global token shares), the gradient norm and clipping
by megatron-core's optimizer (``clip_grad_norm``: the whole model, tensor-parallel duplicates and the tied embedding
counted once), the step with the learning rate core's schedule set on the inner torch optimizer's groups.

Where it runs: a GPU (megatron-core allocates its buffers with ``torch.cuda.current_device()``; on the CPU / gloo the
engine keeps rl-core's ZeRO-1, :mod:`rl_train_megatron.zero`, the conformance reference), a dense model on one pipeline
stage without context / sequence parallelism, Qwen3's q/k norms under TP, ``fully_shard``, offload or float16
(:func:`problem` names what sends a run to the reference). :data:`ENABLED` is False until a device run has gone
through it (bench/megatron_update_mfu_gpu.py's ``megatron-distopt`` row sets it): the card lists the distributed
optimizer as reference until then.
"""

from __future__ import annotations

import contextlib

import torch
from rl_core.train_engine.batch_sizes import role_config

#: megatron-core's DistributedOptimizer on GPUs; False until a device run verified it (the bench's row sets it)
ENABLED = False

def problem(backend, config) -> str | None:
    """Why this engine's ``train.distributed_optimizer`` is rl-core's ZeRO-1 and not megatron-core's (None: megatron-core's)."""
    t = backend.topo
    opts = dict(config.train.options or {})
    why = [what for what, on in (
        ("not enabled yet (rl_train_megatron.dist_optimizer.ENABLED: no device run has gone through it)", not ENABLED),
        ("the CPU (megatron-core's buffers are CUDA tensors)", backend.device.type != "cuda"),
        ("pipeline stages", t.pp > 1 or backend.vpp > 1),
        ("an MoE model", backend.shape.moe),
        ("context parallelism", t.cp > 1),
        ("sequence parallelism", backend.sp),
        ("Qwen3's q/k norms under TP", backend.shape.qk_norm and t.tp > 1),
        ("train.options.fully_shard", bool(opts.get("fully_shard"))),
        ("offload", any(opts.get(k) for k in ("param_offload", "grad_offload", "optimizer_offload", "optimizer_cpu_offload"))),
        ("float16 (its loss scale)", backend.compute_dtype == torch.float16),
        ("routing replay", backend.router_replay is not None),
    ) if on]
    return ", ".join(why) if why else None


def _single(optimizer):
    """The one DistributedOptimizer inside what get_megatron_optimizer returned (a ChainedOptimizer of one, or itself)."""
    inner = getattr(optimizer, "chained_optimizers", None)
    if inner is None:
        return optimizer
    if len(inner) != 1:
        raise RuntimeError(f"megatron-core built {len(inner)} optimizers for a dense model; one was expected")
    return inner[0]


class NativeDistributedOptimizer:
    """megatron-core's DistributedDataParallel + DistributedOptimizer over one model chunk.

    ``torch_optimizer`` is the inner ``torch.optim.AdamW`` over this rank's shards (core's LR schedule and checkpoints
    see it as the backend's ``optimizer``)."""

    def __init__(self, chunk: torch.nn.Module, config, role: str, ddp_options: dict | None = None) -> None:
        from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
        from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

        ddp_options = dict(ddp_options or {})
        self.overlap_grad_reduce = bool(ddp_options.get("overlap_grad_reduce", False))
        ddp_cfg = DistributedDataParallelConfig(grad_reduce_in_fp32=True, use_distributed_optimizer=True, overlap_grad_reduce=self.overlap_grad_reduce,
                                                overlap_param_gather=False, bucket_size=ddp_options.get("bucket_size"), average_in_collective=False)
        tcfg = chunk.config
        before = tcfg.calculate_per_token_loss
        tcfg.calculate_per_token_loss = True  # gradients summed over the data-parallel ranks (core's weights are global shares)
        try:
            self.ddp = DistributedDataParallel(config=tcfg, ddp_config=ddp_cfg, module=chunk)
        finally:
            tcfg.calculate_per_token_loss = before
        o = role_config(config, role).optim
        b1, b2 = (float(x) for x in o.betas)
        ocfg = OptimizerConfig(optimizer="adam", lr=float(o.lr), weight_decay=float(o.weight_decay), adam_beta1=b1, adam_beta2=b2, adam_eps=float(o.eps),
                               clip_grad=0.0, bf16=False, fp16=False, params_dtype=torch.float32, use_distributed_optimizer=True,
                               decoupled_weight_decay=True)
        # config_overrides={}: every parameter in one group with the role's weight decay, as torch.optim.AdamW over the
        # model (rl_core's build_adamw) applies it (megatron-core's default exempts biases and norms)
        self.optimizer = get_megatron_optimizer(ocfg, [self.ddp], config_overrides={}, use_gloo_process_groups=False)
        self.torch_optimizer = _single(self.optimizer).optimizer
        for group in self.torch_optimizer.param_groups:  # torch's fused AdamW kernel (megatron-core builds foreach without Apex / TE)
            group["foreach"], group["fused"] = False, True

    def no_sync(self, last: bool):
        """overlap_grad_reduce: every micro-batch but the last accumulates without starting the buckets' reduce-scatter."""
        return contextlib.nullcontext() if last or not self.overlap_grad_reduce else self.ddp.no_sync()

    def zero_grad(self) -> None:
        self.ddp.zero_grad_buffer()
        self.optimizer.zero_grad(set_to_none=True)

    def reduce_and_clip(self, max_norm: float | None) -> float:
        """The buckets' reduce-scatter finished, the shards' gradients given to AdamW, the whole-model norm (clipped to
        ``max_norm`` > 0)."""
        self.ddp.finish_grad_sync()
        self.optimizer.prepare_grads()  # (no loss scaler: float16 is refused by problem())
        if max_norm is not None and max_norm > 0:
            return float(self.optimizer.clip_grad_norm(float(max_norm)))
        return float(self.optimizer.get_grad_norm())

    def step(self) -> None:
        """AdamW on this rank's shards, the shards copied into the parameters, the parameters all-gathered."""
        self.optimizer.step_with_ready_grads()
