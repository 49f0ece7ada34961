"""rl-profiling's check of the ``profiler`` section (a CheckCard, stage ``rules``)."""

from __future__ import annotations

from typing import Any

from rl_core.problems import Problem


def problems(config: Any, registry: Any = None) -> list[Problem]:
    """The ``profiler`` section's problems: steps to record, roles left, nsys where it can capture."""
    found = problem(config)
    return [found] if found is not None else []


def problem(cfg: Any) -> Problem | None:
    p = cfg.profiler
    roles = {"actor", "rollout", "ref", "critic", "reward_model"}
    if p.tool is None:
        return None
    if not p.steps:
        return Problem(key="profiler.steps", what="is empty while profiler.tool is set: no step is recorded", fix="list the steps to record, e.g. profiler.steps=[2]",
                       severity="warning")
    if any(not isinstance(s, int) or s < 1 for s in p.steps):
        return Problem(key="profiler.steps", what=f"{p.steps} holds a value that is not a step number (1, 2, ...)", fix="e.g. profiler.steps=[2,5]")
    if all(getattr(p, r) is False for r in roles):
        return Problem(key="profiler.actor", what="and every other role under profiler are false while profiler.tool is set: nothing would be recorded",
                       fix="set profiler.<role>=true for the roles to record (none set records every role)")
    if p.tool == "nsys":
        if cfg.trainer.device == "cpu":
            return Problem(key="profiler.tool", what="is nsys with trainer.device=cpu: Nsight Systems' capture range and NVTX ranges are CUDA calls",
                           fix="profile a CUDA run, or use profiler.tool=torch on the CPU")
        if cfg.trainer.placement == "ray":
            return Problem(key="profiler.tool", what="is nsys with trainer.placement=ray: rl-core does not start Ray's worker processes under nsys "
                           "(verl's worker_nsight_options), so nothing would be captured", fix="profile a local run (trainer.placement=local) under nsys, or use profiler.tool=torch")
        return Problem(key="profiler.tool", severity="warning",
                       what="is nsys: rl-core marks the chosen calls (NVTX ranges) and opens a capture range around them (cudaProfilerStart/Stop); "
                            "Nsight Systems records only if it runs rlcore train",
                       fix="run: nsys profile --capture-range=cudaProfilerApi --capture-range-end=repeat -t cuda,nvtx rlcore train ...")
    return None
