"""``model.dtype: auto``: bfloat16 where the hardware computes it (a GPU since Ampere, a CPU with AVX512-BF16 or AMX),
float32 elsewhere, where torch emulates bfloat16 several times slower (docs/config.md, "Precision").
:func:`slow_low_precision` is ``rlcore check``'s warning for an explicit low precision on such a CPU.
"""

from __future__ import annotations

AUTO = "auto"


def cpu_bf16_support() -> str | None:
    """The CPU feature that makes bfloat16 fast here (``"AMX"`` or ``"AVX512-BF16"``), or None."""
    import torch

    checks = (("AMX", "_is_amx_tile_supported"), ("AVX512-BF16", "_is_avx512_bf16_supported"))
    for name, fn in checks:
        probe = getattr(torch.cpu, fn, None)
        try:
            if probe is not None and probe():
                return name
        except Exception:  # noqa: BLE001 - a probe that fails means "not known to be there"
            continue
    return None


def cpu_capability() -> str:
    """What torch's CPU kernels were dispatched for (``"AVX2"``, ``"AVX512"``, ...), for messages."""
    import torch

    try:
        return str(torch.backends.cpu.get_cpu_capability())
    except Exception:  # noqa: BLE001
        return "unknown"


def resolve_dtype(requested: str, device: str) -> tuple[str, str]:
    """``(dtype, why)``: ``requested`` unless it is ``auto``; then what is fast on ``device`` (``cpu`` / ``cuda``) here
    (``bfloat16`` for a ``cuda`` config checked without a GPU)."""
    if requested != AUTO:
        return requested, "set in the config"
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            return "bfloat16", "auto: a GPU run (no GPU here to ask; assumed to support bfloat16)"
        if torch.cuda.is_bf16_supported():
            return "bfloat16", f"auto: {torch.cuda.get_device_name()} computes bfloat16"
        return "float32", f"auto: {torch.cuda.get_device_name()} has no bfloat16 (model.dtype=float16 trains there with loss scaling)"
    feature = cpu_bf16_support()
    if feature:
        return "bfloat16", f"auto: this CPU computes bfloat16 ({feature}); float32 weights and optimizer, bfloat16 compute"
    return "float32", f"auto: this CPU has no native bfloat16 ({cpu_capability()}, no AVX512-BF16 or AMX), where float32 is several times faster"


def slow_low_precision(dtype: str, device: str) -> str | None:
    """A warning's text when ``dtype`` is bfloat16 / float16 on a CPU that only emulates it, else None."""
    if device != "cpu" or dtype not in ("bfloat16", "float16") or cpu_bf16_support():
        return None
    return (
        f"is {dtype} on a CPU without native {dtype} ({cpu_capability()}; no AVX512-BF16 or AMX): torch emulates it and "
        f"matrix products run several times slower than in float32 (the quickstart's steps 7.3x slower on a 2-core AVX2 machine)"
    )


def precision_line(dtype: str, device: str) -> str:
    """What `rlcore train` / `--dry-run` prints about the (normalised) ``model.dtype``."""
    if dtype == "float32":
        return "float32" + (" (no native bfloat16 on this CPU: " + cpu_capability() + ")" if device == "cpu" and not cpu_bf16_support() else "")
    if device == "cpu":
        feature = cpu_bf16_support()
        return f"{dtype} compute, float32 weights and optimizer" + (f" (this CPU has {feature})" if feature else " (emulated on this CPU: slow; see rlcore check)")
    return f"{dtype} compute, float32 weights and optimizer"
