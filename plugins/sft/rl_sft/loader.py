"""SFT batches in the RL update's layout, epoch after epoch, resumable at any batch.

A sequence is split at its first trained token: the tokens before it are the "prompt" (left-padded), the rest the
"response" (right-padded), and ``response_mask`` is the loss mask over the response, so the actor's update reads
exactly the trained tokens' log-probs (:mod:`rl_core.run_kind`). Epoch ``e``'s order is a permutation drawn from
``seed`` and ``e`` only, so ``{"epoch", "index"}`` resumes at the batch an uninterrupted run would have drawn.
"""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np
import torch
from rl_core.batch import Batch
from rl_core.modeling import position_ids_from_mask

from rl_sft.data import Example, SFTDataError


def collate(examples: Sequence[Example], pad_id: int) -> Batch:
    """``input_ids`` / ``attention_mask`` / ``position_ids`` / ``responses`` / ``response_mask`` (the loss mask) plus
    ``advantages`` (1) and ``old_log_probs`` (0), which the SFT loss does not read."""
    cuts = [ex.mask.index(1) for ex in examples]
    P = max(cuts)
    R = max(len(ex.ids) - c for ex, c in zip(examples, cuts))
    n = len(examples)
    ids = torch.full((n, P + R), pad_id, dtype=torch.long)
    attn = torch.zeros((n, P + R), dtype=torch.long)
    loss_mask = torch.zeros((n, R), dtype=torch.long)
    for r, (ex, c) in enumerate(zip(examples, cuts)):
        tail = len(ex.ids) - c
        ids[r, P - c : P + tail] = torch.tensor(ex.ids, dtype=torch.long)
        attn[r, P - c : P + tail] = 1
        loss_mask[r, :tail] = torch.tensor(ex.mask[c:], dtype=torch.long)
    tensors = {
        "input_ids": ids, "attention_mask": attn, "position_ids": position_ids_from_mask(attn), "responses": ids[:, P:].clone(),
        "response_mask": loss_mask, "advantages": torch.ones(n, R), "old_log_probs": torch.zeros(n, R),
    }
    return Batch(tensors, {"origin": [ex.origin for ex in examples]}, {"temperature": 1.0})


class SFTLoader:
    """Batches of ``examples`` (:class:`rl_core.run_kind.Loader`)."""

    def __init__(self, examples: list[Example], batch_size: int, *, shuffle: bool, seed: int, drop_last: bool, pad_id: int, source: str) -> None:
        if drop_last and len(examples) < batch_size:
            raise SFTDataError(f"{source}: {len(examples)} SFT rows are fewer than one batch of {batch_size}; lower data.train_batch_size or add data")
        self.examples, self.batch_size, self.shuffle, self.seed = examples, batch_size, shuffle, seed
        self.drop_last, self.pad_id, self.source = drop_last, pad_id, source
        self.epoch = self.index = 0

    def __len__(self) -> int:
        n = len(self.examples)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def order(self, epoch: int) -> np.ndarray:
        n = len(self.examples)
        return np.random.default_rng([self.seed, epoch]).permutation(n) if self.shuffle else np.arange(n)

    def next_batch(self) -> Batch:
        idx = self.order(self.epoch)[self.index : self.index + self.batch_size]
        epoch = self.epoch
        self.index += len(idx)
        left = len(self.examples) - self.index
        if left == 0 or (self.drop_last and left < self.batch_size):
            self.epoch, self.index = self.epoch + 1, 0
        batch = collate([self.examples[int(i)] for i in idx], self.pad_id)
        batch.meta["epoch"] = epoch
        return batch

    def iterate_once(self) -> Iterator[Batch]:
        order = self.order(0)
        stop = len(self) * self.batch_size if self.drop_last else len(order)
        for start in range(0, stop, self.batch_size):
            yield collate([self.examples[int(i)] for i in order[start : start + self.batch_size]], self.pad_id)

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "index": self.index, "num_rows": len(self.examples)}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if state.get("num_rows", len(self.examples)) != len(self.examples):
            raise SFTDataError(
                f"the checkpoint's SFT loader saw {state['num_rows']} rows but {self.source} now has {len(self.examples)}; "
                "the data changed, so the resumed order would differ"
            )
        self.epoch, self.index = int(state["epoch"]), int(state["index"])
