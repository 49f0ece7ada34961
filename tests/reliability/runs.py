"""Tiny training runs for the reliability tests, in this process (no start-up cost) or in a child.

The model is the random tiny one of :mod:`rl_core_testing.tiny_model` and the
reward the digit-fraction function of :mod:`tests.e2e.helpers`, so every run
is seconds long and needs nothing from the network.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import yaml
from rl_core.checkpoints.store import MARKER, RUN_CONFIG, file_digest

from tests.e2e.helpers import read_metrics, write_tiny_run

__all__ = ["cli", "make_run", "read_metrics", "copy_run", "non_timing", "set_config"]


def cli(*argv: str) -> tuple[int, str, str]:
    """``rlcore *argv`` in this process: (exit code, stdout, stderr)."""
    from rl_core.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


# smaller than tests/e2e's run: 2 prompts x 2 samples, 4 new tokens, one optimizer step
SMALL = {"data__train_batch_size": 2, "data__max_response_length": 4, "actor__ppo_mini_batch_size": 2}


def make_run(tmp: Path, **extra) -> Path:
    """A tiny run's files in ``tmp``; returns the config path (see :func:`tests.e2e.helpers.write_tiny_run`)."""
    return write_tiny_run(tmp, **{**SMALL, **extra})


def set_config(cfg: Path, **dotted) -> None:
    """Rewrite keys of a run's YAML (``trainer__save_freq=1`` style, as write_tiny_run takes them)."""
    data = yaml.safe_load(cfg.read_text())
    for key, value in dotted.items():
        node = data
        *parents, last = key.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    cfg.write_text(yaml.safe_dump(data))


def copy_run(src: Path, dst: Path) -> Path:
    """Copy a run folder and point its config's paths at the copy; returns the new config path."""
    shutil.copytree(src, dst)
    cfg = dst / "run.yaml"
    cfg.write_text(cfg.read_text().replace(str(src), str(dst)))
    saved = dst / "out" / "config.yaml"
    if saved.exists():
        saved.write_text(saved.read_text().replace(str(src), str(dst)))
    for step_dir in (dst / "out" / "checkpoints").glob("global_step_*"):  # the config inside each checkpoint too
        stored = step_dir / RUN_CONFIG
        if stored.exists():
            stored.write_text(stored.read_text().replace(str(src), str(dst)))
            man = json.loads((step_dir / MARKER).read_text())
            man["digests"][RUN_CONFIG] = file_digest(str(stored))
            (step_dir / MARKER).write_text(json.dumps(man))
    return cfg


def non_timing(row: dict) -> dict:
    return {k: v for k, v in row.items() if k != "time" and not k.startswith(("timing_s/", "perf/throughput"))}


def metrics_equal(a: list[dict], b: list[dict]) -> tuple[bool, str]:
    """Rows equal apart from timings (floats to 1e-6 relative); (ok, first difference)."""
    if [r["step"] for r in a] != [r["step"] for r in b]:
        return False, f"steps {[r['step'] for r in a]} != {[r['step'] for r in b]}"
    for ra, rb in zip(a, b):
        ra, rb = non_timing(ra), non_timing(rb)
        if ra.keys() != rb.keys():
            return False, f"step {ra['step']}: keys differ {sorted(set(ra) ^ set(rb))}"
        for k in ra:
            x, y = ra[k], rb[k]
            if x is None or y is None:
                if x is not y:
                    return False, f"step {ra['step']} {k}: {x} != {y}"
            elif abs(x - y) > 1e-6 * max(1.0, abs(x), abs(y)):
                return False, f"step {ra['step']} {k}: {x} != {y}"
    return True, ""


def dump_metrics(path: Path) -> str:
    return json.dumps(read_metrics(path), indent=1)[:2000]
