"""The step observer that writes the traces: one parquet file per step and phase, on the controller.

``<output_dir>/traces/train/step_00000012.parquet`` holds step 12's training rollouts, ``traces/val/...`` the
validation at step 12 (``step_00000000``: before training). Each file is written beside its place and renamed into
it (a crash leaves the previous files and no half file); its footer carries the step's summary over every sample
(``rl_traces`` key of the schema metadata), so the steps table never reads the rows.

Budget: every group of every step is kept while the folder holds less than ``budget_mb``; after that, a share
``share_after_budget`` of each step's groups (chosen by a hash of the step and the group, the same on a rerun), the
summary still counting them all. Resume: ``on_start(step)`` removes the files of later steps (a rerun from the
checkpoint of step ``step`` writes them again) and counts what is left against the budget: no duplicates, no gaps.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from rl_traces.options import TracesOptions
from rl_traces.rows import SCHEMA, PieceCache, step_columns, summary

TRACES = "traces"
PHASES = ("train", "val")
META_KEY = b"rl_traces"
FORMAT = 1


def step_file(root: Path, phase: str, step: int) -> Path:
    return root / phase / f"step_{step:08d}.parquet"


def step_of(path: Path) -> int | None:
    name = path.name
    if not (name.startswith("step_") and name.endswith(".parquet")):
        return None
    try:
        return int(name[5:-8])
    except ValueError:
        return None


def make(config: Any, options: dict, output_dir: str) -> "TraceWriter | None":
    """The ObserverCard's factory: a writer, or None with trainer.observers.traces.enable=false."""
    opts = TracesOptions(**options)
    return TraceWriter(Path(output_dir) / TRACES, opts) if opts.enable else None


def _keep(step: int, group: str, share: float) -> bool:
    h = hashlib.blake2b(f"{step}/{group}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") / 2**64 < share


class TraceWriter:
    def __init__(self, root: Path, options: TracesOptions) -> None:
        self.root = Path(root)
        self.options = options
        self.pending: dict[str, list[dict[str, list]]] = {p: [] for p in PHASES}
        self.pieces = PieceCache()
        self.used = 0  # bytes of trace files in the folder

    # ------------------------------------------------------------- observer
    def on_start(self, step: int) -> None:
        """The run starts after ``step``: files of later steps (and half-written ones) are a gone run's."""
        cutoff = step if step > 0 else -1
        self.used = 0
        for phase in PHASES:
            folder = self.root / phase
            folder.mkdir(parents=True, exist_ok=True)
            for path in folder.iterdir():
                s = step_of(path)
                if path.name.startswith(".") or s is None or s > cutoff:
                    path.unlink()
                else:
                    self.used += path.stat().st_size

    def on_rollouts(self, rollouts: Any) -> None:
        if rollouts.phase == "val" and not self.options.validation:
            return
        self.pending[rollouts.phase].append(step_columns(rollouts, self.options.token_limit, self.pieces))

    def on_step_end(self, step: int) -> None:
        for phase in PHASES:
            parts, self.pending[phase] = self.pending[phase], []
            if parts:
                cols = {name: [v for p in parts for v in p[name]] for name in SCHEMA.names}
                self.write(phase, step, cols)

    def close(self) -> None:
        self.pending = {p: [] for p in PHASES}

    # ---------------------------------------------------------------- files
    def select(self, step: int, cols: dict[str, list]) -> list[int]:
        """The rows kept: all while under the budget, else the groups of a fixed share."""
        n = len(cols["step"])
        if self.used < self.options.budget_mb * 2**20:
            return list(range(n))
        share = self.options.share_after_budget
        return [i for i in range(n) if share > 0 and _keep(step, cols["group"][i], share)]

    def write(self, phase: str, step: int, cols: dict[str, list]) -> Path:
        keep = self.select(step, cols)
        meta = {**summary(cols), "step": step, "phase": phase, "kept": len(keep), "format": FORMAT,
                "sampled": len(keep) < len(cols["step"])}
        meta = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in meta.items()}
        table = pa.table({name: [cols[name][i] for i in keep] for name in SCHEMA.names}, schema=SCHEMA)
        table = table.replace_schema_metadata({META_KEY: json.dumps(meta).encode()})
        path = step_file(self.root, phase, step)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        old = path.stat().st_size if path.exists() else 0
        try:
            pq.write_table(table, tmp, compression="zstd")
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        self.used += path.stat().st_size - old
        return path
