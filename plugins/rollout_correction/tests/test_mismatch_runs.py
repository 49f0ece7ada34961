"""The rollout-vs-trainer gap end to end (issue 51, rl_rollout_correction.mismatch; docs/exact.md): a tiny GRPO run on the
CPU measures its gap every step, and a bound stops it. Exact mode's runs: plugins/exact/tests/test_exact_runs.py;
trainer.deterministic (rl-core's): tests/e2e/test_deterministic_runs.py.
"""

from __future__ import annotations

import math

import pytest
from rl_rollout_correction.mismatch import GAP_FRAC, MismatchError

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
