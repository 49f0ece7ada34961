"""``trainer.observers.traces.*``: what rl-traces keeps (checked by ``rlcore check``, rl_core.card_options)."""

from __future__ import annotations

import attrs
from rl_core.card_options import Options

_ge0 = attrs.validators.ge(0)


@attrs.frozen(kw_only=True)
class TracesOptions(Options):
    #: write traces at all (on by default once rl-traces is installed)
    enable: bool = True
    #: MiB of trace files kept whole: every group of every step until the folder holds this much
    budget_mb: float = attrs.field(default=64.0, validator=_ge0)
    #: after the budget: the share of each step's groups still kept (0: nothing more), the same groups on a rerun
    share_after_budget: float = attrs.field(default=0.1, validator=[_ge0, attrs.validators.le(1)])
    #: per sample, at most this many response tokens keep their text piece, advantage and log-prob gap (the colouring)
    token_limit: int = attrs.field(default=256, validator=_ge0)
    #: keep validation rollouts too
    validation: bool = True
