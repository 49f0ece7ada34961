"""Reading a trace folder step by step: the steps table from the files' footers, rows one step at a time
(a folder of a million samples is never read whole)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq
from rl_core.problems import UserError

from rl_traces.writer import META_KEY, PHASES, TRACES, step_file, step_of


class TracesError(UserError):
    """A run folder without traces, or a trace file that does not read."""


def traces_root(run_dir: str | Path) -> Path:
    """``RUN_DIR/traces`` (RUN_DIR may be the traces folder itself); an error saying how to get traces otherwise."""
    run = Path(run_dir).expanduser()
    for root in (run / TRACES, run):
        if any((root / p).is_dir() for p in PHASES):
            return root
    if not run.exists():
        raise TracesError(f"{run} does not exist: give the run's trainer.output_dir (e.g. outputs/quickstart)")
    raise TracesError(
        f"no traces under {run}: its run was made without rl-traces installed, or with trainer.observers.traces.enable=false; "
        "pip install rl-traces and train again (a resumed run keeps tracing from its checkpoint)"
    )


class Traces:
    def __init__(self, run_dir: str | Path) -> None:
        self.root = traces_root(run_dir)

    def steps(self, phase: str = "train") -> list[int]:
        folder = self.root / phase
        if not folder.is_dir():
            return []
        return sorted(s for p in folder.iterdir() if not p.name.startswith(".") and (s := step_of(p)) is not None)

    def summary(self, phase: str, step: int) -> dict:
        """The step's numbers over every sample (the file's footer only)."""
        path = step_file(self.root, phase, step)
        try:
            meta = pq.read_schema(path).metadata or {}
            return json.loads(meta[META_KEY])
        except (OSError, KeyError, ValueError, pa.ArrowException) as exc:
            raise TracesError(f"{path} is not a trace file rl-traces wrote ({type(exc).__name__}: {exc}); delete it") from None

    def read(self, phase: str, step: int, columns: list[str] | None = None) -> pa.Table:
        path = step_file(self.root, phase, step)
        if not path.exists():
            have = self.steps(phase)
            raise TracesError(f"no {phase} traces of step {step} under {self.root}"
                              + (f" (steps {have[0]}..{have[-1]}: {len(have)} files)" if have else " (none of that phase)"))
        try:
            return pq.read_table(path, columns=columns)
        except (OSError, pa.ArrowException) as exc:
            raise TracesError(f"{path} does not read ({type(exc).__name__}: {exc}); delete it") from None

    def iter_steps(self, phase: str = "train", steps: list[int] | None = None, columns: list[str] | None = None) -> Iterator[tuple[int, pa.Table]]:
        for s in self.steps(phase) if steps is None else steps:
            yield s, self.read(phase, s, columns)
