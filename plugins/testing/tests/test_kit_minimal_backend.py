"""rl_core_testing.minimal_backend (docs/plugins.md's worked example) passes the train conformance suite."""

from __future__ import annotations

from pathlib import Path

from rl_core_testing.train_conformance import TrainConformance


class TestMinimalBackend(TrainConformance):
    factory = "rl_core_testing.minimal_backend:MinimalBackend"
    rollout_factory = "rl_core.rollout.hf:factory"
    multi_process = False


def test_minimal_backend_is_small():
    import rl_core_testing.minimal_backend as m

    assert len(Path(m.__file__).read_text().splitlines()) < 150
