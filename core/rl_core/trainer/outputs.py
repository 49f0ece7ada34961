"""The run's output folder: checked before anything is built, never silently reused for another config.

:func:`ensure_writable` proves it can be written; :func:`check_previous_run` refuses to resume a checkpoint under a
different config (except :data:`RESUMABLE_KEYS`) without ``--resume-anyway``; :func:`output_lock` allows one run per
folder; :func:`write_config` writes ``config.yaml`` atomically once everything is built.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import socket
import sys
import time
from typing import Any, Callable, Iterator, Mapping

import yaml

from rl_core.problems import UserError
from rl_core.config.load import config_to_dict, load_config
from rl_core.trainer.schedule_resume import schedule_changes

CONFIG_FILE = "config.yaml"

# changing these does not change what a checkpoint means
RESUMABLE_KEYS = frozenset({
    "trainer.total_training_steps", "trainer.total_epochs", "trainer.save_freq", "trainer.test_freq", "trainer.val_before_train",
    "trainer.max_ckpt_to_keep", "trainer.loggers", "trainer.project_name", "trainer.experiment_name", "trainer.torch_threads",
    "trainer.output_dir",  # where the run is (a moved folder)
    "trainer.resume",
    "trainer.observers",  # step observers (rl_core.observers, e.g. traces) read the run, they never change it
    "data.val_files", "data.val_batch_size", "data.val_max_samples", "data.val_generator",
})
RESUMABLE_PREFIXES = ("ray.",)

# what a checkpoint fixes: a new value here cannot take effect on resume (the weights, the parallel layout and the
# random state come from the checkpoint), so even --resume-anyway refuses it; every other key is read from the
# config as the run goes (the optimizer's hyper-parameters and LR schedule are re-applied to the restored optimizer)
FIXED_BY_CHECKPOINT = {
    "model.path": "the weights come from the checkpoint",
    "model.tokenizer_path": "the checkpoint's weights belong to the old tokenizer's vocabulary",
    "model.architecture": "the weights come from the checkpoint",
    "model.override_config": "the weights come from the checkpoint",
    "model.random_init": "the weights come from the checkpoint",
    "critic.enable": "the checkpoint holds the critic (or not)",
    "critic.model_path": "the critic's weights come from the checkpoint",
    "train.name": "the checkpoint's format belongs to its train engine",
    "train.tensor_model_parallel_size": "the checkpoint's shards follow its parallel layout",
    "train.pipeline_model_parallel_size": "the checkpoint's shards follow its parallel layout",
    "train.context_parallel_size": "the checkpoint's shards follow its parallel layout",
    "trainer.seed": "the random state is restored from the checkpoint",
    "data.seed": "the data order is restored from the checkpoint",
}


class OutputDirError(UserError, OSError):
    """The output folder cannot be used: not writable, or it holds a run with another config."""


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


_FULL = (errno.ENOSPC, errno.EDQUOT)
_DENIED = (errno.EACCES, errno.EPERM, errno.EROFS)


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def free_bytes(path: str) -> int | None:
    """Free bytes on the filesystem holding ``path`` (or its nearest existing parent); None if unknown."""
    path = os.path.abspath(path)
    while path and not os.path.exists(path):
        path = os.path.dirname(path)
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def write_failure(exc: BaseException, path: str, needed: int | None = None) -> str:
    """Why writing ``path`` failed and what to do, by cause: a full disk (free and needed bytes, never reported as a
    permission problem, nor the other way round), permissions, other."""
    code = getattr(exc, "errno", None)
    text = str(exc)
    full = code in _FULL or "No space left" in text or "Disk quota" in text
    free = free_bytes(path)
    if full or (code is None and needed is not None and free is not None and free < needed):
        room = f"{_gib(free)} free" if free is not None else "no room left"
        need = f", about {_gib(needed)} needed" if needed else ""
        return f"the disk holding {path} is full (No space left on device: {room}{need}); free space there or choose a folder on another disk"
    if code in _DENIED:
        what = "is on a read-only file system (Read-only file system)" if code == errno.EROFS else "is not writable (Permission denied)"
        return f"{path} {what}; fix the folder's permissions or choose another folder"
    detail = getattr(exc, "strerror", None) or (text.strip().splitlines() or [type(exc).__name__])[-1][:300]
    return f"writing {path} failed: {detail}"


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
        with contextlib.suppress(OSError):
            os.remove(probe)
        raise OutputDirError(f"{key}: {write_failure(exc, output_dir)}") from None


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def plain_config(config: Any) -> dict[str, Any]:
    """A config (object or dict) as JSON data: what a checkpoint stores and what resumes compare."""
    data = config if isinstance(config, Mapping) else config_to_dict(config)
    return json.loads(json.dumps(data, default=str))


def config_diff(old: Mapping[str, Any], new: Mapping[str, Any], ignore: frozenset[str] = RESUMABLE_KEYS) -> list[str]:
    """Lines ``key: old -> new`` for every key that differs (keys in ``ignore`` left out)."""
    a, b = flatten(old), flatten(new)
    nulls = [k for k, v in a.items() if v is None and k not in b and any(n.startswith(k + ".") for n in b)]
    defaults = flatten(plain_config(load_config())) if nulls else {}
    for key in nulls:  # a section an earlier rl-core saved as null (unset) that a package now fills with its defaults: unchanged
        if all(defaults.get(n, "<unset>") == v for n, v in b.items() if n.startswith(key + ".")):
            a.pop(key)
            b = {n: v for n, v in b.items() if not n.startswith(key + ".")}
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


def changed_keys(diff: list[str]) -> list[str]:
    """The keys of :func:`config_diff`'s lines."""
    return [line.split(": ", 1)[0] for line in diff]


def _fixed(key: str) -> str | None:
    for fixed, why in FIXED_BY_CHECKPOINT.items():
        if key == fixed or key.startswith(fixed + "."):
            return why
    return None


def check_previous_run(
    output_dir: str,
    config: Mapping[str, Any],
    *,
    has_checkpoint: bool,
    resume: bool,
    resume_anyway: bool | int,
    saved_config: Mapping[str, Any] | None = None,
    saved_where: str | None = None,
    resumed_step: int | None = None,
    dropped_by: Callable[[Mapping[str, Any], Mapping[str, Any]], str | None] | None = None,
) -> list[str]:
    """Stop if this run would resume a checkpoint written under another config; returns the diff lines.
    The old config is ``saved_config`` (stored in the checkpoint at ``saved_where``) or else the folder's ``config.yaml``.
    ``resume_anyway`` accepts a difference except in :data:`FIXED_BY_CHECKPOINT`'s keys. With ``resume`` off, a folder
    holding a checkpoint is refused (starting over would rotate its checkpoints away and rewrite its metrics).
    ``dropped_by(old, new)``: what of the checkpoint's trained state a resume under ``new`` drops, in words (a feature's
    ``resume_drops`` hook, e.g. rl-lora's adapters), which ``resume_anyway`` accepts only when given twice."""
    if has_checkpoint and not resume:
        raise OutputDirError(
            f"trainer.output_dir={output_dir!r} holds the checkpoints of an earlier run, and trainer.resume=false would "
            "start over in it, deleting them as new ones are saved and replacing its metrics. Choose one: start the new "
            "run in another folder (trainer.output_dir=...), continue that run (trainer.resume=true, the default), or "
            "move the folder away first."
        )
    old = saved_config if saved_config is not None else read_previous_config(output_dir)
    if old is None:
        return []
    where = saved_where or os.path.join(output_dir, CONFIG_FILE)
    # a new total that moves the lr schedule is a change too (rl_core.trainer.schedule_resume)
    diff = config_diff(old, config) + schedule_changes(old, config, resumed_step)
    if not (diff and has_checkpoint and resume):
        return diff
    fixed = [f"{line}  ({_fixed(key)})" for line, key in zip(diff, changed_keys(diff)) if _fixed(key)]
    dropped = dropped_by(old, config) if dropped_by is not None else None
    if resume_anyway and not fixed and dropped and int(resume_anyway) < 2:
        raise OutputDirError(
            f"trainer.output_dir={output_dir!r}: --resume-anyway would drop {dropped} (the checkpoint: {where}); what they "
            "learned is lost from the next step on. If that is what you want, give --resume-anyway twice; otherwise put those "
            "keys back to the checkpoint's values."
        )
    if resume_anyway and not fixed:
        return diff
    shown = "\n  ".join(diff[:40]) + (f"\n  ... and {len(diff) - 40} more" if len(diff) > 40 else "")
    if resume_anyway:
        raise OutputDirError(
            f"trainer.output_dir={output_dir!r}: --resume-anyway cannot resume the checkpoint ({where}) under these changes, "
            "which cannot take effect on resume:\n  " + "\n  ".join(fixed) + "\n"
            "Put them back to the checkpoint's values, or start a new run in another trainer.output_dir "
            "(from the old run's weights: model.path=<its hf_final>; a LoRA run's: model.lora_adapter_path=<its hf_final>)."
        )
    raise OutputDirError(
        f"trainer.output_dir={output_dir!r} holds a checkpoint of a run with a different config ({where}), "
        f"{len(diff)} changed key(s):\n  {shown}\n"
        + (f"Of these, {', '.join(changed_keys([f.split('  (')[0] for f in fixed]))} cannot change on resume. " if fixed else "")
        + "Choose one: resume that checkpoint under the new settings with `rlcore train ... --resume-anyway` "
        "(they apply from the next step), or start a new run in another folder (trainer.output_dir=...)."
    )


def write_config(output_dir: str, config: Mapping[str, Any]) -> str:
    """Write ``config.yaml`` atomically; returns its path."""
    path = os.path.join(output_dir, CONFIG_FILE)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            yaml.safe_dump(dict(config), f, sort_keys=False)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise OutputDirError(f"cannot write the run's config: {write_failure(exc, path)}") from None
    return path


# ------------------------------------------------------------------ one run per folder
LOCK_FILE = ".rlcore.lock"


def _lock_record(fd: int) -> dict[str, Any]:
    os.lseek(fd, 0, os.SEEK_SET)
    raw = os.read(fd, 4096)
    try:
        data = json.loads(raw.decode() or "{}")
    except (UnicodeDecodeError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _describe(record: Mapping[str, Any]) -> str:
    if not record.get("pid"):  # the holder's record file was deleted or emptied under it; the folder's lock still holds
        return f"its record {LOCK_FILE} was deleted; `fuser -v` on the folder names the process"
    return f"pid {record.get('pid', '?')} on {record.get('host', '?')}, started {record.get('started', '?')}"


@contextlib.contextmanager
def output_lock(output_dir: str) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``output_dir`` for the life of a run; a second run stops naming the holder's pid,
    host and start time. A dead run leaves a record (``.rlcore.lock``) but no lock: the next run takes over. The lock is on
    the FOLDER (an open descriptor), not the record, so deleting ``.rlcore.lock`` mid-run cannot let a second run in."""
    ensure_writable(output_dir)
    path = os.path.join(output_dir, LOCK_FILE)
    try:
        dir_fd = os.open(output_dir, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError as exc:
        raise OutputDirError(f"trainer.output_dir={output_dir!r}: cannot open the folder to lock it ({_why(exc)})") from None
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        os.close(dir_fd)
        raise OutputDirError(f"trainer.output_dir={output_dir!r}: cannot create the lock file {path} ({_why(exc)})") from None
    try:
        try:
            fcntl.flock(dir_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):  # e.g. ENOLCK: no locks on this filesystem
                print(
                    f"warning: trainer.output_dir={output_dir!r}: its filesystem cannot lock files ({_why(exc)}), so nothing "
                    "stops a second run from writing into it at the same time; make sure only one run uses it",
                    file=sys.stderr, flush=True,
                )
                yield
                return
            holder = _lock_record(fd)
            raise OutputDirError(
                f"trainer.output_dir={output_dir!r} is in use by another run ({_describe(holder)}): two runs in one folder "
                "would overwrite each other's checkpoints and metrics. Wait for it to finish or stop it "
                f"(kill {holder.get('pid', '<pid>')}), or give this run another trainer.output_dir."
            ) from None
        stale = _lock_record(fd)
        if stale.get("pid"):
            print(
                f"note: trainer.output_dir={output_dir!r}: the run that held it ({_describe(stale)}) is gone without "
                "releasing it (killed or crashed); taking over its lock",
                file=sys.stderr, flush=True,
            )
        record = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)  # a clean end: the next run finds no record to report
            fcntl.flock(dir_fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
        os.close(dir_fd)
