"""rl-memory-estimate's registrations: the ``memory`` check (rl_memory_estimate.checks) and the feature card
``memory_estimate``, whose hooks `rlcore check` / `--dry-run` call (``print_memory``, ``print_disk``), the disk estimate a run reads before saving (``disk_estimate``) and ``--target ...,ram=``
reads (``target_part``: the node's RAM against the host estimate). The feature is never "on": its hooks are read while it is installed."""

from __future__ import annotations

from rl_core.cards import FeatureCard
from rl_core import hookimpl
from rl_memory_estimate.checks import rl_core_register_checks  # noqa: F401 - the hook, registered with this module


def never(config) -> bool:
    return False


@hookimpl
def rl_core_register_features(register) -> None:
    register(FeatureCard(name="memory_estimate", factory=f"{__name__}:never",
                         hooks={"print_memory": "rl_memory_estimate.report:print_memory", "print_disk": "rl_memory_estimate.disk:print_disk",
                                "disk_estimate": "rl_memory_estimate.disk:estimate_disk",
                                "target_part": "rl_memory_estimate.checks:TARGET_RAM"},
                         description="the per-device and host memory estimate rlcore check prints, and the checks of what fits"))
