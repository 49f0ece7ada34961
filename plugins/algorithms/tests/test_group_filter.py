"""DAPO's dynamic sampling: the group filter and the round accumulation, on hand-made rewards."""

from __future__ import annotations

import pytest
import torch
from rl_algorithms.dynamic_sampling import DynamicSamplingError, collect_groups, filter_values, merge_round_metrics
from rl_algorithms.group_filter import kept_groups
from rl_core.batch import Batch


def test_groups_of_equal_values_are_dropped_single_samples_kept():
    uids = ["a", "a", "b", "b", "c", "d", "d"]
    values = [1.0, 0.0, 1.0, 1.0, 0.0, 0.5, 0.5]
    assert kept_groups(values, uids) == ["a", "c"]
    with pytest.raises(ValueError, match="one value per row"):
        kept_groups([1.0], uids)


def test_filter_values_by_metric():
    raw = torch.tensor([1.0, 0.0, 1.0])
    scores = torch.tensor([0.5, 0.0, 1.0])  # after an overlong penalty on row 0
    extras = [{"acc": True}, {}, {"pred": "x", "acc": 1}]
    assert filter_values("acc", scores=scores, raw_scores=raw, extras=extras) == [1.0, 0.0, 1.0]  # row 1: its score
    assert filter_values("score", scores=scores, raw_scores=raw, extras=extras) == [1.0, 0.0, 1.0]
    assert filter_values("seq_reward", scores=scores, raw_scores=raw, extras=extras) == [0.5, 0.0, 1.0]
    with pytest.raises(DynamicSamplingError, match=r"sample 0 has no 'pred' from the reward function \(it returned \['acc'\]\)"):
        filter_values("pred", scores=scores, raw_scores=raw, extras=extras)
    with pytest.raises(DynamicSamplingError, match="not a number"):
        filter_values("pred", scores=scores, raw_scores=raw, extras=[{"pred": "x"}] * 3)


def _round(prompt_ids: list[int], width: int, n: int = 2) -> Batch:
    """A scored round: prompts of ``width`` columns, n rows per prompt, response width 3."""
    rows = len(prompt_ids) * n
    prompts = torch.arange(rows * width).reshape(rows, width) + 100
    responses = torch.ones(rows, 3, dtype=torch.long)
    mask = torch.ones(rows, width + 3, dtype=torch.long)
    return Batch(
        {"prompts": prompts, "responses": responses, "input_ids": torch.cat([prompts, responses], 1), "attention_mask": mask,
         "position_ids": mask.cumsum(1) - 1, "response_mask": torch.ones(rows, 3, dtype=torch.long)},
        {"uid": [f"p{i}" for i in prompt_ids for _ in range(n)]},
        {"rollout/empty_responses": 1, "temperature": 1.0},
    )


def test_rounds_accumulate_until_enough_groups_then_trim():
    # hand-made rewards per prompt (n = 2): equal pairs are dropped
    rewards = {0: (1, 1), 1: (0, 1), 2: (0, 0), 3: (1, 0), 4: (1, 1), 5: (0, 1), 6: (1, 0), 7: (0, 0)}
    rounds = iter([[2, 3, 4, 5], [6, 7, 8, 9]])
    for p in (8, 9):
        rewards[p] = (0, 1)
    seen = []

    def run_round(prompts: Batch):
        ids = [int(u[1:]) for u in prompts["uid"][::2]]
        seen.append(ids)
        return prompts, [float(v) for i in ids for v in rewards[i]]

    draw = lambda: _round(next(rounds), width=4 + len(seen))  # noqa: E731 - each round has wider prompts
    batch, metrics = collect_groups(_round([0, 1], width=3), run_round=run_round, draw=draw, groups_needed=4, max_rounds=0, pad_token_id=-1,
                                    counters=("rollout/",))
    assert seen == [[0, 1], [2, 3, 4, 5], [6, 7, 8, 9]]
    # kept: p1 | p3, p5 | p6, p8, p9 -> the first 4 groups; p8, p9 unused
    assert list(batch["uid"]) == ["p1", "p1", "p3", "p3", "p5", "p5", "p6", "p6"]
    assert metrics == {"dynamic_sampling/rounds": 3.0, "dynamic_sampling/groups_kept": 6.0, "dynamic_sampling/groups_dropped": 4.0,
                       "dynamic_sampling/groups_unused": 2.0}
    # prompts left-padded to the widest round (6 columns): the first round's rows gained 3 masked pad columns
    assert batch["prompts"].shape == (8, 6) and batch["input_ids"].shape == (8, 9)
    assert batch["prompts"][0, :3].tolist() == [-1, -1, -1] and batch["attention_mask"][0, :3].tolist() == [0, 0, 0]
    assert batch["position_ids"][0, :3].tolist() == [0, 0, 0] and batch["attention_mask"][0, 3:].tolist() == [1] * 6
    assert batch.meta["rollout/empty_responses"] == 3 and batch.meta["temperature"] == 1.0  # counters summed over rounds


def test_too_many_rounds_is_a_clear_error():
    def run_round(prompts: Batch):
        return prompts, [1.0] * len(prompts)  # every group scores the same

    with pytest.raises(DynamicSamplingError, match=r"step 5: 3 generation rounds \(algorithm.filter_groups.max_num_gen_batches=3\) kept 0 of the 2"):
        collect_groups(_round([0, 1], 2), run_round=run_round, draw=lambda: _round([2, 3], 2), groups_needed=2, max_rounds=3,
                       pad_token_id=0, metric="acc", step=5)


def test_round_metrics_merge():
    merged = merge_round_metrics([(4, {"reward/errors": 1, "reward/acc_mean": 1.0}), (12, {"reward/errors": 2, "reward/acc_mean": 0.0})])
    assert merged == {"reward/errors": 3.0, "reward/acc_mean": 0.25}
