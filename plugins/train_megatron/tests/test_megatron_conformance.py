"""The megatron train backend against the shared train conformance suite (1 process, and 2 CPU processes as TP 1 x DP 2).

TP 2 is covered by tests/test_megatron_tp.py (the suite gives each rank its own data shard, as data parallelism does).
"""

from __future__ import annotations

import pytest

pytest.importorskip("megatron.core", reason="needs megatron-core (pip install megatron-core==0.16.1)")

from rl_core_testing.train_conformance import TrainConformance  # noqa: E402

pytestmark = pytest.mark.megatron


class TestMegatronConformance(TrainConformance):
    factory = "rl_train_megatron.engine:MegatronBackend"
    rollout_factory = "rl_core.rollout.hf:factory"
    logprob_atol = 1e-5
    sync_atol = 1e-4
