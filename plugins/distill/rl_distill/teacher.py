"""The ``teacher`` log-prob role: a second HF model, in the trainer's process, scoring the student's sampled tokens.

Built once by the trainer (``factory(config, tokenizer)``) from ``algorithm.options`` (:mod:`rl_distill.options`):
its own folder, dtype and device. Every step :meth:`Teacher.log_probs` runs the teacher over the batch's prompts and
responses in micro-batches with core's log-prob path (``rl_core.logprobs.forward_response_chunked``, the one the
reference model's pass uses: LM head in chunks, shared prompts, padding columns skipped), without gradients.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import torch
from rl_core.logprobs import forward_response_chunked
from rl_core.modeling import check_model_path, load_causal_lm, load_tokenizer
from rl_core.problems import UserError
from rl_core.util.precision import resolve_dtype

from rl_distill.options import distill_options
from rl_distill.tokenizers import TOKENIZER_FIX, tokenizer_mismatch

KEY = "algorithm.options.teacher_path"


class TeacherError(UserError):
    """The teacher cannot be used with this student (no teacher, not a model folder, another tokenizer)."""


class Teacher:
    def __init__(self, config: Any, tokenizer: Any) -> None:
        opts = distill_options(config)
        path = opts["teacher_path"]
        if not path:
            raise TeacherError(f"algorithm.adv_estimator=distill needs a teacher: set {KEY} to the teacher's HF folder")
        check_model_path(path, key=KEY)
        student_name = config.model.tokenizer_path or config.model.path
        why = tokenizer_mismatch(tokenizer, load_tokenizer(path, key=KEY), student_name=student_name, teacher_name=path)
        if why:
            raise TeacherError(f"{why}; fix: {TOKENIZER_FIX}")
        self.device = torch.device(opts["teacher_device"] or config.trainer.device or "cpu")
        dtype, _ = resolve_dtype(opts["teacher_dtype"], self.device.type)
        # auto on a CPU with native bfloat16: float32 weights under bfloat16 autocast (as the train side computes);
        # a dtype set in the config: the weights in that dtype
        self.autocast = torch.bfloat16 if (opts["teacher_dtype"] == "auto" and dtype == "bfloat16") else None
        weights = "float32" if self.autocast is not None and self.device.type == "cpu" else dtype
        self.model = load_causal_lm(path, dtype=weights, device=self.device, key=KEY).eval()
        self.model.requires_grad_(False)
        self.micro = int(opts["teacher_micro_batch_size"])

    @torch.no_grad()
    def log_probs(self, batch: Any, temperature: float) -> torch.Tensor:
        """``[B, R]`` float32 on the CPU: the teacher's log-probs of ``batch["responses"]`` at ``temperature``."""
        t = temperature if temperature and temperature > 0 else 1.0
        names = ("input_ids", "attention_mask", "position_ids", "responses")
        rows = batch["responses"].shape[0]
        ctx = torch.autocast(self.device.type, dtype=self.autocast) if self.autocast is not None else nullcontext()
        out = []
        with ctx:
            for s in range(0, rows, self.micro):
                x = [batch[n][s : s + self.micro].to(self.device) for n in names]
                lp, _ = forward_response_chunked(self.model, *x, temperature=t, share_prompts=True)
                out.append(lp.float().cpu())
        return torch.cat(out)


def factory(config: Any, tokenizer: Any) -> Teacher:
    return Teacher(config, tokenizer)
