"""``trainer.kind=sft``: supervised fine-tuning as a run kind of the RL loop (:mod:`rl_core.run_kind`).

No rollout, no reward: each step takes the next batch of SFT rows (:mod:`rl_sft.loader`) and updates the actor with
the ``sft`` policy loss (:mod:`rl_sft.loss`) through core's update: the same train backends, mini- / micro-batches,
token-budget batches (``actor.use_dynamic_bsz``), packing (``actor.use_remove_padding``), LoRA, LR schedule, guard,
checkpoints, resume and ``hf_final``. Validation is the token-weighted loss on the validation rows (``val/loss``).
"""

from __future__ import annotations

import time

from rl_core.run_kind import RunHandle

from rl_sft.data import build_examples, split_rows
from rl_sft.loader import SFTLoader
from rl_sft.options import SFTOptions


def options_of(config) -> SFTOptions:
    return SFTOptions(**dict(config.trainer.kind_options))


def pad_id_of(tokenizer) -> int:
    for attr in ("pad_token_id", "eos_token_id"):
        if isinstance(getattr(tokenizer, attr, None), int):
            return getattr(tokenizer, attr)
    return 0


class SFTRun:
    """The SFT run kind over the loop's :class:`~rl_core.run_kind.RunHandle`."""

    def __init__(self, handle: RunHandle) -> None:
        self.handle = handle
        self.config = handle.config
        self.options = options_of(self.config)

    def loaders(self):
        cfg, tok = self.config, self.handle.tokenizer
        d, pad = cfg.data, pad_id_of(tok)
        train = build_examples(split_rows(cfg, "train", generated_rows=self.handle.generated_rows), tok, cfg, self.options)
        seed = d.seed if d.seed is not None else cfg.trainer.seed
        train_loader = SFTLoader(train, d.train_batch_size, shuffle=d.shuffle, seed=seed, drop_last=True, pad_id=pad, source="the SFT training data")
        info = {"train_prompts": len(train), "train_dropped": 0, "val_prompts": 0, "val_dropped": 0}
        val_loader = None
        if d.val_files or getattr(getattr(d, "val_generator", None), "name", ""):  # rl-data's section
            val = build_examples(split_rows(cfg, "val", d.val_max_samples, generated_rows=self.handle.generated_rows), tok, cfg, self.options)
            val_loader = SFTLoader(val, d.val_batch_size or len(val), shuffle=False, seed=0, drop_last=False, pad_id=pad, source="the SFT validation data")
            info["val_prompts"] = len(val)
        self.train_loader, self.val_loader = train_loader, val_loader
        return train_loader, val_loader, info

    def train_step(self, batch, step: int) -> dict[str, float]:
        start = time.perf_counter()
        metrics = self.handle.update_actor(batch)
        seconds = time.perf_counter() - start
        tokens = float(batch["response_mask"].sum())
        metrics.update({
            "sft/loss": metrics.get("actor/loss", metrics.get("actor/pg_loss", float("nan"))),
            "sft/tokens": tokens,
            "sft/sequence_length_mean": float(batch["attention_mask"].sum(-1).float().mean()),
            "timing_s/update_actor": seconds,
            "timing_s/step": seconds,
            "perf/trained_tokens_per_s": tokens / seconds if seconds > 0 else 0.0,
            "training/epoch": float(self.train_loader.state_dict()["epoch"]),
        })
        return metrics

    def validate(self) -> dict[str, float]:
        start = time.perf_counter()
        nll, tokens = 0.0, 0.0
        for batch in self.val_loader.iterate_once():
            lp = self.handle.actor_log_probs(batch, 1.0).double()
            mask = batch["response_mask"].double()
            nll -= float((lp * mask).sum())
            tokens += float(mask.sum())
        return {"val/loss": nll / tokens if tokens else float("nan"), "val/tokens": tokens, "timing_s/validate": time.perf_counter() - start}


def make(handle: RunHandle) -> SFTRun:
    return SFTRun(handle)
