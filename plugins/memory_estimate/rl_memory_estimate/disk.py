"""Disk a run writes, estimated before anything is built: what `rlcore check` and `rlcore train` print (the feature's
hook ``print_disk``) and what a run reads before it saves (``disk_estimate``: rl_core.trainer.saving).

What a checkpoint and the final model hold, and how many stay on disk: docs/memory.md ("Disk").
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import Any

import attrs
from rl_core.plan.memory import DTYPE_BYTES, model_shape

GB = 1e9  # disk sizes in decimal gigabytes, as `du -h --si` and file managers show them
OPTIMIZER_BYTES_PER_PARAM = 8  # AdamW: exp_avg + exp_avg_sq, float32
MASTER_BYTES_PER_PARAM = 4  # float32 master weights


def _gb(n: float) -> str:
    return f"{n / GB:.2f} GB" if n >= 0.01 * GB else f"{n / 1e6:.1f} MB"


@attrs.frozen(kw_only=True)
class DiskEstimate:
    per_checkpoint: int
    final_model: int
    saves: int | None  # checkpoints the run writes (None: the number of steps is not known before the data is read)
    kept: int | None  # at most this many on disk at once (None: every one)
    model: str
    final_what: str = ""  # what hf_final holds, when it is not the model's float32 weights

    @property
    def written(self) -> int | None:
        return None if self.saves is None else self.saves * self.per_checkpoint + self.final_model

    @property
    def peak_on_disk(self) -> int | None:
        if self.saves is None:
            return None
        held = self.saves if self.kept is None else min(self.saves, self.kept + 1)  # +1 while the newest is written
        return held * self.per_checkpoint + self.final_model

    def lines(self) -> list[str]:
        if self.saves == 0:
            ckpt = f"no checkpoints (trainer.save_freq=-1; one would be {_gb(self.per_checkpoint)})"
        else:
            every = "" if self.saves is None else f", {self.saves} written"
            keep = "every one kept" if self.kept is None else f"the latest {self.kept} kept"
            ckpt = f"{_gb(self.per_checkpoint)} per checkpoint{every}, {keep}"
        out = [f"disk estimate ({self.model}):", f"  checkpoints        {ckpt}", f"  final model        {_gb(self.final_model)} (hf_final{self.final_what})"]
        if self.written is not None:
            out.append(f"  the run writes     {_gb(self.written)} in all, at most {_gb(self.peak_on_disk)} on disk at once")
        return out


def _saves(config: Any) -> int | None:
    t = config.trainer
    if t.save_freq is None or t.save_freq <= 0:
        return 0
    steps = t.total_training_steps
    if not steps:
        return None
    return steps // t.save_freq + (1 if steps % t.save_freq else 0)  # every save_freq steps and at the last step


def estimate_disk(config: Any, shape: Any = None, features: Any = None) -> DiskEstimate | None:
    """The run's checkpoint, final-model and total disk use; None when the model's shape is unknown. ``features``: the
    plan's (:class:`rl_core.plan.features.Features`: LoRA's adapter count; without them, a full fine-tune's)."""
    shape = shape or model_shape(config.model.path, getattr(config.model, "override_config", None) or None)
    if shape is None:
        return None
    p = shape.params
    m = config.model
    c = DTYPE_BYTES.get(m.dtype, 4)
    own = features.actor_terms(config, shape, 1, c) if features is not None else None
    lora = own is not None and own.frozen_base  # the base frozen, ``a`` parameters trained (LoRA: rl-lora)
    if lora:
        a = own.trainable
        per_checkpoint = (MASTER_BYTES_PER_PARAM + OPTIMIZER_BYTES_PER_PARAM) * a + (c * shape.vocab * shape.hidden if shape.tied else 0)
        final = MASTER_BYTES_PER_PARAM * a + (c * p if config.trainer.save_merged_lora else 0)
    else:
        tied = MASTER_BYTES_PER_PARAM * shape.vocab * shape.hidden if shape.tied else 0
        per_checkpoint = (MASTER_BYTES_PER_PARAM + OPTIMIZER_BYTES_PER_PARAM) * p + tied
        final = MASTER_BYTES_PER_PARAM * p
    if getattr(config.critic, "enable", False):
        # a value model: the body plus a one-output head instead of the LM head
        body = p - (0 if shape.tied else shape.vocab * shape.hidden)
        per_checkpoint += (MASTER_BYTES_PER_PARAM + OPTIMIZER_BYTES_PER_PARAM) * (body + shape.hidden)
    return DiskEstimate(
        per_checkpoint=per_checkpoint, final_model=final, saves=_saves(config), kept=config.trainer.max_ckpt_to_keep,
        model=f"{p / 1e6:.0f}M parameters" if p >= 1e6 else f"{p / 1e3:.0f}k parameters",
        final_what="" if not lora else ": a LoRA adapter folder" + (" + the merged weights" if config.trainer.save_merged_lora else ""),
    )


def print_disk(stack, out=None) -> None:
    """Disk per checkpoint, for the final model and for the run (the hook ``print_disk``); a warning when the folder's disk is smaller."""
    out = out or sys.stdout
    est = estimate_disk(stack.config, features=stack.features)
    if est is None:
        print(f"disk estimate: the shape of {stack.config.model.path!r} is unknown (no config.json found locally)", file=out)
        return
    for line in est.lines():
        print(line, file=out)
    need = est.peak_on_disk
    folder = os.path.abspath(os.path.expanduser(stack.config.trainer.output_dir))
    while not os.path.exists(folder):
        folder = os.path.dirname(folder)
    free = shutil.disk_usage(folder).free
    if need is not None and need > free:
        print(f"warning: disk: the run needs up to {need / GB:.2f} GB under trainer.output_dir but {folder} has {free / GB:.2f} GB free; "
              "lower trainer.max_ckpt_to_keep, save less often (trainer.save_freq), or point trainer.output_dir elsewhere", file=sys.stderr)
