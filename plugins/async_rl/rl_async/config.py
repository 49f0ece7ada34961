"""rl-async's config section ``async`` (a ConfigSectionCard: rl_core.config.sections), read and checked with core's own
sections; the attribute is ``config.async_`` (``async`` is a Python keyword: rl_core.config.sections.KEYWORD_SECTIONS)."""

from __future__ import annotations

import attrs
from rl_core.config.schema import choice, num


@attrs.frozen(kw_only=True)
class AsyncConfig:
    """Off-policy training with a rollout pool of its own (``rollout.n_gpus_per_node``): the rl-async package (plugins/async_rl).

    The config key is ``async`` (a Python keyword: the attribute is ``config.async_``)."""

    # 0: synchronous (generate, update, sync in turn); 1: generation of step k+1 overlaps the update of step k; s: bounded
    max_staleness: int = num(0, ge=0, hint="policy versions a batch may lag behind the trainer; 0 is synchronous")
    on_stale: str = choice("drop", ("drop", "wait"), hint="drop: skip a too-old batch; wait: generate its prompts again")
    sync_timeout_s: float = num(60.0, gt=0, hint="seconds a weight transfer may take before the run stops, e.g. 60")
    bucket_mb: float = num(256.0, gt=0, hint="MiB of weights per broadcast, e.g. 256")
    # max_staleness >= 1: the train pool broadcasts its weights from a thread and goes on with the next step; the
    # rollout pool receives them before its next generation (one extra copy of the weights in the sender's memory).
    # null: on for a CPU run (gloo), off on GPUs
    overlap_sync: bool | None = None
