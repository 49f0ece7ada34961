"""Statistics of advantages, returns and values over valid (unmasked) tokens only."""

from __future__ import annotations

from torch import Tensor

from rl_core.algorithms.masked import bool_mask, check_same_shape


def _stats(prefix: str, x: Tensor, mask: Tensor) -> dict[str, float]:
    valid = x.detach().float()[mask]
    if valid.numel() == 0:
        return {f"{prefix}_mean": 0.0, f"{prefix}_std": 0.0, f"{prefix}_max": 0.0, f"{prefix}_min": 0.0}
    return {
        f"{prefix}_mean": float(valid.mean()),
        f"{prefix}_std": float(valid.std(unbiased=False)),
        f"{prefix}_max": float(valid.max()),
        f"{prefix}_min": float(valid.min()),
    }


def advantage_metrics(
    *,
    advantages: Tensor,
    returns: Tensor,
    response_mask: Tensor,
    values: Tensor | None = None,
) -> dict[str, float]:
    """``adv_*``, ``returns_*`` (and with ``values``, ``values_*`` and ``vf_explained_var``): mean / population std / max /
    min over valid tokens, as floats; an all-masked batch gives 0 everywhere."""
    mask = bool_mask(response_mask)
    for name, x in (("advantages", advantages), ("returns", returns)) + ((("values", values),) if values is not None else ()):
        check_same_shape(name, x, mask)
    out = {**_stats("adv", advantages, mask), **_stats("returns", returns, mask)}
    if values is not None:
        out.update(_stats("values", values, mask))
        ret = returns.detach().float()[mask]
        resid = ret - values.detach().float()[mask]
        var_ret = float(ret.var(unbiased=False)) if ret.numel() else 0.0
        out["vf_explained_var"] = 1.0 - float(resid.var(unbiased=False)) / var_ret if var_ret > 0 else 0.0
    return out
