"""A tiny end-to-end run: random tiny model, a few prompts, a rule reward with variance (rl_core_testing.tiny_run)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rl_core_testing.tiny_run import REWARD, read_metrics, tiny_rows, write_tiny_run

__all__ = ["REWARD", "finished_run", "finished_two_source_run", "read_metrics", "train_tiny", "write_tiny_run"]


def train_tiny(tmp: Path, **overrides: Any) -> list[dict[str, Any]]:
    """Write a tiny run under ``tmp`` (``write_tiny_run``'s keywords), train it to the end, return its metric rows."""
    from rl_core.config.load import load_config
    from rl_core.plan.resolver import resolve
    from rl_core.trainer.loop import Trainer

    stack, problems = resolve(load_config(write_tiny_run(tmp, **overrides)))
    assert stack is not None, [p.render() for p in problems]
    trainer = Trainer(stack, progress=False)
    try:
        trainer.fit()
    finally:
        trainer.close()
    return read_metrics(tmp / "out")


def finished_two_source_run(tmp: Path) -> Path:
    """``rlcore train`` of a quickstart-shaped tiny run under ``tmp`` (2 steps, a checkpoint each, validation at the last,
    hf_final); its validation rows (``tmp/val.jsonl``) hold two data sources, the second's alone in ``tmp/other.jsonl``.
    Returns the run folder (rlcore eval's and rlcore clean's tests: plugins/eval, plugins/clean)."""
    from tests.reliability.runs import cli

    rows = tiny_rows(8)
    for r in rows[4:]:
        r["data_source"] = "tiny/other"
    for name, part in (("val.jsonl", rows), ("other.jsonl", rows[4:])):
        (tmp / name).write_text("".join(json.dumps(r) + "\n" for r in part))
    cfg = write_tiny_run(tmp, steps=2, data__val_files=[str(tmp / "val.jsonl")], data__val_max_samples=8,
                         trainer__test_freq=2, trainer__save_freq=1, trainer__max_ckpt_to_keep=2)
    code, out, err = cli("train", str(cfg), "--no-progress")
    assert code == 0, out + err
    return tmp / "out"


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """``(tmp, run folder)`` of :func:`finished_two_source_run`, once per test module."""
    tmp = tmp_path_factory.mktemp("run")
    return tmp, finished_two_source_run(tmp)
