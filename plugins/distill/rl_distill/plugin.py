"""Registers on-policy distillation: the ``teacher`` log-prob role, the ``distill`` estimator that reads it, and the
check of ``rlcore check`` (a teacher, a model folder, the student's tokenizer)."""

from __future__ import annotations

from rl_core import hookimpl
from rl_core.cards import CheckCard, EstimatorCard, LogProbRoleCard


@hookimpl
def rl_core_register_log_prob_roles(register):
    register(LogProbRoleCard(name="teacher", factory="rl_distill.teacher:factory",
                             description="a teacher model (algorithm.options.teacher_path) in the trainer's process: its log-probs of the student's sampled tokens"))


@hookimpl
def rl_core_register_advantage_estimators(register):
    register(EstimatorCard(name="distill", factory="rl_distill.estimator:distill", options="rl_distill.options:DistillOptions",
                           log_probs=("actor", "teacher"),
                           description="on-policy distillation: kl_coef * (teacher - student log-prob) per token, + reward_weight * GRPO"))


@hookimpl
def rl_core_register_checks(register):
    register(CheckCard(name="distill", stage="files", order=60, factory="rl_distill.checks:distill_problems",
                       description="algorithm.adv_estimator=distill: a teacher folder with the student's tokenizer"))
