"""A rollout pool of its own (rollout.n_gpus_per_node=1: one rollout process beside the train process), one-step
off-policy (async.max_staleness=1), weights sent over gloo and verified after every update; the rollout worker
killed mid-run gives an error naming the pool and rank, and the same command resumes from the last checkpoint."""

from __future__ import annotations

import os
import signal
import time

import pytest
from rl_core.config.load import load_config
from rl_core.plan.resolver import resolve
from rl_core.trainer.loop import Trainer
from rl_core_testing.tiny_run import read_metrics, write_tiny_run

pytest.importorskip("rl_train_fsdp", reason="needs the rl-train-fsdp plugin (pip install -e plugins/train_fsdp)")

RUN = dict(
    steps=3, rollout__n_gpus_per_node=1, async__max_staleness=1, trainer__torch_threads=1, trainer__save_freq=1,
    rollout__calculate_log_probs=True, algorithm__rollout_correction__rollout_is="token", async__sync_timeout_s=30,
)


def _trainer(tmp_path) -> Trainer:
    stack, problems = resolve(load_config(write_tiny_run(tmp_path, **RUN)))
    assert stack is not None, [p.render() for p in problems]
    return Trainer(stack, progress=False)


@pytest.mark.dist
def test_one_step_off_policy_then_the_rollout_worker_killed_and_resumed(tmp_path, capsys):
    from rl_core.placement.contract import WorkerError

    trainer = _trainer(tmp_path)
    rollout_proc = trainer.cluster.pool("rollout")._procs[0]
    assert rollout_proc.pid != os.getpid()  # generation runs in a process of its own
    sync, killed = trainer.pipeline.sync, {}

    def sync_then_kill(version):  # end of step 2: step 3's generation in flight (or just done) when the rollout worker dies
        if version == 2:
            os.kill(rollout_proc.pid, signal.SIGKILL)
            killed["at"] = time.monotonic()
        return sync(version)

    trainer.pipeline.sync = sync_then_kill
    try:
        # found by the next call that reaches the rollout pool: collecting step 3's batch, the weight transfer, or
        # (the transfer overlapped: async.overlap_sync, on for this CPU run) the step's end-of-step memory report
        with pytest.raises(WorkerError, match=r"rollout pool rank 0 died during (generate|receive_and_generate|sync_weights|peak_memory_gb) with exit code -9") as err:
            trainer.fit()
        assert time.monotonic() - killed["at"] < 60, err.value
    finally:
        trainer.close(force=True)
    rows = read_metrics(tmp_path / "out")
    assert [r["step"] for r in rows] == [1]  # step 2 failed in its last stage: neither logged nor checkpointed
    first = rows[0]
    assert first["async/staleness"] == 0 and first["async/policy_version"] == 0
    assert first["timing_s/sync_weights"] > 0 and "timing_s/gen_rollout" in first
    # staleness 0: the rollout's log-probs equal the trainer's (the transfer is exact)
    assert first["rollout_corr/log_prob_abs_diff_max"] < 1e-4

    # the same command again: resumes from step 1's checkpoint; step 2's prompts are drawn and generated again
    # (the in-flight batch is never saved), with the checkpoint's weights: staleness 0 once, then 1 again
    trainer = _trainer(tmp_path)
    try:
        trainer.fit()
    finally:
        trainer.close()
    assert "resumed from" in capsys.readouterr().out
    rows = read_metrics(tmp_path / "out")
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert [r["async/staleness"] for r in rows] == [0, 0, 1] and rows[2]["async/policy_version"] == 1
    # staleness 1: the rollout's log-probs differ from the updated actor's and the rollout correction reweights them
    assert rows[2]["rollout_corr/log_prob_abs_diff_mean"] > 1e-3 and rows[2]["rollout_corr/rollout_is_mean"] != 1.0


@pytest.mark.dist
def test_the_overlapped_sync_trains_exactly_as_the_synchronous_sync(tmp_path):
    """async.overlap_sync moves the transfer off the train pool's path, not the schedule: same metrics, bit for bit."""
    runs = {}
    for overlap in (True, False):
        stack, problems = resolve(load_config(write_tiny_run(tmp_path / str(overlap), **{**RUN, "steps": 3, "trainer__save_freq": -1, "async__overlap_sync": overlap})))
        assert stack is not None, [p.render() for p in problems]
        trainer = Trainer(stack, progress=False)
        try:
            trainer.fit()
        finally:
            trainer.close()
        runs[overlap] = read_metrics(tmp_path / str(overlap) / "out")
    on, off = runs[True], runs[False]
    assert [r["async/staleness"] for r in on] == [0, 1, 1]
    # the rollout side's receive is reported by the step whose batch's generation request carried it
    assert "timing_s/sync_receive" in on[0] and "timing_s/sync_receive" in on[2] and not any("timing_s/sync_receive" in r for r in off)
    skip = ("timing_s/", "perf/", "time")
    for a, b in zip(on, off):
        assert {k: v for k, v in a.items() if not k.startswith(skip)} == {k: v for k, v in b.items() if not k.startswith(skip)}
