"""rl-profiling's cards: the config section ``profiler`` (rl_profiling.config), its check (rl_profiling.checks) and the
feature ``profiling`` whose hooks the workers and the trainer call (rl_profiling.profiling)."""

from __future__ import annotations

from rl_core import hookimpl
from rl_core.cards import CheckCard, ConfigSectionCard, FeatureCard


@hookimpl
def rl_core_register_config_sections(register):
    register(ConfigSectionCard(name="profiler", factory="rl_profiling.config:ProfilerConfig",
                               description="torch.profiler traces / Nsight Systems marks of chosen training steps (docs/config.md)"))


@hookimpl
def rl_core_register_checks(register):
    register(CheckCard(name="profiler", factory="rl_profiling.checks:problems", stage="rules",
                       description="profiler.steps to record, a role left to record, nsys only on a local CUDA run"))


@hookimpl
def rl_core_register_features(register):
    # worker_profiler(config, rank, device) -> StepProfiler | None: HybridWorker.profiler (rl_core.placement.contract.dispatch
    # records a chosen call under it); profiled_step(config, step) -> bool: the trainer sends WorkerMethod.PROFILE_STEP
    register(FeatureCard(name="profiling", factory="rl_profiling.profiling:enabled", keys=("profiler.tool",),
                         hooks={"worker_profiler": "rl_profiling.profiling:for_worker", "profiled_step": "rl_profiling.profiling:profiled_step"},
                         description="profiler.tool: record the calls of profiler.steps on the chosen ranks and roles"))
