"""Roles on workers of their own (rl_core.placement.pools): the critic or the reference model apart from the actor.

The same seed gives the same run whether a role shares the actor's workers or has its own: the pools only
change where a model lives (and, with more data-parallel ranks, the order of a sum), never what is computed.
A checkpoint written with pools resumes with the same metrics as an uninterrupted run.
"""

from __future__ import annotations

import pytest

from tests.e2e.helpers import train_tiny

pytest.importorskip("rl_train_fsdp", reason="needs the rl-train-fsdp plugin (pip install -e plugins/train_fsdp)")

SKIP = ("timing_s/", "perf/", "time")


def _run(tmp, **extra) -> list[dict]:
    # one torch thread in every process, pooled or not: the same kernels, so the same sums to the last bit
    return train_tiny(tmp, trainer__torch_threads=1, **extra)


def _same(a: list[dict], b: list[dict], rel: float, later_rel: float | None = None) -> None:
    """Every metric of every step within ``rel``; from the second step on within ``later_rel`` (default ``rel``).

    ``later_rel``: inputs that differ by rounding (log-probs from another split of the batch) give
    gradients that differ by rounding, and AdamW turns an entry whose gradient is rounding noise into a
    step of ~lr either way (rl_core_testing.adam_weights), so the next step's metrics differ by more
    (relatively, and absolutely for metrics near 0 such as GRPO's pg_loss: abs 1e-6 then).
    """
    assert [r["step"] for r in a] == [r["step"] for r in b]
    for i, (ra, rb) in enumerate(zip(a, b)):
        keys = {k for k in ra if not k.startswith(SKIP)}
        assert keys == {k for k in rb if not k.startswith(SKIP)}
        for k in keys:
            first = i == 0 or later_rel is None
            assert rb[k] == pytest.approx(ra[k], rel=rel if first else later_rel, abs=1e-7 if first else 1e-6), (ra["step"], k)


@pytest.mark.dist
def test_critic_on_a_worker_of_its_own_then_resumed(tmp_path):
    """PPO (gae): the critic in its own process; 2 steps equal the colocated run, and so does a resumed one."""
    colocated = _run(tmp_path / "colocated", estimator="gae")
    assert "critic/vf_loss" in colocated[0]
    apart = _run(tmp_path / "apart", estimator="gae", critic__n_gpus_per_node=1)
    _same(colocated, apart, rel=1e-6)
    # the same run, stopped after a checkpoint at step 1 and resumed: the critic pool reloads its own state
    resumed_dir = tmp_path / "resumed"
    _run(resumed_dir, estimator="gae", critic__n_gpus_per_node=1, trainer__total_training_steps=1, trainer__save_freq=1)
    assert (resumed_dir / "out" / "checkpoints" / "global_step_1" / "critic").is_dir()
    resumed = _run(resumed_dir, estimator="gae", critic__n_gpus_per_node=1, trainer__save_freq=1)
    _same(colocated, resumed, rel=1e-6)


@pytest.mark.dist
def test_reference_model_on_two_workers_of_its_own(tmp_path):
    """GRPO with a KL loss: the reference model's log-probs from 2 processes of its own, split over 2 data-parallel ranks."""
    kl = dict(actor__use_kl_loss=True, actor__kl_loss_coef=0.1)
    colocated = _run(tmp_path / "colocated", **kl)
    apart = _run(tmp_path / "apart", ref__n_gpus_per_node=2, **kl)
    assert all(row["actor/kl_loss"] > 0 for row in colocated)  # the reference is used (2 optimizer steps a step)
    _same(colocated, apart, rel=1e-5, later_rel=1e-4)
