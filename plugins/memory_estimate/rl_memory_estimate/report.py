"""What `rlcore check` and `--dry-run` print about memory (the hook ``print_memory`` of the feature card
``memory_estimate``, which rl_core.cli.check_cmd calls when this package is installed)."""

from __future__ import annotations

import sys

from rl_memory_estimate.estimate import estimate
from rl_memory_estimate.host import host_estimate, host_ram


def print_memory(stack, out=None) -> None:
    """The per-device memory estimate (rl_memory_estimate.estimate); a warning on stderr when it does not fit."""
    out = out or sys.stdout
    est = estimate(stack.config, stack.sizes, rollout=stack.rollout, train=stack.train, reward_model=stack.reward_model, features=stack.features)
    if est is None:
        print(f"memory estimate: the shape of {stack.config.model.path!r} is unknown (no config.json found locally); point model.path at a local folder to get one", file=out)
        return
    for line in est.lines():
        print(line, file=out)
    if est.device != "cpu":  # what the run keeps in host memory (offload, sleep, the model load): rl_memory_estimate.host

        here = host_ram() if est.available is not None else None  # this machine's RAM only when the GPU is this machine's
        for line in host_estimate(stack.config, est.shape, world_size=stack.sizes.world_size, available=here, features=stack.features).lines():
            print(line, file=out)
    if est.fits is False:
        print(f"warning: memory: the estimated peak ({est.peak / 2**30:.1f} GiB per {'process' if est.device == 'cpu' else 'GPU'}) exceeds the {'RAM' if est.device == 'cpu' else 'device memory'}; see 'to fit' above", file=sys.stderr)
