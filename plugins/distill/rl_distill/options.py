"""``algorithm.options`` of the ``distill`` estimator: the teacher (its model, dtype, device) and the signal's weights."""

from __future__ import annotations

from typing import Literal

import attrs
from rl_core.card_options import Options


@attrs.frozen(kw_only=True)
class DistillOptions(Options):
    # the teacher: an HF folder (e.g. a trained run's hf_final) with the student's tokenizer (same vocabulary and ids)
    teacher_path: str | None = None
    # auto: as model.dtype=auto on the teacher's device (bfloat16 compute over float32 weights where that is native)
    teacher_dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    # null: trainer.device (the controller's process: the teacher runs in-process there); e.g. "cuda:1" for a GPU of its own
    teacher_device: str | None = None
    teacher_micro_batch_size: int = attrs.field(default=16, validator=attrs.validators.gt(0))
    # advantage per token: kl_coef * (teacher log-prob - student log-prob) + reward_weight * GRPO's advantage
    kl_coef: float = attrs.field(default=1.0, validator=attrs.validators.ge(0))
    reward_weight: float = attrs.field(default=0.0, validator=attrs.validators.ge(0))
    # GRPO's options (the reward part): as the grpo estimator's
    norm_adv_by_std: bool = True
    epsilon: float = attrs.field(default=1e-6, validator=attrs.validators.gt(0))


def distill_options(config) -> dict:
    """The config's ``algorithm.options`` with the defaults filled in (a plain dict)."""
    known = {f.name for f in attrs.fields(DistillOptions)}
    return attrs.asdict(DistillOptions(**{k: v for k, v in dict(config.algorithm.options).items() if k in known}))
