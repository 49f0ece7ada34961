"""``model.dtype: auto``: the compute precision that is fast on the machine the run starts on.

bfloat16 is only fast where the hardware computes it. On a GPU with bfloat16
(Ampere and later) it halves activations and the rollout's weights. On a CPU
it needs AVX512-BF16 or AMX (recent Xeons): there the quickstart's steps were
1.7x faster in bfloat16; on a CPU without them (AVX2 only: many laptops, AMD
EPYC before Zen 4) torch emulates it and the model's matrix products run 5-8x
*slower* than in float32, the quickstart's steps 7.3x slower (69.5 vs 9.5 s on
a 2-core AMD EPYC, torch 2.13: ``bench/results/cpu_precision.md``).

:func:`resolve_dtype` picks ``bfloat16`` where it is fast and ``float32``
elsewhere (also on a GPU without bfloat16, where float16 with loss scaling is
the explicit choice). :func:`slow_low_precision` is the warning ``rlcore check``
gives for an explicit ``bfloat16`` / ``float16`` on such a CPU.
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
    """``(dtype, why)``: ``requested`` unless it is ``auto``; then what is fast on ``device`` here.

    ``device`` is the resolved ``trainer.device`` (``cpu`` or ``cuda``). A ``cuda`` config
    checked on a machine without a GPU gets ``bfloat16`` (every GPU lent for training
    since Ampere has it).
    """
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
