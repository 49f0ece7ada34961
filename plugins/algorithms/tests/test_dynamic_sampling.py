"""DAPO on a tiny run: dynamic sampling (algorithm.filter_groups) and the overlong penalty, in the real loop."""

from __future__ import annotations

import math

import pytest
from rl_core.config.load import load_config
from rl_core.plan.resolver import resolve
from rl_core.trainer.loop import Trainer

from tests.e2e.helpers import read_metrics, write_tiny_run

pytest.importorskip("rl_train_fsdp", reason="needs the rl-train-fsdp plugin (pip install -e plugins/train_fsdp)")

# even-indexed prompts: every sample scores the same (acc 1) -> dropped; odd ones: acc differs by sample
REWARD = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    if extra_info["index"] % 2 == 0:
        return {"score": 1.0, "acc": 1.0}
    acc = float(sum(map(ord, solution_str)) % 2)
    return {"score": acc, "acc": acc}
'''


def test_two_steps_with_filter_groups_and_the_overlong_penalty(tmp_path):
    cfg_path = write_tiny_run(
        tmp_path, data__shuffle=False, data__gen_batch_size=4,
        algorithm__filter_groups={"enable": True, "metric": "acc", "max_num_gen_batches": 0},
        reward__overlong_penalty={"enable": True, "buffer_length": 4, "penalty_factor": 0.5, "log": True},
    )
    (tmp_path / "reward.py").write_text(REWARD)
    stack, problems = resolve(load_config(cfg_path))
    assert stack is not None, [p.render() for p in problems]
    trainer = Trainer(stack, progress=False)
    try:
        # one step's batch by hand: 4 groups (train_batch_size), odd prompts only, each with differing acc
        t, metrics = {}, {}
        assert [c.name for c, _ in stack.reward_shapers] == ["overlong_penalty"] and stack.batch_sampler[0].name == "dynamic_sampling"
        batch = trainer._sampled_batch(trainer.train_loader.next_batch(), 1, t, metrics)
        uids = list(batch["uid"])
        assert len(uids) == 4 * 2 and len(set(uids)) == 4
        assert all(int(u.split("-i")[1]) % 2 == 1 for u in uids), uids
        assert metrics["dynamic_sampling/rounds"] >= 2 and metrics["dynamic_sampling/groups_dropped"] >= 2 * metrics["dynamic_sampling/rounds"]
        assert metrics["dynamic_sampling/groups_kept"] + metrics["dynamic_sampling/groups_dropped"] == 4 * metrics["dynamic_sampling/rounds"]
        scores = batch["token_level_scores"].sum(-1)
        assert (scores <= 1.0).all() and (scores >= -0.5).all()
        trainer.fit()
    finally:
        trainer.close()
    rows = read_metrics(tmp_path / "out")
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        for key in ("dynamic_sampling/rounds", "dynamic_sampling/groups_kept", "dynamic_sampling/groups_dropped", "reward/overlong_penalty_mean",
                    "reward/overlong_fraction", "actor/pg_loss"):
            assert key in row and math.isfinite(row[key]), (key, sorted(row))
        assert row["reward/overlong_penalty_mean"] <= 0
