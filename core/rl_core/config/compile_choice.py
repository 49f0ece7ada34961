"""``model.compile: auto``: compile the decoder layers where it pays off, eager where it cannot (issue 56).

torch.compile's cost is paid once per process (inductor compiles each distinct graph: the grad / no-grad
forwards, the backward: ~10 s a graph for a 7B model on an H100, rl_core.modeling), its gain (fused norms, rotary,
residuals) per step. Issue 56 measured the GSM8K example's first step on a 2-core CPU at 570 s compiled (most of it
the recompilation loop fixed in rl_core.modeling) against 29 s eager; inductor's CPU compile of a layer set alone
takes minutes there, more than a CPU run's steps win back, and nothing here measured a CPU step faster compiled.
So ``auto`` is:

- eager on a CPU;
- eager for a short GPU run (``trainer.total_training_steps`` below :data:`MIN_STEPS`);
- compiled otherwise.

:func:`resolve_compile` returns the choice and the reason, which ``rlcore check`` prints (the sizes table).
"""

from __future__ import annotations

from typing import Any

MIN_STEPS = 50  # a GPU run shorter than this is a trial: the compile's minutes are not won back


def resolve_compile(requested: Any, device: str, config: Any) -> tuple[bool, str]:
    """``(compile?, why)``; ``why`` is empty unless ``requested`` is ``"auto"``."""
    if requested != "auto":
        return bool(requested), ""
    steps = config.trainer.total_training_steps
    if device == "cpu":
        return False, ("auto -> eager: on a CPU the compile of every decoder layer costs minutes (issue 56 measured the GSM8K example's first "
                       "step: 570 s compiled, 29 s eager), more than a CPU run's steps win back")
    if steps is not None and steps < MIN_STEPS:
        return False, (f"auto -> eager: a short run (trainer.total_training_steps={steps} < {MIN_STEPS}) does not earn the "
                       "compile (minutes per process) back")
    length = f"{steps} steps" if steps is not None else "trainer.total_epochs over the data set"
    return True, (f"auto -> compiled: a {device} run of {length} earns the "
                  "compile back with fused norms / rotary / residuals each step")


def compile_warning(requested: Any, device: str) -> str | None:
    """The warning for ``model.compile=true`` on a CPU (the user asked for it: kept, but said)."""
    if requested is True and device == "cpu":
        return ("model.compile=true on a CPU: the first step compiles every decoder layer (minutes; issue 56 measured the GSM8K example's first "
                "step at 570 s against 29 s eager); model.compile=auto picks eager here")
    return None
