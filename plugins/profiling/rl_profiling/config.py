"""rl-profiling's config section ``profiler`` (a ConfigSectionCard: rl_core.config.sections), read and checked with
core's own sections."""

from __future__ import annotations

import attrs
from rl_core.config.schema import choice


@attrs.frozen(kw_only=True)
class ProfilerConfig:
    """torch.profiler traces of chosen steps (:mod:`rl_profiling.profiling`; verl's ``global_profiler`` with tool=torch)."""

    # torch: torch.profiler traces written by rl-core; nsys: NVTX ranges + cudaProfilerStart/Stop for an `nsys profile
    # --capture-range=cudaProfilerApi` that runs rlcore train (CUDA only; rl-core does not start nsys)
    tool: str | None = choice(None, (None, "torch", "nsys"), hint="torch records the chosen steps with torch.profiler; nsys marks them for Nsight Systems; null: off")
    steps: list[int] = attrs.field(factory=list)  # the training steps (1-based) to record
    save_path: str | None = None  # null: <trainer.output_dir>/profile
    # whose calls are recorded: the roles set true; none set: every role (verl's <role>.profiler.enable)
    actor: bool | None = None
    rollout: bool | None = None
    ref: bool | None = None
    critic: bool | None = None
    reward_model: bool | None = None
    ranks: list[int] = attrs.field(factory=lambda: [0])  # the worker ranks that record
    all_ranks: bool = False
    # tool=nsys: a capture range per recorded call (true) or one per recorded step (false), as verl's nsys.discrete
    discrete: bool = False
