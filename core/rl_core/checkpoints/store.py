"""Atomic, prunable checkpoints on a local or shared filesystem (layout and protocol: docs/reliability.md).

A checkpoint is written into ``root/.tmp_global_step_<N>_<token>``, gets a ``COMPLETE`` manifest (step, time,
every file's size and sha256) and is renamed to ``root/global_step_<N>`` with one ``os.replace``, so a crash
leaves the old set of complete checkpoints or the new one, plus debris :meth:`CheckpointManager.latest` ignores.
``latest(verify=True)`` checks every file against the manifest and falls back to the previous checkpoint.
Several writers: rank 0 ``begin`` s and ``commit`` s, every rank writes into ``tmp_dir``; one process: ``save``.
Files are read with :func:`safe_load` / :func:`read_json` (plain data only), so a checkpoint copied in from
elsewhere cannot run code on resume.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import pickle
import random
import re
import shutil
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import numpy as np
import torch

from rl_core.problems import UserError

logger = logging.getLogger(__name__)

MARKER = "COMPLETE"
LATEST_FILE = "latest_checkpointed_iteration.txt"
RUN_CONFIG = "run_config.json"  # the run's config, inside each checkpoint (what a resume compares against)
MANIFEST_MAX_BYTES = 256 << 20
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


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


def _write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        _remove(tmp)  # no half-written file left behind (a full disk)
        raise


def save_tensors(obj: Any, path: str) -> None:
    """``torch.save`` whose write failures are ``OSError`` (torch reports a full disk as a RuntimeError); a partly
    written file is removed."""
    try:
        torch.save(obj, path)
    except BaseException as exc:
        _remove(path)
        if not isinstance(exc, RuntimeError) or "write" not in str(exc).lower():
            raise
        free = shutil.disk_usage(os.path.dirname(os.path.abspath(path))).free
        code = errno.ENOSPC if free < (64 << 20) else errno.EIO
        raise OSError(code, os.strerror(code), path) from None


def model_weights_size(model_dir: str) -> int | None:
    """Bytes of a HF model folder's weight files (``*.safetensors`` / ``*.bin``): roughly what an HF export of it takes."""
    try:
        names = os.listdir(model_dir)
    except OSError:
        return None
    size = sum(os.path.getsize(os.path.join(model_dir, n)) for n in names if n.endswith((".safetensors", ".bin")))
    return size or None


def tree_size(path: str) -> int:
    """Bytes of every file under ``path`` (0 if it does not exist)."""
    return sum(os.path.getsize(os.path.join(d, n)) for d, _, files in os.walk(path) for n in files if not os.path.islink(os.path.join(d, n)))


def _list_files(root: str) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, n), root) for d, _, files in os.walk(root) for n in files)


def _links(root: str) -> list[str]:
    """Symbolic links at or under ``root`` (relative names; ``.`` for root itself)."""
    if os.path.islink(root):
        return ["."]
    out = []
    for dirpath, dirs, files in os.walk(root):
        out += [os.path.relpath(os.path.join(dirpath, n), root) for n in dirs + files if os.path.islink(os.path.join(dirpath, n))]
    return sorted(out)


def read_run_config(step_dir: str) -> dict[str, Any] | None:
    """The config stored inside a checkpoint (:data:`RUN_CONFIG`), or None for one written by an older rl-core."""
    data = read_json(os.path.join(step_dir, RUN_CONFIG))
    if data is not None and not isinstance(data, dict):
        raise CheckpointError(f"{os.path.join(step_dir, RUN_CONFIG)} is not a config; delete the checkpoint directory")
    return data


def file_digest(path: str) -> dict[str, Any]:
    """``{"size": bytes, "sha256": hex}`` of one file (read in 8 MiB blocks)."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while True:
            block = f.read(8 << 20)
            if not block:
                break
            h.update(block)
            size += len(block)
    return {"size": size, "sha256": h.hexdigest()}


def _digests(root: str, names: list[str]) -> dict[str, dict[str, Any]]:
    """Digests of ``names`` under ``root``, several files at once (hashlib releases the GIL)."""
    if not names:
        return {}
    workers = max(1, min(8, os.cpu_count() or 1, len(names)))
    with ThreadPoolExecutor(workers) as pool:
        return dict(zip(names, pool.map(lambda n: file_digest(os.path.join(root, n)), names)))


class CheckpointManager:
    """Writes ``global_step_<N>`` checkpoints under ``root`` and keeps the last ``keep_last`` (None: all)."""

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
        """Mark the temporary directory complete (``extra``, json-able, goes in the manifest), rename it into place
        (replacing an existing one of that step), prune; returns the final path."""
        tmp = self.tmp_dir(step, token)
        if not os.path.isdir(tmp):
            raise CheckpointError(f"cannot commit step {step}: {tmp} does not exist; call begin({step}) first")
        files = _list_files(tmp)
        manifest = {"step": int(step), "time": time.time(), "files": files, "digests": _digests(tmp, files)}
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

    def clean_debris(self) -> list[tuple[str, int]]:
        """Delete the folders of interrupted saves; call only while holding the output folder's lock (no other
        writer). Returns ``(path, bytes freed)`` of each."""
        removed = []
        if not os.path.isdir(self.root):
            return removed
        for name in sorted(os.listdir(self.root)):
            path = os.path.join(self.root, name)
            if (_TMP_RE.match(name) or name.startswith(".old_global_step_")) and os.path.isdir(path) and not os.path.islink(path):
                size = tree_size(path)
                shutil.rmtree(path, ignore_errors=True)
                removed.append((path, size))
        return removed

    def size_of_latest(self) -> int | None:
        """Bytes of the newest complete checkpoint (what the next one will roughly need), or None."""
        latest = self.latest()
        if latest is None:
            return None
        man = self.manifest(latest[1]) or {}
        digests = man.get("digests")
        if isinstance(digests, dict):
            return sum(int(d.get("size", 0)) for d in digests.values() if isinstance(d, dict))
        return tree_size(latest[1])

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
        """Delete complete checkpoints beyond the newest ``keep_last``, never step ``keep``; returns what was deleted."""
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
            data = read_json(os.path.join(path, MARKER), max_bytes=MANIFEST_MAX_BYTES)
        except CheckpointError:
            return None
        return data if isinstance(data, dict) and isinstance(data.get("step"), int) else None

    def complete(self) -> list[tuple[int, str]]:
        """Every complete checkpoint as ``(step, path)``, oldest first."""
        found, _ = self._scan()
        return found

    def verify(self, path: str) -> str | None:
        """Why the checkpoint at ``path`` cannot be used (files missing, extra, or not matching the manifest's sizes
        and sha256), or None. A manifest without digests (an older rl-core) passes with a warning."""
        man = self.manifest(path)
        if man is None:
            return f"no readable {MARKER} manifest"
        listed = man.get("files")
        digests = man.get("digests")
        if not isinstance(listed, list):
            return f"its {MARKER} manifest lists no files"
        links = _links(path)
        if links:
            return f"it holds symbolic link(s) {links[:5]}, which rl-core never writes"
        present = [f for f in _list_files(path) if f != MARKER]
        missing = sorted(set(listed) - set(present))
        if missing:
            return f"missing file(s) {missing[:5]}"
        extra = sorted(set(present) - set(listed))
        if extra:
            return f"file(s) not written by the run: {extra[:5]}"
        if not isinstance(digests, dict):
            warnings.warn(f"checkpoint {path} has no file digests (an older rl-core wrote it): its contents are not verified", stacklevel=3)
            return None
        for name in listed:
            want = digests.get(name)
            if not isinstance(want, dict):
                return f"its manifest has no digest for {name}"
            full = os.path.join(path, name)
            if os.path.getsize(full) != want.get("size"):
                return f"{name} has {os.path.getsize(full)} bytes, the manifest says {want.get('size')} (truncated or overwritten)"
        actual = _digests(path, listed)
        for name in listed:
            if actual[name]["sha256"] != digests[name].get("sha256"):
                return f"{name} does not match its sha256 in the manifest (corrupted or changed)"
        return None

    def latest(self, verify: bool = False) -> tuple[int, str] | None:
        """The newest complete checkpoint, or None; half-written ones are skipped with a warning. ``verify=True``
        (before a resume) also skips, with a warning, one whose files do not match its manifest."""
        found, debris = self._scan()
        for path, why in debris:
            _warn(f"ignoring incomplete checkpoint {path} ({why})")
        if not verify:
            return found[-1] if found else None
        for step, path in reversed(found):
            why = self.verify(path)
            if why is None:
                return step, path
            _warn(f"checkpoint {path} is damaged ({why}); falling back to the previous complete checkpoint")
        return None

    def _scan(self) -> tuple[list[tuple[int, str]], list[tuple[str, str]]]:
        if not os.path.isdir(self.root):
            return [], []
        found, debris = [], []
        for name in sorted(os.listdir(self.root)):
            path = os.path.join(self.root, name)
            if not os.path.isdir(path):
                continue
            m = _STEP_RE.match(name)
            if m and os.path.islink(path):
                debris.append((path, "a symbolic link, which rl-core never writes"))
            elif m:
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


def _warn(msg: str) -> None:
    warnings.warn(msg, stacklevel=3)
    logger.warning(msg)


# ------------------------------------------------------------- safe loading
def safe_load(path: str) -> Any:
    """``torch.load(path, weights_only=True)`` on the CPU: tensors and plain data only; anything else (a pickled
    object, possibly planted to run code on resume) is a :class:`CheckpointError` naming it."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint file {path} is missing") from None
    except (pickle.UnpicklingError, RuntimeError, AttributeError, TypeError, ValueError, EOFError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(
            f"refused to load {path}: it is not a checkpoint file of tensors and plain data ({first[:200]}). "
            "rl-core loads checkpoints with torch.load(weights_only=True) and never runs code from them; "
            "if you did not put this file there, delete the checkpoint directory"
        ) from None


JSON_MAX_BYTES = 64 << 20  # a JSON file of a checkpoint larger than this was not written by rl-core


def read_json(path: str, max_bytes: int = JSON_MAX_BYTES) -> Any:
    """A checkpoint's JSON file (plain data), or None if absent; a link, a file over ``max_bytes`` or one that does
    not parse is a :class:`CheckpointError`."""
    if os.path.islink(path):
        raise CheckpointError(f"refused to load {path}: it is a symbolic link (rl-core never writes links); delete the checkpoint directory")
    try:
        size = os.path.getsize(path)
    except FileNotFoundError:
        return None
    if size > max_bytes:
        raise CheckpointError(f"refused to load {path}: {size} bytes, more than rl-core ever writes there; delete the checkpoint directory")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: nesting deeper than the parser's stack
        why = "nested deeper than rl-core ever writes" if isinstance(exc, RecursionError) else exc
        raise CheckpointError(f"cannot read {path}: {why}; the checkpoint is damaged, delete it to resume from the previous one") from None


# --------------------------------------------------------------------- RNG
def save_rng_state() -> dict[str, Any]:
    """Python ``random``, numpy's global RNG and torch (CPU, CUDA if present) as plain data and tensors, which
    round-trip through ``torch.load(weights_only=True)``."""
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
    missing = [k for k in ("python", "numpy", "torch") if not isinstance(state, dict) or k not in state]
    if missing:
        raise CheckpointError(f"RNG state is missing {missing}; it must come from save_rng_state()")
    try:
        version, internal, gauss = state["python"]
        random.setstate((version, tuple(internal), gauss))
        kind, keys, pos, has_gauss, cached = state["numpy"]
        keys = keys.numpy() if isinstance(keys, torch.Tensor) else np.asarray(keys)
        np.random.set_state((kind, keys.astype(np.uint32), pos, has_gauss, cached))
        torch.set_rng_state(state["torch"])
    except (TypeError, ValueError, RuntimeError, AttributeError) as exc:
        raise CheckpointError(f"the checkpoint's RNG state is not what save_rng_state() writes ({exc}); the checkpoint is damaged") from None
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
