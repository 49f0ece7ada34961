"""The disk estimate `rlcore check` prints matches what a run writes (issue 31, point 4)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("rl_train_fsdp", reason="needs the rl-train-fsdp plugin (pip install -e plugins/train_fsdp)")


def _bytes(folder: Path, pattern: str = "*") -> int:
    return sum(f.stat().st_size for f in folder.rglob(pattern) if f.is_file())


def test_checkpoint_and_final_model_sizes_match_the_estimate(tmp_path):
    from rl_core.config.load import load_config
    from rl_memory_estimate.disk import estimate_disk
    from rl_core.plan.resolver import resolve
    from tests.e2e.helpers import train_tiny, write_tiny_run

    # a tied-embedding model big enough that tensors, not file headers, make the size
    run = {"steps": 2, "trainer__save_freq": 1, "trainer__max_ckpt_to_keep": 1, "model": {"hidden": 128, "layers": 2, "tie_word_embeddings": True}}
    stack, problems = resolve(load_config(write_tiny_run(tmp_path, **run)))
    assert stack is not None, problems
    est = estimate_disk(stack.config)
    assert est.saves == 2 and est.kept == 1
    train_tiny(tmp_path, **run)
    out = tmp_path / "out"
    kept = sorted(p.name for p in (out / "checkpoints").iterdir() if p.is_dir())
    assert kept == ["global_step_2"]  # max_ckpt_to_keep=1 keeps only the latest
    ckpt = _bytes(out / "checkpoints" / "global_step_2")
    assert est.per_checkpoint == pytest.approx(ckpt, rel=0.10), (est.per_checkpoint, ckpt)
    weights = _bytes(out / "hf_final", "*.safetensors")
    assert est.final_model == pytest.approx(weights, rel=0.05), (est.final_model, weights)
    lines = "\n".join(est.lines())
    assert "per checkpoint, 2 written, the latest 1 kept" in lines and "the run writes" in lines
