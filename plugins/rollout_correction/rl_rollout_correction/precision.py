"""``rollout.precision=fp8`` (its checks: CheckCards of :mod:`rl_rollout_correction.plugin`): an engine whose card declares ``fp8`` quantizes the weights it receives and its KV cache
to FP8 while the trainer keeps ``model.dtype`` (docs/config.md). Native only (compute capability >= 8.9): the checks
refuse it elsewhere and for engines without FP8 kernels, where it would only cost time. The quantization error is
corrected as any rollout / trainer mismatch (:func:`apply_defaults`).
"""

from __future__ import annotations

from typing import Any

from rl_core.config.sections import evolve_key
from rl_core.problems import Problem

#: the oldest compute capability with FP8 tensor cores (Ada / Hopper)
FP8_CAPABILITY = (8, 9)


def apply_defaults(config: Any) -> Any:
    """``config`` with ``rollout.calculate_log_probs`` and truncated importance sampling (``rollout_is=token``) on under
    FP8, where the config left them off."""
    if getattr(config.rollout, "precision", "auto") == "auto":
        return config
    rc = config.algorithm.rollout_correction
    if rc.rollout_is is not None and config.rollout.calculate_log_probs:
        return config
    config = evolve_key(config, "algorithm.rollout_correction.rollout_is", rc.rollout_is or "token")
    return evolve_key(config, "rollout.calculate_log_probs", True)


def backend_problems(config: Any, registry: Any) -> list[Problem]:
    """``rollout.precision=fp8`` with a rollout backend whose card does not declare ``fp8`` (in ``registry``: the check's)."""
    if config.rollout.precision == "auto":
        return []
    if config.model.dtype == "float32":
        return [Problem(key="rollout.precision", what="is 'fp8' but model.dtype is float32: the engines quantize 16-bit weights to FP8 only",
                        fix="model.dtype=bfloat16 (or auto on a GPU), or rollout.precision=auto")]
    cards = registry.cards["rollout"]
    card = cards.get(config.rollout.name)
    if card is None or getattr(card, "fp8", False):
        return []
    capable = sorted(c.name for c in cards.values() if getattr(c, "fp8", False))
    fix = (" or ".join(f"rollout.name={name}" for name in capable) + " (FP8 weights and KV cache), or ") if capable else "a rollout package with FP8 (none installed), or "
    return [Problem(key="rollout.precision", what=f"is {config.rollout.precision!r} but the {card.name!r} rollout has no FP8 kernels: "
                    "it would quantize and dequantize every weight and only cost time", fix=fix + "rollout.precision=auto")]


def device_problems(config: Any, registry: Any, capability: tuple[int, int] | None = None) -> list[Problem]:
    """FP8 needs a GPU of compute capability >= 8.9 (``capability``: that of this machine's first GPU when None;
    ``registry``: the check's, unused)."""
    if config.rollout.precision != "fp8":
        return []
    fix = "rollout.precision=auto (the rollout in model.dtype), or a GPU with FP8 tensor cores (compute capability >= 8.9: L4, L40, H100, H200, B200)"
    if config.trainer.device != "cuda":
        return [Problem(key="rollout.precision", what=f"is 'fp8' but trainer.device={config.trainer.device!r}: FP8 rollouts run on GPUs only", fix=fix)]
    if capability is None:
        import torch

        if not torch.cuda.is_available():
            return []  # the devices check reports the missing GPU
        capability = tuple(torch.cuda.get_device_capability(0))
    if tuple(capability) < FP8_CAPABILITY:
        return [Problem(key="rollout.precision", what=f"is 'fp8' but this machine's GPU has compute capability {capability[0]}.{capability[1]}, "
                        "which has no FP8 tensor cores (8.9 or newer)", why="the engine would emulate FP8 GEMMs: slower than bfloat16", fix=fix)]
    return []
