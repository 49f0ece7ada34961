"""Metric logging: :class:`Tracker` fans each ``log(metrics, step)`` out to core's ``console`` and ``jsonl`` loggers
and the tracker cards' (``Plan.trackers``).

``<output_dir>/metrics.jsonl`` is the run's own record; on resume the rows after the resumed checkpoint move to
``metrics.dropped-<time>.jsonl``. :data:`METRIC_GROUPS` names the key metrics (verl's names included).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import time
from typing import Any, Callable, Iterable, Mapping

from rl_core.config.schema import LOGGERS
from rl_core.problems import UserError
from rl_core.trainer.outputs import write_failure

logger = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"

# group -> (regex over metric names, short label). Order is display order.
METRIC_GROUPS: dict[str, tuple[str, str]] = {
    "reward": (r"^(?!val|timing|perf).*(reward|score)", "reward"),
    "validation": (r"^val(?!.*(timing|response_len|samples))", "val"),
    "response_length": (r"^(?!val|timing|perf).*(response_len|resp_len)", "len"),
    "kl": (r"^(?!reward/|rollout_corr/)(.*([/_]|^)kl($|[/_])|.*kl_loss|.*ppo_kl)", "kl"),
    "entropy": (r"entropy", "ent"),
    "grad_norm": (r"grad_norm", "gnorm"),
    "lr": (r"(^|/)lr$|learning_rate", "lr"),
    "step_time": (r"timing_s/step$|step_time|time_per_step", "s/step"),
    # the largest rollout-vs-trainer log-prob gap of the step (rl_core.rollout.exact)
    "mismatch": (r"^rollout_corr/log_prob_abs_diff_max$", "dlogp"),
}


def find_key_metric(names: list[str] | Mapping[str, Any], group: str) -> str | None:
    """The single metric of ``group`` to show in compact displays (a ``mean`` if there is one)."""
    pattern = re.compile(METRIC_GROUPS[group][0])
    hits = [n for n in names if pattern.search(n)]
    if not hits:
        return None
    if group == "validation":  # accuracy says more than a mean reward
        acc = [n for n in hits if "acc" in n]
        hits = acc or hits
    for suffix in ("/mean", "_mean", "mean"):
        for n in hits:
            if n.endswith(suffix):
                return n
    return min(hits, key=len)


def key_metrics(metrics: Mapping[str, float], groups: tuple[str, ...] | None = None) -> dict[str, float]:
    """``{short label: value}`` for the key metric of each group present in ``metrics``."""
    out = {}
    for group in groups or tuple(METRIC_GROUPS):
        name = find_key_metric(metrics, group)
        if name is not None:
            out[METRIC_GROUPS[group][1]] = metrics[name]
    return out


def _to_float(name: str, value: Any) -> float:
    if hasattr(value, "item"):  # torch / numpy scalars
        value = value.item()
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"metric {name!r} must be a number, got {type(value).__name__} {value!r}") from None


def format_metric(v: float) -> str:
    """A short human form of a metric value (3 significant digits, or scientific when tiny/huge)."""
    if v != v or v == 0:
        return f"{v:g}"
    return f"{v:.3g}" if abs(v) >= 1e-3 and abs(v) < 1e4 else f"{v:.2e}"


class LoggerError(UserError, ImportError, ValueError):
    """A logger named in trainer.loggers cannot be set up (not installed, or its start failed)."""


# ----------------------------------------------------------------- backends
class ConsoleLogger:
    """One compact line per step with the key metrics (all if none is recognised), via ``tqdm.write`` by default so a
    live progress bar stays intact."""

    def __init__(self, print_fn: Callable[[str], Any] | None = None, **_: Any) -> None:
        if print_fn is None:
            from tqdm import tqdm

            print_fn = tqdm.write
        self.print_fn = print_fn

    def log(self, metrics: dict[str, float], step: int) -> None:
        shown = key_metrics(metrics) or dict(list(metrics.items())[:8])
        self.print_fn(f"step {step} | " + " | ".join(f"{k} {format_metric(v)}" for k, v in shown.items()))

    def close(self) -> None:
        pass


class JsonlLogger:
    """Appends ``{"step": ..., "time": ..., **metrics}`` to ``<output_dir>/metrics.jsonl``; non-finite values as
    ``null`` (strict JSON)."""

    def __init__(self, output_dir: str, **_: Any) -> None:
        os.makedirs(output_dir, exist_ok=True)
        self.path = os.path.join(output_dir, METRICS_FILE)
        self._f = open(self.path, "ab", buffering=0)  # unbuffered: a failed write is seen (and undone) at once

    def log(self, metrics: dict[str, float], step: int) -> None:
        row = {"step": step, "time": time.time()}
        row.update({k: (v if math.isfinite(v) else None) for k, v in metrics.items()})
        data = (json.dumps(row) + "\n").encode()
        start = os.fstat(self._f.fileno()).st_size
        try:
            view = memoryview(data)
            while view:
                view = view[self._f.write(view) :]
        except OSError as exc:
            try:
                os.ftruncate(self._f.fileno(), start)  # no torn row left behind
            except OSError:
                pass
            raise LoggerError(
                f"could not append step {step} to {self.path}: {write_failure(exc, self.path)}. The rows before it are kept "
                "(a resumed run logs the later steps again)."
            ) from None

    def truncate_after(self, step: int) -> int:
        self._f.close()
        dropped = truncate_jsonl(self.path, step)
        self._f = open(self.path, "ab", buffering=0)
        return dropped

    def close(self) -> None:
        self._f.close()


#: core's own loggers; trainer.loggers' other names are tracker cards the plan resolved (Plan.trackers)
BACKENDS: dict[str, Callable[..., Any]] = {"console": ConsoleLogger, "jsonl": JsonlLogger}
assert tuple(BACKENDS) == LOGGERS, "rl_core.config.schema.LOGGERS names core's own loggers: keep it in step"


# ------------------------------------------------------------------ tracker
class Tracker:
    """Logs each step's metrics to every backend named in ``loggers``."""

    def __init__(
        self, loggers: list[str], output_dir: str, project: str = "rl-core", experiment: str = "run", config_dict: dict | None = None,
        print_fn: Callable[[str], Any] | None = None,
        trackers: Mapping[str, Callable[..., Any]] | Iterable[tuple[str, Callable[..., Any]]] = (),
    ) -> None:
        if isinstance(loggers, str):
            loggers = [loggers]
        makers = {**dict(trackers), **BACKENDS}  # trackers: the plan's tracker cards' factories (Plan.trackers)
        unknown = [n for n in loggers if n not in makers]
        if unknown:
            raise LoggerError(f"trainer.loggers has unknown logger(s) {unknown}; allowed: {sorted(makers)} "
                              "(other loggers come from tracker cards: pip install rl-tracking for tensorboard and wandb)")
        self.output_dir = os.fspath(output_dir)
        self.backends: dict[str, Any] = {}
        try:
            for name in dict.fromkeys(loggers):
                self.backends[name] = makers[name](output_dir=self.output_dir, project=project, experiment=experiment,
                                                   config_dict=config_dict, print_fn=print_fn)
        except OSError as e:
            self.close()
            raise LoggerError(f"trainer.loggers: cannot open the log files in {self.output_dir}: {e.strerror or e}") from None
        except BaseException:
            self.close()
            raise

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        """Log ``{name: number}`` at ``step`` (tensors and numpy scalars are converted)."""
        clean = {str(k): _to_float(k, v) for k, v in metrics.items()}
        for b in self.backends.values():
            b.log(clean, int(step))

    def truncate_after(self, step: int) -> int:
        """Drop what backends logged after ``step`` (resume); returns the jsonl rows dropped."""
        dropped = 0
        for b in self.backends.values():
            if hasattr(b, "truncate_after"):
                dropped += b.truncate_after(int(step))
        return dropped

    def close(self) -> None:
        for b in self.backends.values():
            try:
                b.close()
            except Exception as e:  # closing must not hide the error that got us here
                logger.warning("closing logger %s failed: %s", type(b).__name__, e)
        self.backends = {}

    def __enter__(self) -> "Tracker":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# -------------------------------------------------------------------- files
def read_jsonl_metrics(path: str) -> list[dict[str, Any]]:
    """The rows of a metrics.jsonl; a torn last line (a crash mid-write) is skipped with a warning."""
    rows = []
    with open(path) as f:
        lines = f.readlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            if i == len(lines) - 1:
                logger.warning("%s: skipping a torn last line (the run stopped mid-write)", path)
                continue
            raise ValueError(f"{path}, line {i + 1}: not valid JSON: {line[:80]!r}") from None
        if not isinstance(row, dict) or "step" not in row:
            raise ValueError(f"{path}, line {i + 1}: expected an object with a 'step' key, got {line[:80]!r}")
        rows.append(row)
    return rows


def truncate_jsonl(path: str, step: int) -> int:
    """Keep only rows with ``step <= step`` (rewritten atomically); returns how many were dropped. The dropped rows are
    first written to ``metrics.dropped-<UTC time>.jsonl`` beside the file."""
    if not os.path.exists(path):
        return 0
    rows = read_jsonl_metrics(path)
    kept = [r for r in rows if r["step"] <= step]
    if len(kept) < len(rows):
        stem, ext = os.path.splitext(path)
        aside = f"{stem}.dropped-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}{ext}"
        with open(aside, "a") as f:
            for r in rows:
                if r["step"] > step:
                    f.write(json.dumps(r) + "\n")
            f.flush()
            os.fsync(f.fileno())
        logger.warning("%s: %d row(s) logged after step %d moved to %s", path, len(rows) - len(kept), step, aside)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        for r in kept:
            f.write(json.dumps(r) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return len(rows) - len(kept)
