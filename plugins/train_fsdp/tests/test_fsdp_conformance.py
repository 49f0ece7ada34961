"""The fsdp train backend against the shared train conformance suite (1 and 2 CPU processes)."""

from __future__ import annotations

from rl_core_testing.train_conformance import TrainConformance


class TestFSDPConformance(TrainConformance):
    factory = "rl_train_fsdp.engine:FSDPBackend"
    rollout_factory = "rl_core.rollout.hf:factory"
    logprob_atol = 1e-5
    sync_atol = 1e-4
