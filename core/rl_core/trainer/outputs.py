"""The run's output folder: checked before anything is built, never silently reused for another config.

- :func:`ensure_writable` creates ``trainer.output_dir`` and proves it can be
  written (a permission error becomes a :class:`OutputDirError` naming it).
- :func:`check_previous_run` compares the config of a run already in the
  folder (its ``config.yaml``) with this one. When a checkpoint would be
  resumed under different settings it stops with the difference and the two
  ways on: resume anyway (``rlcore train ... --resume-anyway``) or a new
  ``trainer.output_dir``. With ``trainer.resume=false`` a folder holding a
  checkpoint is refused outright (a fresh start there would delete it). Keys that may change between a run and its resume
  (:data:`RESUMABLE_KEYS`: the number of steps, logging, checkpoint and
  validation frequencies) do not count.
- :func:`write_config` writes ``config.yaml`` atomically; the trainer calls
  it only once everything is validated and built, so a failed start leaves
  the previous run's file alone.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

import yaml

from rl_core.problems import UserError

CONFIG_FILE = "config.yaml"

# changing these does not change what a checkpoint means
RESUMABLE_KEYS = frozenset(
    {
        "trainer.total_training_steps",
        "trainer.total_epochs",
        "trainer.save_freq",
        "trainer.test_freq",
        "trainer.val_before_train",
        "trainer.max_ckpt_to_keep",
        "trainer.loggers",
        "trainer.project_name",
        "trainer.experiment_name",
        "trainer.torch_threads",
        "trainer.resume",
        "data.val_files",
        "data.val_batch_size",
        "data.val_max_samples",
        "data.val_generator",
    }
)
RESUMABLE_PREFIXES = ("ray.",)


class OutputDirError(UserError, OSError):
    """The output folder cannot be used: not writable, or it holds a run with another config."""


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def ensure_writable(output_dir: str) -> None:
    """Create ``output_dir`` and check a file can be written there."""
    key = f"trainer.output_dir={output_dir!r}"
    try:
        os.makedirs(output_dir, exist_ok=True)
    except OSError as exc:
        raise OutputDirError(f"{key}: cannot create the folder ({_why(exc)}); choose a folder you can write to") from None
    probe = os.path.join(output_dir, f".rl-core-write-test-{os.getpid()}")
    try:
        with open(probe, "w") as f:
            f.write("ok")
        os.remove(probe)
    except OSError as exc:
        raise OutputDirError(f"{key}: the folder is not writable ({_why(exc)}); fix its permissions or choose another folder") from None


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def config_diff(old: Mapping[str, Any], new: Mapping[str, Any], ignore: frozenset[str] = RESUMABLE_KEYS) -> list[str]:
    """Lines ``key: old -> new`` for every key that differs (keys in ``ignore`` left out)."""
    a, b = flatten(old), flatten(new)
    lines = []
    for key in sorted(set(a) | set(b)):
        if key in ignore or key.startswith(RESUMABLE_PREFIXES) or any(key.startswith(i + ".") for i in ignore):
            continue
        if a.get(key, "<unset>") != b.get(key, "<unset>"):
            lines.append(f"{key}: {a.get(key, '<unset>')!r} -> {b.get(key, '<unset>')!r}")
    return lines


def read_previous_config(output_dir: str) -> dict[str, Any] | None:
    path = os.path.join(output_dir, CONFIG_FILE)
    try:
        with open(path) as f:
            data = yaml.safe_load(f)
    except FileNotFoundError:
        return None
    except (OSError, yaml.YAMLError) as exc:
        raise OutputDirError(f"{path} (the previous run's config) cannot be read: {exc}; move it away or use another trainer.output_dir") from None
    return data if isinstance(data, dict) else None


def check_previous_run(output_dir: str, config: Mapping[str, Any], *, has_checkpoint: bool, resume: bool, resume_anyway: bool) -> list[str]:
    """Stop if this run would resume a checkpoint written under another config; returns the diff lines.

    Only a resume is refused (``resume`` on and a checkpoint present);
    ``resume_anyway`` accepts it. A folder without a checkpoint starts over.
    With ``resume`` off, a folder holding a checkpoint is refused: starting
    over there would rotate its checkpoints away and rewrite its metrics.
    """
    if has_checkpoint and not resume:
        raise OutputDirError(
            f"trainer.output_dir={output_dir!r} holds the checkpoints of an earlier run, and trainer.resume=false would "
            "start over in it, deleting them as new ones are saved and replacing its metrics. Choose one: start the new "
            "run in another folder (trainer.output_dir=...), continue that run (trainer.resume=true, the default), or "
            "move the folder away first."
        )
    old = read_previous_config(output_dir)
    if old is None:
        return []
    diff = config_diff(old, config)
    if diff and has_checkpoint and resume and not resume_anyway:
        shown = "\n  ".join(diff[:30]) + (f"\n  ... and {len(diff) - 30} more" if len(diff) > 30 else "")
        raise OutputDirError(
            f"trainer.output_dir={output_dir!r} holds a checkpoint of a run with a different config "
            f"({os.path.join(output_dir, CONFIG_FILE)}):\n  {shown}\n"
            "Choose one: resume that checkpoint under the new settings with `rlcore train ... --resume-anyway`, "
            "or start a new run in another folder (trainer.output_dir=...)."
        )
    return diff


def write_config(output_dir: str, config: Mapping[str, Any]) -> str:
    """Write ``config.yaml`` atomically; returns its path."""
    path = os.path.join(output_dir, CONFIG_FILE)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            yaml.safe_dump(dict(config), f, sort_keys=False)
        os.replace(tmp, path)
    except OSError as exc:
        raise OutputDirError(f"cannot write {path}: {_why(exc)}") from None
    return path
