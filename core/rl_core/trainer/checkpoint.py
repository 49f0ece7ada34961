"""Atomic, prunable checkpoints on a local or shared filesystem.

Layout under ``root`` (verl's names, so its users recognise them)::

    root/
      global_step_10/            a complete checkpoint: its files + COMPLETE
      global_step_20/
      latest_checkpointed_iteration.txt   "20"
      .tmp_global_step_30_4711/  being written (or left behind by a crash)

A checkpoint is written into a temporary directory inside ``root``, then a
``COMPLETE`` marker (a small json manifest: step, time, files) is written, then
the directory is renamed into place with one ``os.replace``. A crash at any
moment therefore leaves either the old set of complete checkpoints or the new
one, plus debris that :meth:`CheckpointManager.latest` ignores with a warning.

Several writers (e.g. one per rank) share one temporary directory::

    token = str(os.getpid())                    # on rank 0, then broadcast
    if rank == 0:
        tmp = ckpt.begin(step, token)           # creates it (clears a stale one)
    barrier(); tmp = ckpt.tmp_dir(step, token)  # every rank
    ...every rank writes its shard into tmp...
    barrier()
    if rank == 0:
        ckpt.commit(step, token)                # marker, rename, prune

A single process uses :meth:`CheckpointManager.save` instead.

RNG state: :func:`save_rng_state` / :func:`load_rng_state` cover Python's
``random``, numpy's global generator and torch (CPU, and CUDA when present);
the dict they use loads with ``torch.load(..., weights_only=True)``.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
import time
import warnings
from typing import Any, Callable

import numpy as np
import torch

from rl_core.problems import UserError

logger = logging.getLogger(__name__)

MARKER = "COMPLETE"
LATEST_FILE = "latest_checkpointed_iteration.txt"
_STEP_RE = re.compile(r"^global_step_(\d+)$")
_TMP_RE = re.compile(r"^\.tmp_global_step_(\d+)_(.+)$")


class CheckpointError(UserError, RuntimeError):
    """A checkpoint that cannot be written or read as asked."""


def _fsync_dir(path: str) -> None:
    """Flush a directory entry (a rename) to disk; best effort (not on every OS)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _list_files(root: str) -> list[str]:
    out = []
    for dirpath, _, files in os.walk(root):
        for name in files:
            out.append(os.path.relpath(os.path.join(dirpath, name), root))
    return sorted(out)


class CheckpointManager:
    """Writes ``global_step_<N>`` checkpoints under ``root`` and keeps the last ``keep_last``.

    ``keep_last=None`` keeps every checkpoint (verl's ``max_ckpt_to_keep``).
    """

    def __init__(self, root: str, keep_last: int | None = None) -> None:
        if keep_last is not None and (not isinstance(keep_last, int) or keep_last < 1):
            raise CheckpointError(
                f"keep_last must be a positive integer or None (keep all), got {keep_last!r}; "
                "set trainer.max_ckpt_to_keep to e.g. 2, or null"
            )
        self.root = os.path.abspath(os.fspath(root))
        self.keep_last = keep_last

    # ----------------------------------------------------------------- names
    def step_dir(self, step: int) -> str:
        """Where the complete checkpoint of ``step`` lives (``root/global_step_<step>``)."""
        self._check_step(step)
        return os.path.join(self.root, f"global_step_{step}")

    def tmp_dir(self, step: int, token: str | None = None) -> str:
        """The temporary directory that :meth:`begin` creates; ``token`` defaults to the pid."""
        self._check_step(step)
        token = str(os.getpid()) if token is None else str(token)
        if not token or "/" in token or os.sep in token:
            raise CheckpointError(f"checkpoint token must be a non-empty name without '/', got {token!r}")
        return os.path.join(self.root, f".tmp_global_step_{step}_{token}")

    @staticmethod
    def _check_step(step: int) -> None:
        if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 0:
            raise CheckpointError(f"checkpoint step must be a non-negative integer, got {step!r}")

    # ---------------------------------------------------------------- writing
    def begin(self, step: int, token: str | None = None) -> str:
        """Create (emptying a stale one) and return the temporary directory for ``step``."""
        tmp = self.tmp_dir(step, token)
        os.makedirs(self.root, exist_ok=True)
        if os.path.exists(tmp):
            shutil.rmtree(tmp)
        os.makedirs(tmp)
        return tmp

    def commit(self, step: int, token: str | None = None, extra: dict[str, Any] | None = None) -> str:
        """Mark the temporary directory complete, rename it into place, prune; returns the final path.

        ``extra`` (json-able) is stored in the manifest. Re-committing a step
        that already has a checkpoint replaces it.
        """
        tmp = self.tmp_dir(step, token)
        if not os.path.isdir(tmp):
            raise CheckpointError(f"cannot commit step {step}: {tmp} does not exist; call begin({step}) first")
        manifest = {"step": int(step), "time": time.time(), "files": _list_files(tmp)}
        if extra:
            manifest["extra"] = extra
        try:
            text = json.dumps(manifest, indent=1)
        except TypeError as e:
            raise CheckpointError(f"checkpoint manifest extra for step {step} is not json-able: {e}") from None
        _write_atomic(os.path.join(tmp, MARKER), text)

        final = self.step_dir(step)
        old = None
        if os.path.exists(final):  # os.replace cannot overwrite a non-empty directory
            old = os.path.join(self.root, f".old_global_step_{step}_{os.getpid()}")
            os.replace(final, old)
        os.replace(tmp, final)
        _fsync_dir(self.root)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        _write_atomic(os.path.join(self.root, LATEST_FILE), f"{step}\n")
        self.prune(keep=step)
        logger.info("saved checkpoint %s", final)
        return final

    def abort(self, step: int, token: str | None = None) -> None:
        """Remove the temporary directory of an unfinished save."""
        shutil.rmtree(self.tmp_dir(step, token), ignore_errors=True)

    def save(self, step: int, write_fn: Callable[[str], Any], extra: dict[str, Any] | None = None) -> str:
        """One-process save: ``write_fn(tmp_dir)`` writes everything, then :meth:`commit`."""
        tmp = self.begin(step)
        try:
            write_fn(tmp)
        except BaseException:
            self.abort(step)
            raise
        return self.commit(step, extra=extra)

    def prune(self, keep: int | None = None) -> list[str]:
        """Delete complete checkpoints beyond the newest ``keep_last``; returns what was deleted.

        Step ``keep`` (the one just written) is never deleted. Only complete
        ``global_step_<N>`` directories are touched.
        """
        if self.keep_last is None:
            return []
        complete = self.complete()
        others = [(s, p) for s, p in complete if s != keep]
        slots = self.keep_last - (1 if keep is not None and any(s == keep for s, _ in complete) else 0)
        doomed = others[: max(len(others) - slots, 0)]
        for _, path in doomed:
            shutil.rmtree(path)
            logger.info("pruned checkpoint %s (keep_last=%d)", path, self.keep_last)
        return [p for _, p in doomed]

    # ---------------------------------------------------------------- reading
    def manifest(self, path: str) -> dict[str, Any] | None:
        """The manifest of a checkpoint directory, or None if it is not complete."""
        try:
            with open(os.path.join(path, MARKER)) as f:
                data = json.load(f)
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) and "step" in data else None

    def complete(self) -> list[tuple[int, str]]:
        """Every complete checkpoint as ``(step, path)``, oldest first."""
        found, _ = self._scan()
        return found

    def latest(self) -> tuple[int, str] | None:
        """The newest complete checkpoint, or None; half-written ones are skipped with a warning."""
        found, debris = self._scan()
        for path, why in debris:
            msg = f"ignoring incomplete checkpoint {path} ({why})"
            warnings.warn(msg, stacklevel=2)
            logger.warning(msg)
        return found[-1] if found else None

    def _scan(self) -> tuple[list[tuple[int, str]], list[tuple[str, str]]]:
        if not os.path.isdir(self.root):
            return [], []
        found, debris = [], []
        for name in sorted(os.listdir(self.root)):
            path = os.path.join(self.root, name)
            if not os.path.isdir(path):
                continue
            m = _STEP_RE.match(name)
            if m:
                man = self.manifest(path)
                if man is None:
                    debris.append((path, f"no {MARKER} marker: the save did not finish"))
                elif man["step"] != int(m.group(1)):
                    debris.append((path, f"its {MARKER} marker says step {man['step']}"))
                else:
                    found.append((int(m.group(1)), path))
            elif _TMP_RE.match(name):
                debris.append((path, "a temporary directory: a save was interrupted or is under way"))
        found.sort()
        return found, debris


# --------------------------------------------------------------------- RNG
def save_rng_state() -> dict[str, Any]:
    """Python ``random``, numpy's global RNG and torch (CPU, CUDA if present) as a plain dict.

    The dict holds only tuples, lists, ints, floats, strings and tensors, so it
    round-trips through ``torch.save`` / ``torch.load(weights_only=True)``.
    """
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        "python": [version, list(internal), gauss],
        "numpy": [kind, torch.from_numpy(np.asarray(keys, dtype=np.int64)), int(pos), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def load_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`save_rng_state` returned."""
    missing = [k for k in ("python", "numpy", "torch") if k not in state]
    if missing:
        raise CheckpointError(f"RNG state is missing {missing}; it must come from save_rng_state()")
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    keys = keys.numpy() if isinstance(keys, torch.Tensor) else np.asarray(keys)
    np.random.set_state((kind, keys.astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state:
        if torch.cuda.is_available() and torch.cuda.device_count() == len(state["cuda"]):
            torch.cuda.set_rng_state_all(state["cuda"])
        else:
            n = torch.cuda.device_count() if torch.cuda.is_available() else 0
            warnings.warn(
                f"checkpoint holds CUDA RNG state for {len(state['cuda'])} device(s) but {n} are visible; "
                "CUDA sampling will not repeat the original run exactly",
                stacklevel=2,
            )
