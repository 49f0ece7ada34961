"""Several data-parallel vLLM engines side by side: the rank vLLM reads while it builds one.

With the ``external_launcher`` executor every rl-core rank is one vLLM worker and vLLM's groups are cut from the
whole ``torch.distributed`` world: ``parallel_state.initialize_model_parallel`` lays the ranks out as
``arange(world).reshape(-1, DP, PP, PCP, TP)``, the leading ``-1`` being engines side by side, so ranks
``[k * E, (k + 1) * E)`` (``E = TP x PP x PCP x DP``) form engine ``k`` with TP, DP and EP groups of their own, and the
engine's DP lockstep runs over its own DP group (``LLMEngine.dp_group = get_dp_group().cpu_group``).

What does not follow the layout is the DP rank: ``ParallelConfig.__post_init__`` (vLLM 0.26 and 0.32) sets
``data_parallel_rank = int(os.environ["RANK"]) // (world_size // data_parallel_size)``, ``world_size`` being the
engine's ``TP x PP x PCP x DP``; from engine 1 on that exceeds DP and vLLM refuses the engine (ValueError). The only other
read of ``RANK`` while the engine is built is the launcher's own (``ExecutorWithExternalLauncher._distributed_args``,
both releases), which names the worker's rank: cosmetic there (``torch.distributed`` already exists, so vLLM takes
the world's ranks from it; the value only picks the worker that reports usage statistics and names profiler
traces). Neither reads it after start-up. So :func:`engine_rank_env` sets ``RANK`` to the rank within the engine for
the engine's construction and restores it afterwards: the DP rank vLLM derives is then ``(rank // (TP x PP x PCP)) % DP``,
the same index its DP group gives the rank, and the worker is its engine's rank ``rank % E``, as in a standalone
engine. Engines without data parallelism keep reading the global rank (nothing in them depends on it).
"""

from __future__ import annotations

import contextlib
import math
import os
from typing import Iterator


def engine_size(kwargs: dict) -> int:
    """Ranks of one vLLM engine built with ``kwargs``: TP x PP x PCP x DP (vLLM's ``ParallelConfig.world_size``)."""
    keys = ("tensor_parallel_size", "pipeline_parallel_size", "prefill_context_parallel_size", "data_parallel_size")
    return math.prod(int(kwargs.get(key) or 1) for key in keys)


@contextlib.contextmanager
def engine_rank_env(rank: int, kwargs: dict) -> Iterator[int | None]:
    """While vLLM builds an engine of ``kwargs`` (the ``vllm.LLM`` arguments) on global rank ``rank``: ``RANK`` is the
    rank within that engine when it is data parallel (yields it; None and nothing changed otherwise), restored after."""
    if int(kwargs.get("data_parallel_size", 1)) <= 1 or kwargs.get("distributed_executor_backend") != "external_launcher":
        yield None
        return
    saved = os.environ.get("RANK")
    local = rank % engine_size(kwargs)
    os.environ["RANK"] = str(local)
    try:
        yield local
    finally:
        if saved is None:
            os.environ.pop("RANK", None)
        else:
            os.environ["RANK"] = saved
