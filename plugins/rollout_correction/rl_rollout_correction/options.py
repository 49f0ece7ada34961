"""The torch-free part of the rollout correction: its options parsed (``algorithm.rollout_correction``'s thresholds and
rejection criteria) and what a config switches on; the check and the resolver's seam read it without torch."""

from __future__ import annotations

from typing import Any

IS_LEVELS = ("token", "sequence")
RS_OPTIONS = (
    "token_k1", "token_k2", "token_k3", "seq_sum_k1", "seq_sum_k2", "seq_sum_k3",
    "seq_mean_k1", "seq_mean_k2", "seq_mean_k3", "seq_max_k2", "seq_max_k3",
)


def _number(spec: Any, what: str) -> float:
    try:
        return float(spec)
    except (TypeError, ValueError):
        raise ValueError(f"{what}={spec!r} is not a number") from None


def parse_is_threshold(spec: float | str) -> tuple[float, float | None]:
    """``2.0`` / ``"2.0"`` -> ``(2.0, None)`` (truncate); ``"0.5_5.0"`` -> ``(5.0, 0.5)`` (mask)."""
    if isinstance(spec, bool) or spec is None:
        raise ValueError(f"algorithm.rollout_correction.rollout_is_threshold={spec!r}: use a number (truncate) or 'lower_upper' (mask)")
    lower = None
    if isinstance(spec, str) and "_" in spec.strip():
        lo, hi = spec.strip().split("_", 1)
        lower, upper = _number(lo, "rollout_is_threshold lower bound"), _number(hi, "rollout_is_threshold upper bound")
    else:
        upper = _number(spec.strip() if isinstance(spec, str) else spec, "rollout_is_threshold")
    if not upper > 0 or (lower is not None and not (0 < lower <= upper)):
        raise ValueError(f"algorithm.rollout_correction.rollout_is_threshold={spec!r}: bounds must satisfy 0 < lower <= upper")
    return upper, lower


def parse_rs(options: str, spec: float | str | None) -> dict[str, tuple[float | None, float]]:
    """Criteria and thresholds -> ``{option: (lower or None, upper)}`` (k1 bounds are ratios)."""
    names = []
    for name in (o.strip() for o in str(options).split(",")):
        if name and name not in names:
            if name not in RS_OPTIONS:
                raise ValueError(f"algorithm.rollout_correction.rollout_rs option {name!r} is not supported; use some of {', '.join(RS_OPTIONS)}")
            names.append(name)
    if not names:
        raise ValueError("algorithm.rollout_correction.rollout_rs names no criterion")
    if spec is None:
        raise ValueError("algorithm.rollout_correction.rollout_rs needs rollout_rs_threshold")
    specs = [s.strip() for s in str(spec).split(",") if s.strip()] if isinstance(spec, str) else [str(spec)]
    if len(specs) == 1:
        specs = specs * len(names)
    if len(specs) != len(names):
        raise ValueError(f"rollout_rs_threshold has {len(specs)} values for {len(names)} rollout_rs criteria; give one or one per criterion")
    out: dict[str, tuple[float | None, float]] = {}
    for name, s in zip(names, specs):
        if name.endswith("k1"):
            lo, hi = s.split("_", 1) if "_" in s else (str(1.0 / _number(s, "rollout_rs_threshold")), s)
            lower, upper = _number(lo, "rollout_rs_threshold"), _number(hi, "rollout_rs_threshold")
            if not (0 < lower <= upper):
                raise ValueError(f"rollout_rs_threshold {s!r} for {name}: need 0 < lower <= upper")
            out[name] = (lower, upper)
        else:
            if "_" in s:
                raise ValueError(f"rollout_rs_threshold {s!r} for {name}: k2/k3 criteria take one upper bound")
            upper = _number(s, "rollout_rs_threshold")
            if not upper > 0:
                raise ValueError(f"rollout_rs_threshold {s!r} for {name} must be positive")
            out[name] = (None, upper)
    return out


def correction_on(config: Any) -> bool:
    """Whether a run config asks for importance weights or rejection (needs old and rollout log-probs)."""
    rc = config.algorithm.rollout_correction
    return rc.rollout_is is not None or rc.rollout_rs is not None


def in_update(config: Any) -> bool:
    """Whether an on-policy update (one mini-batch, one epoch) can weight its loss from its own forward's log-probs (every
    micro-batch's forward runs before the only optimizer step): per-row weights only, no batch normalisation (a mean over
    the whole batch) and no rejection (the mask sets the loss normaliser, fixed before the first forward)."""
    rc = config.algorithm.rollout_correction
    return rc.rollout_is is not None and rc.rollout_rs is None and not rc.rollout_is_batch_normalize


def update_correction(role: str, config: Any, on_policy: bool) -> Any:
    """``algorithm.rollout_correction`` when this on-policy update weights its loss itself (:func:`in_update`), else None."""
    if role != "actor" or not on_policy or not correction_on(config) or not in_update(config):
        return None
    return config.algorithm.rollout_correction
