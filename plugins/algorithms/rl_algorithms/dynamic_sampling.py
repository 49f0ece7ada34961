"""DAPO's dynamic sampling (``algorithm.filter_groups.*``, ``data.gen_batch_size``), verl's semantics.

One training step runs generation rounds: each round generates and scores ``data.gen_batch_size`` prompts x
``rollout.n`` samples, and keeps only the groups whose ``algorithm.filter_groups.metric`` is not the same for all
n samples (:func:`rl_algorithms.group_filter.kept_groups`). Rounds go on, drawing the next prompts, until
``data.train_batch_size`` groups are kept; the first ``train_batch_size`` kept groups form the step's batch (the
surplus of the last round is discarded, as verl does). After ``max_num_gen_batches`` rounds (0: no limit) without
enough groups the run stops with :class:`DynamicSamplingError`.

Metrics: ``dynamic_sampling/rounds``, ``groups_kept`` (over all rounds, before trimming), ``groups_dropped``,
``groups_unused`` (kept but past the batch). ``reward/*`` metrics describe every sample scored in the step's rounds;
``reward/mean``, ``response_length/*`` and the rest describe the trained batch.

Registered as the batch sampler of ``algorithm.filter_groups.enable`` (:class:`rl_core.cards.BatchSamplerCard`):
:func:`make` builds a :class:`DynamicSampling` the loop calls with one round's generation and scoring.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import attrs
import torch
from rl_algorithms.group_filter import groups_in_order, kept_groups, rows_of
from rl_core.batch import Batch
from rl_core.problems import UserError
from rl_core.train_engine.backend import NO_ROUTE  # a padded column of routed_experts routes natively

#: per-round metrics that add up over rounds (the others are averaged, weighted by the round's samples)
SUMMED = ("reward/timeouts", "reward/errors")
#: prompt-side fields, left-padded; [B, P + R] fields are padded on the prompt side too
PROMPT_FIELDS = ("prompts",)
FULL_FIELDS = ("input_ids", "attention_mask", "position_ids", "routed_experts")


class DynamicSamplingError(UserError):
    """Too many generation rounds without enough groups of differing scores."""


def filter_values(metric: str, *, scores: torch.Tensor, raw_scores: torch.Tensor, extras: Sequence[dict]) -> list[float]:
    """Each row's value of ``algorithm.filter_groups.metric``.

    ``acc``: the reward function's ``"acc"`` when it returns one, else its score (verl's DAPO reward manager);
    ``score``: the reward before the overlong penalty (``raw_scores``); ``seq_reward`` / ``seq_final_reward``: the
    reward after it (``scores``; rl-core refuses seq_final_reward with a KL penalty in the reward); any other name: that
    numeric key of the reward function's dict.
    """
    if metric in ("seq_reward", "seq_final_reward"):
        return [float(v) for v in scores.tolist()]
    if metric == "score":
        return [float(v) for v in raw_scores.tolist()]
    out = []
    for i, extra in enumerate(extras):
        if metric in extra:
            value = extra[metric]
        elif metric == "acc":
            value = raw_scores[i].item()
        else:
            raise DynamicSamplingError(
                f"algorithm.filter_groups.metric={metric!r}: sample {i} has no {metric!r} from the reward function "
                f"(it returned {sorted(extra) or 'a number'}); use acc, score or seq_reward, or return {metric!r} in the reward's dict"
            )
        try:
            out.append(float(value))
        except (TypeError, ValueError):
            raise DynamicSamplingError(
                f"algorithm.filter_groups.metric={metric!r}: sample {i}'s value {value!r:.60} is not a number; name a numeric key"
            ) from None
    return out


def left_pad(batch: Batch, prompt_width: int, pad_token_id: int) -> Batch:
    """``batch`` with its prompt side left-padded to ``prompt_width`` columns (pads are masked, position 0)."""
    have = batch["prompts"].shape[1]
    extra = prompt_width - have
    if extra <= 0:
        return batch
    tensors = dict(batch.tensors.items())
    for name in (*PROMPT_FIELDS, *FULL_FIELDS):
        if name in tensors:
            t = tensors[name]
            fill = pad_token_id if name in ("prompts", "input_ids") else NO_ROUTE if name == "routed_experts" else 0
            tensors[name] = torch.cat([torch.full((t.shape[0], extra, *t.shape[2:]), fill, dtype=t.dtype, device=t.device), t], dim=1)
    return Batch(tensors, batch.non_tensors, batch.meta, batch_size=len(batch))


def concat_rounds(parts: Sequence[Batch], pad_token_id: int, counters: Sequence[str] = ()) -> Batch:
    """The kept rows of every round as one batch (prompts padded to the widest); meta counters summed."""
    width = max(p["prompts"].shape[1] for p in parts)
    out = Batch.concat([left_pad(p, width, pad_token_id) for p in parts])
    meta = {k: v for k, v in parts[0].meta.items() if not k.startswith(tuple(counters))}
    for part in parts:
        for k, v in part.meta.items():
            if k.startswith(tuple(counters)):
                meta[k] = meta.get(k, 0) + v
    out.meta = meta
    return out


def merge_round_metrics(rounds: Sequence[tuple[int, dict[str, float]]]) -> dict[str, float]:
    """Per-round metrics ``(samples, metrics)`` as one: :data:`SUMMED` keys added, the others averaged by samples."""
    totals: dict[str, float] = {}
    weights: dict[str, int] = {}
    for n, metrics in rounds:
        for k, v in metrics.items():
            if k in SUMMED:
                totals[k] = totals.get(k, 0.0) + float(v)
            else:
                totals[k] = totals.get(k, 0.0) + float(v) * n
                weights[k] = weights.get(k, 0) + n
    return {k: (v / weights[k] if k in weights and weights[k] else v) for k, v in totals.items()}


def collect_groups(
    first: Batch,
    *,
    run_round: Callable[[Batch], tuple[Batch, Sequence[float]]],
    draw: Callable[[], Batch],
    groups_needed: int,
    max_rounds: int,
    pad_token_id: int,
    metric: str = "the metric",
    step: int | None = None,
    counters: Sequence[str] = (),
) -> tuple[Batch, dict[str, float]]:
    """Run rounds until ``groups_needed`` groups are kept: ``(batch of exactly those groups, metrics)``.

    ``run_round(prompts) -> (scored batch, one filter value per row)``; ``draw()`` the next round's prompts.
    """
    parts: list[Batch] = []
    kept = dropped = rounds = 0
    prompts = first
    while True:
        rounds += 1
        batch, values = run_round(prompts)
        uids = list(batch["uid"])
        keep = kept_groups(values, uids)
        dropped += len(groups_in_order(uids)) - len(keep)
        if keep:
            parts.append(batch.index(rows_of(keep, uids)))
            kept += len(keep)
        if kept >= groups_needed:
            break
        if max_rounds > 0 and rounds >= max_rounds:
            where = f"step {step}: " if step is not None else ""
            raise DynamicSamplingError(
                f"{where}{rounds} generation rounds (algorithm.filter_groups.max_num_gen_batches={max_rounds}) kept {kept} of the "
                f"{groups_needed} prompt groups a step trains on; {dropped} groups were dropped because {metric} was the same for "
                "all their samples (the prompts are too easy or too hard for the model). Raise algorithm.filter_groups.max_num_gen_batches "
                "(0: no limit), data.gen_batch_size or rollout.n, or use easier / harder data"
            )
        prompts = draw()
    batch = concat_rounds(parts, pad_token_id, counters)
    order = list(groups_in_order(list(batch["uid"])))
    batch = batch.index(rows_of(order[:groups_needed], list(batch["uid"])))
    metrics = {
        "dynamic_sampling/rounds": float(rounds),
        "dynamic_sampling/groups_kept": float(kept),
        "dynamic_sampling/groups_dropped": float(dropped),
        "dynamic_sampling/groups_unused": float(kept - groups_needed),
    }
    return batch, metrics


@attrs.frozen
class DynamicSampling:
    """The batch sampler of ``algorithm.filter_groups`` (the BatchSamplerCard's contract, :mod:`rl_core.cards`)."""

    metric: str
    groups_needed: int
    max_rounds: int

    def __call__(self, prompts: Batch, *, run_round: Callable, draw: Callable[[], Batch], step: int | None = None,
                 pad_token_id: int = 0, counters: Sequence[str] = ()) -> tuple[Batch, dict[str, float]]:
        """The step's batch of :attr:`groups_needed` groups and its metrics: the rounds' merged (:func:`merge_round_metrics`),
        then ``dynamic_sampling/*``. ``run_round(prompts) -> (StepRollouts, metrics)`` generates and scores one round."""
        rounds: list[tuple[int, dict[str, float]]] = []

        def one(p: Batch) -> tuple[Batch, list[float]]:
            rollouts, metrics = run_round(p)
            rounds.append((len(rollouts.batch), metrics))
            return rollouts.batch, filter_values(self.metric, scores=rollouts.scores, raw_scores=rollouts.raw_scores, extras=rollouts.reward_extras)

        batch, ds_metrics = collect_groups(prompts, run_round=one, draw=draw, groups_needed=self.groups_needed, max_rounds=self.max_rounds,
                                           pad_token_id=pad_token_id, metric=self.metric, step=step, counters=counters)
        metrics = merge_round_metrics(rounds)
        metrics.update(ds_metrics)
        return batch, metrics


def make(config: Any) -> DynamicSampling:
    """The BatchSamplerCard's factory: the sampler of ``config`` (the plan builds it only when enabled)."""
    f = config.algorithm.filter_groups
    return DynamicSampling(metric=f.metric, groups_needed=config.data.train_batch_size, max_rounds=f.max_num_gen_batches)
