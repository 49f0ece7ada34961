"""rl-memory-estimate's registrations: the ``memory`` check (rl_memory_estimate.checks) and the feature card
``memory_estimate``, whose hooks `rlcore check` / `--dry-run` call (``print_memory``) and ``--target ...,ram=``
checks against (``host_memory_problems``). The feature is never "on": its hooks are read while it is installed."""

from __future__ import annotations

from rl_core.cards import FeatureCard
from rl_core import hookimpl
from rl_memory_estimate.checks import rl_core_register_checks  # noqa: F401 - the hook, registered with this module


def never(config) -> bool:
    return False


@hookimpl
def rl_core_register_features(register) -> None:
    register(FeatureCard(name="memory_estimate", factory=f"{__name__}:never",
                         hooks={"print_memory": "rl_memory_estimate.report:print_memory",
                                "host_memory_problems": "rl_memory_estimate.checks:host_memory_problems"},
                         description="the per-device and host memory estimate rlcore check prints, and the checks of what fits"))
