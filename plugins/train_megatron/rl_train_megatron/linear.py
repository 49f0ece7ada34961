"""megatron-core's Column / RowParallelLinear as plain ``torch.nn.functional.linear`` where they have nothing to
communicate (issue 49).

Without TransformerEngine / Apex every megatron-core linear layer runs ``linear_with_grad_accumulation_and_async_allreduce``,
a Python ``autograd.Function``: on a tensor-parallel group of one rank, without sequence parallelism and without the
gradient-accumulation fusion (Apex / TE only) its forward is ``input @ weight.t()`` and its backward two matmuls, but
both run Python per layer and call (its backward under ``custom_bwd``), keep the float32 weight for the backward and
cast it to bfloat16 again there. :func:`use_plain_linear` gives such layers ``F.linear`` instead (autograd's own
matmul backward in C++, the autocast copy of the weight saved from the forward), what transformers' ``nn.Linear``
runs in the fsdp backend. Layers with a tensor-parallel group of more than one rank (their all-reduces / gathers live
in megatron-core's function) keep megatron-core's path.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

#: False: megatron-core's own linear function everywhere (bench/megatron_update_mfu_gpu.py's A/B; not a setting)
ENABLED = True


def _plain_linear(input, weight, bias=None, gradient_accumulation_fusion=False, allreduce_dgrad=False, sequence_parallel=False, **_):
    if gradient_accumulation_fusion or allreduce_dgrad or sequence_parallel:  # (use_plain_linear picks layers without them)
        raise RuntimeError("plain linear: a layer with tensor-parallel communication or gradient-accumulation fusion")
    return F.linear(input, weight, bias)


def _alone(module) -> bool:
    group = getattr(module, "tp_group", None)
    size = group.size() if group is not None else torch.distributed.get_world_size()
    return (size == 1 and not getattr(module, "sequence_parallel", False) and not getattr(module, "allreduce_dgrad", False)
            and not getattr(module, "gradient_accumulation_fusion", False) and not module.config.defer_embedding_wgrad_compute)


def use_plain_linear(model: torch.nn.Module) -> int:
    """Every Column / RowParallelLinear of ``model`` on a one-rank tensor-parallel group runs ``F.linear``; how many."""
    from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear

    n = 0
    if not ENABLED:
        return n
    for m in model.modules():
        if isinstance(m, (ColumnParallelLinear, RowParallelLinear)) and _alone(m):
            m._forward_impl = _plain_linear
            n += 1
    return n
