"""The Trainer's validation: the held-out prompts generated with the validation sampling and scored, unshaped."""

from __future__ import annotations

import json
import os
from typing import Callable

import attrs
import torch

from rl_core.backends import SamplingParams
from rl_core.batch import Batch
from rl_core.observers import StepRollouts
from rl_core.problems import UserError
from rl_core.trainer.metrics import timed


class ValidationError(UserError):
    """A validation whose every reward failed: its numbers would be zeros that mean nothing."""


class Validation:
    """The :class:`~rl_core.trainer.loop.Trainer`'s validation (``trainer.test_freq``, ``rlcore eval``)."""

    def validation_sampling(self) -> SamplingParams:
        """rollout.val_*: val_n samples per prompt, greedy unless rollout.val_do_sample (verl's val_kwargs)."""
        r = self.config.rollout
        return attrs.evolve(
            self.sampling(greedy=True), n=r.val_n, greedy=not r.val_do_sample,
            temperature=r.val_temperature, top_p=r.val_top_p if r.val_do_sample else 1.0, top_k=r.val_top_k if r.val_do_sample else -1,
        )

    def _keep_val_generations(self, batch: Batch, scores: torch.Tensor) -> None:
        """trainer.log_val_generations: append the first N validation samples to <output_dir>/val_generations.jsonl."""
        if self.observers:  # rl_core.observers: the validation's rows, at the step whose weights they measure
            self.observers.call("on_rollouts", StepRollouts(
                step=self._val_step, phase="val", batch=batch, scores=scores, policy_version=self._val_step,
                tokenizer=self.tokenizer, max_response_length=self.config.data.max_response_length))
        n = self.config.trainer.log_val_generations
        kept = getattr(self, "_val_kept", 0)
        if n <= kept:
            return
        texts = self.decode_responses(batch)[: n - kept]
        with open(os.path.join(self.config.trainer.output_dir, "val_generations.jsonl"), "a") as f:
            for i, text in enumerate(texts):
                f.write(json.dumps({"response": text, "score": float(scores[i])}) + "\n")
        self._val_kept = kept + len(texts)

    def validate(self, step: int = 0, per_source: Callable | None = None) -> dict[str, float]:
        """Greedy validation over the held-out prompts, plus the metrics ``per_source(scores, data_sources)`` gives (rlcore eval)."""
        if self.val_loader is None:
            return {}
        if self.kind is not None:
            return self.kind.validate()
        self._val_step = step  # the step whose weights this validation measures (step observers)
        t: dict[str, float] = {}
        scores_all, lengths, sources = [], [], []
        agent: dict[str, float] = {}  # multi-turn rollouts: val/agent/* counters (tool calls, errors, stops)
        self._val_kept = 0
        failed = 0
        with timed(t, "validate"):
            for prompts in self.val_loader.iterate_once():
                batch = self.generate(prompts, self.validation_sampling())
                scores, reward_metrics = self.score_rows(batch, train=False)[:2]
                failed += int(reward_metrics.get("reward/timeouts", 0) + reward_metrics.get("reward/errors", 0))
                self._keep_val_generations(batch, scores)
                scores_all.append(scores)
                if per_source:
                    sources.extend(batch.non_tensors.get("data_source", ["unknown"] * scores.numel()))
                lengths.append(batch["response_mask"].sum(-1).float())
                for k, v in batch.meta.items():
                    if k.startswith("agent/"):
                        agent[f"val/{k}"] = agent.get(f"val/{k}", 0.0) + float(v)
        scores = torch.cat(scores_all)
        if scores.numel() and failed >= scores.numel():
            last = self.ckpt.latest()
            raise ValidationError(
                f"validation: every one of the {scores.numel()} rewards failed (errors or timeouts), so val/accuracy would read 0 "
                "and mean nothing; check the reward function on the validation data (reward.on_error=raise shows the first error, "
                "reward.timeout_s the time limit)" + (f"; a rerun resumes from {last[1]}" if last else "")
            )
        return {
            **agent,
            "val/reward_mean": scores.float().mean().item(),
            "val/accuracy": (scores >= 1.0 - 1e-6).float().mean().item(),
            "val/response_length_mean": torch.cat(lengths).mean().item(),
            "val/samples": float(scores.numel()),
            **(per_source(scores, sources) if per_source is not None else {}),
            **t,
        }
