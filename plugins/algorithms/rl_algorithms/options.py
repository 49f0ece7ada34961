"""The options of rl-algorithms' estimators (``algorithm.options``) and policy losses (``actor.policy_loss_options``).

Declared on their cards (:mod:`rl_algorithms.plugin`) and checked by ``rlcore check`` (:mod:`rl_core.card_options`);
the functions read the same names with the same defaults. No torch here.
"""

from __future__ import annotations

import attrs
from rl_core.algorithms.options import GroupOptions, LossOptions, ReturnsOptions

_positive = attrs.validators.gt(0)


# ------------------------------------------------------------------ estimators
@attrs.frozen(kw_only=True)
class PassKOptions(ReturnsOptions):
    norm_adv_by_std: bool = True
    epsilon: float = attrs.field(default=1e-6, validator=_positive)


@attrs.frozen(kw_only=True)
class GpgOptions(GroupOptions):
    f_norm: float = attrs.field(default=1.0, validator=_positive)


# -------------------------------------------------------------- policy losses
@attrs.frozen(kw_only=True)
class DroOptions(LossOptions):
    dro_beta: float = attrs.field(validator=_positive)  # the quadratic log-ratio penalty (verl: actor.policy_loss.dro_beta)


@attrs.frozen(kw_only=True)
class SapoOptions(LossOptions):
    tau_pos: float = attrs.field(default=1.0, validator=_positive)  # gate temperature, positive advantages
    tau_neg: float = attrs.field(default=1.05, validator=_positive)  # and negative ones


@attrs.frozen(kw_only=True)
class ClipCovOptions(LossOptions):
    clip_cov_ratio: float = attrs.field(default=0.0002, validator=_positive)  # share of tokens whose gradient is dropped
    clip_cov_lb: float = 1.0
    clip_cov_ub: float = 5.0


@attrs.frozen(kw_only=True)
class KlCovOptions(LossOptions):
    kl_cov_ratio: float = attrs.field(default=0.0002, validator=_positive)  # share of tokens penalised
    ppo_kl_coef: float = 0.1
