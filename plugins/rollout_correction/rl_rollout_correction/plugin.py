"""rl-rollout-correction's cards: the config sections ``algorithm.rollout_correction`` and ``rollout.mismatch``
(:mod:`rl_rollout_correction.config`), their checks and ``rollout.precision=fp8``'s (:mod:`rl_rollout_correction.checks`,
:mod:`rl_rollout_correction.precision`) and the feature ``rollout_correction`` whose object the kernel calls
(:mod:`rl_rollout_correction.feature`). Light: no torch."""

from __future__ import annotations

from rl_core import hookimpl
from rl_core.cards import CheckCard, ConfigSectionCard, FeatureCard


@hookimpl
def rl_core_register_config_sections(register) -> None:
    register(ConfigSectionCard(name="algorithm.rollout_correction", factory="rl_rollout_correction.config:RolloutCorrectionConfig",
                               description="verl's rollout correction: truncated / masked importance sampling, rejection sampling (docs/config.md)"))
    register(ConfigSectionCard(name="rollout.mismatch", factory="rl_rollout_correction.config:MismatchConfig",
                               description="the rollout-vs-trainer log-prob gap: its threshold and the bound that stops a run (docs/exact.md)"))


@hookimpl
def rl_core_register_checks(register) -> None:
    register(CheckCard(name="rollout_correction", stage="values", order=50, factory="rl_rollout_correction.checks:check",
                       description="algorithm.rollout_correction: log-probs on and returned by the rollout, thresholds that parse"))
    register(CheckCard(name="rollout_precision", stage="names", order=60, factory="rl_rollout_correction.precision:backend_problems",
                       description="rollout.precision=fp8: a rollout backend with FP8 kernels"))
    register(CheckCard(name="rollout_precision_device", stage="device", order=60, factory="rl_rollout_correction.precision:device_problems",
                       description="rollout.precision=fp8: a GPU with FP8 tensor cores (compute capability >= 8.9)"))


@hookimpl
def rl_core_register_features(register) -> None:
    register(FeatureCard(name="rollout_correction", factory="rl_rollout_correction.feature:enabled", keys=("rollout.precision",),
                         provides="rl_rollout_correction.feature:CORRECTION",
                         description="rollout / trainer mismatch: the rollout_corr/* metrics, rollout.mismatch's bound, "
                                     "importance weights and rejection (algorithm.rollout_correction), rollout.precision=fp8's defaults"))
