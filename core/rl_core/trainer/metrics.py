"""Step metrics computed by the controller from a finished batch."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator, Mapping

import torch

from rl_core.batch import Batch


@contextmanager
def timed(timings: dict[str, float], name: str) -> Iterator[None]:
    """Adds the block's wall time to ``timings["timing_s/<name>"]``."""
    start = time.perf_counter()
    try:
        yield
    finally:
        key = f"timing_s/{name}"
        timings[key] = timings.get(key, 0.0) + time.perf_counter() - start


def mean_of(dicts: list[Mapping[str, float]]) -> dict[str, float]:
    """Average each key over the ranks that reported it."""
    out: dict[str, list[float]] = {}
    for d in dicts:
        for k, v in d.items():
            out.setdefault(k, []).append(float(v))
    return {k: sum(v) / len(v) for k, v in out.items()}


def _stats(prefix: str, x: torch.Tensor) -> dict[str, float]:
    x = x.float()
    return {
        f"{prefix}/mean": x.mean().item(),
        f"{prefix}/std": x.std(unbiased=False).item() if x.numel() > 1 else 0.0,
        f"{prefix}/max": x.max().item(),
        f"{prefix}/min": x.min().item(),
    }


def batch_metrics(batch: Batch, max_response_length: int) -> dict[str, float]:
    """Reward, length, advantage and value statistics of one training batch."""
    mask = batch["response_mask"].float()
    lengths = mask.sum(-1)
    prompt_lengths = batch["attention_mask"].sum(-1).float() - lengths
    out: dict[str, float] = {}
    out.update({k.replace("score/", "reward/"): v for k, v in _stats("score", batch["token_level_scores"].sum(-1)).items()})
    if "token_level_rewards" in batch:
        out["reward/with_kl_mean"] = batch["token_level_rewards"].sum(-1).mean().item()
    out.update(_stats("response_length", lengths))
    out["response_length/clip_ratio"] = (lengths >= max_response_length).float().mean().item()
    out["prompt_length/mean"] = prompt_lengths.mean().item()
    valid = mask.bool()
    for name in ("advantages", "returns", "values"):
        if name in batch:
            vals = batch[name][valid]
            if vals.numel():
                out[f"critic/{name}_mean"] = vals.float().mean().item()
                out[f"critic/{name}_max"] = vals.float().max().item()
                out[f"critic/{name}_min"] = vals.float().min().item()
    return out


def throughput(batch: Batch, step_seconds: float, world_size: int) -> dict[str, float]:
    tokens = batch["attention_mask"].sum().item()
    return {
        "perf/total_tokens": float(tokens),
        "perf/throughput_tokens_per_s": tokens / max(step_seconds, 1e-9),
        "perf/throughput_tokens_per_s_per_device": tokens / max(step_seconds, 1e-9) / world_size,
    }

