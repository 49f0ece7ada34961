"""``model.compile: auto``: compile the decoder layers where it pays off, eager where it cannot (issue 56).

torch.compile's cost is paid once per process (inductor compiles each distinct graph: the grad / no-grad
forwards, the backward), its gain per step. Measured: on a 2-core CPU the GSM8K example's first step took 570 s
compiled against 29 s eager, and a CPU step gains little from fused kernels; on an H100 a 7B model's compile took
about a minute and the fused norms / rotary / residuals then save a few percent of every step. So ``auto`` is:

- eager on a CPU (the compile costs more than any CPU run of a few hundred steps gets back);
- eager for a short GPU run (``trainer.total_training_steps`` below :data:`MIN_STEPS`);
- compiled otherwise.

:func:`resolve_compile` returns the choice and the reason, which ``rlcore check`` prints (the sizes table).
"""

from __future__ import annotations

from typing import Any

MIN_STEPS = 50  # a GPU run shorter than this does not earn a ~1 min compile back at a few percent a step


def resolve_compile(requested: Any, device: str, config: Any) -> tuple[bool, str]:
    """``(compile?, why)``; ``why`` is empty unless ``requested`` is ``"auto"``."""
    if requested != "auto":
        return bool(requested), ""
    steps = config.trainer.total_training_steps
    if device == "cpu":
        return False, ("auto -> eager: on a CPU the compile of every decoder layer costs minutes (the GSM8K example's first "
                       "step: 570 s compiled, 29 s eager) and the fused kernels gain little there")
    if steps is not None and steps < MIN_STEPS:
        return False, (f"auto -> eager: a short run (trainer.total_training_steps={steps} < {MIN_STEPS}) does not earn the "
                       "compile (about a minute per process on a GPU) back")
    return True, (f"auto -> compiled: a {device} run of {steps if steps is not None else 'the data set'} steps earns the "
                  "compile (about a minute per process) back with fused norms / rotary / residuals each step")


def compile_warning(requested: Any, device: str) -> str | None:
    """The warning for ``model.compile=true`` on a CPU (the user asked for it: kept, but said)."""
    if requested is True and device == "cpu":
        return ("model.compile=true on a CPU: the first step compiles every decoder layer (minutes; the GSM8K example's first "
                "step took 570 s against 29 s eager) and later steps gain little; model.compile=auto picks eager here")
    return None
