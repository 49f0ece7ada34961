"""A tiny SFT run for the tests: a random tiny model, SFT rows (prompt / response and chat), a config."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from rl_core.config.load import load_report
from rl_core.plan.checks import build_plan
from rl_core.plugins import get_registry


def sft_rows(count: int = 12) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [{"prompt": [{"role": "user", "content": f"{i % 7}+{i % 5}="}], "response": str(i % 7 + i % 5)} for i in range(count)]
    rows.append({"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2="}, {"role": "assistant", "content": "4"},
                              {"role": "user", "content": "and 3+3?"}, {"role": "assistant", "content": "6"}]})
    rows.append({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "call", "loss": False},
                              {"role": "tool", "content": "5"}, {"role": "assistant", "content": "5"}]})
    return rows


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_sft_run(tmp: Path, *, rows: list[dict] | None = None, steps: int = 4, **trainer: Any) -> Path:
    """Model, rows and an SFT config under ``tmp``; returns the config's path."""
    from rl_core_testing.tiny_model import make_tiny_model_dir

    tmp = Path(tmp)
    tmp.mkdir(parents=True, exist_ok=True)
    model = tmp / "model"
    if not model.exists():
        make_tiny_model_dir(model)
    data = write_rows(tmp / "sft.jsonl", sft_rows() if rows is None else rows)
    cfg = {
        "model": {"path": str(model)},
        "data": {"train_files": [str(data)], "val_files": [str(data)], "train_batch_size": 4, "max_prompt_length": 64, "max_response_length": 32},
        "rollout": {"name": "hf", "n": 1},
        "train": {"name": "fsdp"},
        "actor": {"ppo_mini_batch_size": 4, "ppo_micro_batch_size_per_gpu": 2, "optim": {"lr": 1e-2}},
        "trainer": {"kind": "sft", "device": "cpu", "n_gpus_per_node": 1, "total_training_steps": steps, "output_dir": str(tmp / "out"),
                    "loggers": ["jsonl"], "test_freq": 2, "save_freq": 2, "seed": 3, **trainer},
    }
    path = tmp / "sft.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def report(path: Path, *overrides: str):
    return build_plan(load_report(str(path), list(overrides)), get_registry(), devices=False)


def plan(path: Path, *overrides: str):
    rep = report(path, *overrides)
    assert rep.plan is not None, [str(p) for p in rep.problems]
    return rep.plan


def metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines() if line.strip()]
