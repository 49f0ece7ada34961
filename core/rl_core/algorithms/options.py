"""The options classes of the built-in estimators (``algorithm.options``) and policy losses (``actor.policy_loss_options``),
declared on their cards and checked by ``rlcore check``; rl-algorithms' derive from these. No torch here."""

from __future__ import annotations

from typing import Literal

import attrs

from rl_core.card_options import Options

_positive = attrs.validators.gt(0)

#: actor.loss_agg_mode's values (rl_core.algorithms.aggregation) and the KL estimators' names (rl_core.algorithms.kl),
#: here without torch for the schema's checks
LOSS_AGG_MODES: tuple[str, ...] = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm", "token-sum")
_BASE_KL_KINDS: tuple[str, ...] = ("k1", "kl", "abs", "k2", "mse", "k3", "low_var_kl")
KL_KINDS: tuple[str, ...] = _BASE_KL_KINDS + tuple(f"{k}+" for k in _BASE_KL_KINDS)


# ------------------------------------------------------------------ estimators
@attrs.frozen(kw_only=True)
class GaeOptions(Options):
    whiten: bool = True  # normalise the advantages over the batch


@attrs.frozen(kw_only=True)
class ReturnsOptions(Options):
    # the critic's targets of a critic-free estimator: the advantages (verl) or the reward-to-go
    returns: Literal["advantages", "reward_to_go"] = "advantages"


@attrs.frozen(kw_only=True)
class GroupOptions(ReturnsOptions):
    zero_singleton_groups: bool = False  # a group of one sample gets advantage 0


@attrs.frozen(kw_only=True)
class GrpoOptions(GroupOptions):
    norm_adv_by_std: bool = True  # False: Dr. GRPO
    epsilon: float = attrs.field(default=1e-6, validator=_positive)  # added to the group's std


# -------------------------------------------------------------- policy losses
@attrs.frozen(kw_only=True)
class LossOptions(Options):
    # the constant of loss_agg_mode=seq-mean-token-sum-norm (verl's actor.loss_scale_factor; default the padded width)
    norm_length: float | None = None
