"""trainer.deterministic=true end to end (issue 51; docs/exact.md): two tiny GRPO runs on the CPU, same metrics and
weights; another seed, other ones. The gap and its bound: plugins/rollout_correction/tests/test_mismatch_runs.py."""

from __future__ import annotations

import pytest
import torch

from tests.e2e.helpers import train_tiny

pytest.importorskip("rl_train_fsdp", reason="needs the rl-train-fsdp plugin (pip install -e plugins/train_fsdp)")

pytestmark = pytest.mark.slow


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
