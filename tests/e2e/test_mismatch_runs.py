"""The rollout-vs-trainer gap end to end (issue 51, rl_core.rollout.mismatch; docs/exact.md): tiny GRPO runs on the CPU.

The default path measures its gap every step, and a bound stops it. trainer.deterministic=true: two runs, same metrics
and weights; another seed, other ones. Exact mode's runs: plugins/exact/tests/test_exact_runs.py.
"""

from __future__ import annotations

import math

import pytest
import torch
from rl_core.rollout.mismatch import GAP_FRAC, MismatchError

from tests.e2e.helpers import train_tiny

pytest.importorskip("rl_train_fsdp", reason="needs the rl-train-fsdp plugin (pip install -e plugins/train_fsdp)")

pytestmark = pytest.mark.slow

GAP = ("rollout_corr/log_prob_abs_diff_max", "rollout_corr/log_prob_abs_diff_mean", "rollout_corr/kl", GAP_FRAC)
ON_POLICY = {"actor__ppo_mini_batch_size": 4}  # one mini-batch of the 4 prompts: no old-log-prob pass


def test_default_path_measures_its_gap_and_a_bound_stops_it(tmp_path):
    rows = train_tiny(tmp_path / "measured", steps=1, model__dtype="bfloat16", trainer__val_before_train=False, **ON_POLICY)
    row = rows[0]
    assert all(math.isfinite(row[k]) for k in GAP), {k: row.get(k) for k in GAP}
    assert row["rollout_corr/log_prob_abs_diff_max"] > 0  # bf16 decode with a KV cache is not the trainer's forward
    with pytest.raises(MismatchError) as err:
        train_tiny(tmp_path / "bounded", steps=1, model__dtype="bfloat16", rollout__mismatch__max_abs_diff=1e-6, trainer__val_before_train=False,
                   **ON_POLICY)
    msg = str(err.value)
    assert msg.startswith("step 1: the rollout (hf)") and "rollout.mismatch.max_abs_diff=1e-06" in msg and "token id" in msg


def _weights(out):
    from safetensors.torch import load_file

    return load_file(str(next((out / "hf_final").glob("*.safetensors"))))


def _comparable(rows):
    """Metrics without the timing columns (the wall clock, seconds, throughput)."""
    return [{k: v for k, v in r.items() if not (k == "time" or k.startswith(("timing_s/", "perf/")) or k.endswith("_s"))} for r in rows]


@pytest.fixture
def restore_determinism(monkeypatch):
    """A worker in this process (trainer.placement local, one process) turns deterministic kernels on: undone after."""
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    was = torch.are_deterministic_algorithms_enabled()
    yield
    torch.use_deterministic_algorithms(was)
    torch.backends.cudnn.deterministic = False


def test_deterministic_runs_are_identical(tmp_path, restore_determinism):
    runs = {}
    for name, seed in (("a", 7), ("b", 7), ("other_seed", 8)):
        rows = train_tiny(tmp_path / name, steps=2, trainer__deterministic=True, trainer__seed=seed, trainer__val_before_train=False)
        runs[name] = (_comparable(rows), _weights(tmp_path / name / "out"))
    differ = {k for ra, rb in zip(runs["a"][0], runs["b"][0]) for k in ra if ra[k] != rb.get(k)}
    assert not differ and len(runs["a"][0]) == len(runs["b"][0]) == 2, sorted(differ)
    assert runs["a"][1].keys() == runs["b"][1].keys() and all(torch.equal(runs["a"][1][k], runs["b"][1][k]) for k in runs["a"][1])
    assert runs["a"][0] != runs["other_seed"][0]  # the comparison can fail: the seed decides the samples
