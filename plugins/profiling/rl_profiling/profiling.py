"""torch.profiler / Nsight Systems marks of chosen training steps (``profiler.*``; verl's ``global_profiler``).

For each step in ``profiler.steps`` the trainer tells every worker the step (``WorkerMethod.PROFILE_STEP``); the chosen
ranks record each call of a chosen role (:attr:`rl_core.placement.contract.WorkerMethod.role`), one Chrome trace per
call as verl's ``discrete`` mode writes them: ``<save_path>/step_<k>/<role>_<method>_rank<r>.json``. Calls that are
not a computation (weight sync, checkpoints) are never recorded. ``tool=nsys`` (CUDA only) puts an NVTX range and a
capture range (cudaProfilerStart / Stop) around each call (``discrete``) or each chosen step, for an ``nsys profile
--capture-range=cudaProfilerApi`` that runs ``rlcore train``; rl-core then writes nothing itself.
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

#: the calls that are a role's computation (the others: weight transfer, checkpoints, bookkeeping)
PROFILED_METHODS = frozenset(
    {"generate", "compute_log_prob", "compute_ref_log_prob", "compute_values", "score_with_model", "update_actor", "update_critic"}
)


def trace_dir(config) -> str:
    """Where traces go: ``profiler.save_path``, or ``<trainer.output_dir>/profile``."""
    return config.profiler.save_path or os.path.join(config.trainer.output_dir, "profile")


ROLES = ("actor", "rollout", "ref", "critic", "reward_model")


def profiled_roles(config) -> frozenset[str]:
    """The roles set true under ``profiler``; every role when none is set."""
    chosen = {r for r in ROLES if getattr(config.profiler, r) is True}
    return frozenset(chosen) if any(getattr(config.profiler, r) is not None for r in ROLES) else frozenset(ROLES)


class StepProfiler:
    """One worker's profiler: records the chosen calls of the step set by :meth:`set_step` (None: no step)."""

    def __init__(self, config, rank: int, device: str = "cpu") -> None:
        p = config.profiler
        self.rank = rank
        self.roles = profiled_roles(config)
        self.on_this_rank = p.all_ranks or rank in set(p.ranks)
        self.root = trace_dir(config)
        self.cuda = str(device).startswith("cuda")
        self.nsys = p.tool == "nsys"
        self.discrete = bool(p.discrete)
        if self.nsys and not self.cuda:
            raise ValueError(f"profiler.tool=nsys on a {device} worker: Nsight Systems' capture range is a CUDA call; use profiler.tool=torch")
        self.capturing = False  # tool=nsys, discrete=false: the step's capture range is open
        self.step: int | None = None
        self.written: list[str] = []

    @classmethod
    def for_worker(cls, config, rank: int, device: str = "cpu") -> StepProfiler | None:
        """A profiler when ``profiler.tool`` is set and this rank is one of the chosen ones, else None."""
        if config.profiler.tool is None:
            return None
        profiler = cls(config, rank, device)
        return profiler if profiler.on_this_rank else None

    def set_step(self, step: int | None) -> None:
        if self.nsys and not self.discrete:  # one capture range over the whole chosen step
            import torch

            if self.capturing:
                torch.cuda.profiler.stop()
                self.capturing = False
            if step is not None:
                torch.cuda.profiler.start()
                self.capturing = True
        self.step = step

    def wanted(self, method: str, role: str) -> bool:
        return self.step is not None and method in PROFILED_METHODS and role in self.roles

    @contextlib.contextmanager
    def around(self, method: str, role: str) -> Iterator[None]:
        """Record the call ``method`` of ``role`` if this step and role are chosen; write its trace after it."""
        if not self.wanted(method, role):
            yield
            return
        if self.nsys:
            with self._nvtx(f"{role}.{method}"):
                yield
            return
        import torch.profiler as tp

        activities = [tp.ProfilerActivity.CPU] + ([tp.ProfilerActivity.CUDA] if self.cuda else [])
        with tp.profile(activities=activities) as prof:
            with tp.record_function(f"{role}.{method}"):
                yield
        folder = os.path.join(self.root, f"step_{self.step}")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"{role}_{method}_rank{self.rank}.json")
        prof.export_chrome_trace(path)
        self.written.append(path)

    @contextlib.contextmanager
    def _nvtx(self, name: str) -> Iterator[None]:
        """tool=nsys: an NVTX range (and, discrete, a capture range of its own) around a chosen call."""
        import torch

        if self.discrete:
            torch.cuda.profiler.start()
        torch.cuda.nvtx.range_push(name)
        try:
            yield
        finally:
            torch.cuda.nvtx.range_pop()
            if self.discrete:
                torch.cuda.profiler.stop()


def enabled(config) -> bool:
    """The feature is on when ``profiler.tool`` is set (rl_core.cards.FeatureCard's factory)."""
    return config.profiler.tool is not None


def for_worker(config, rank: int, device: str = "cpu") -> StepProfiler | None:
    """The ``worker_profiler`` hook: a worker's profiler (:meth:`StepProfiler.for_worker`)."""
    return StepProfiler.for_worker(config, rank, device)


def profiled_step(config, step: int) -> bool:
    """The ``profiled_step`` hook: whether the trainer's ``step`` is one of ``profiler.steps``."""
    return step in config.profiler.steps
