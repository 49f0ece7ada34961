"""``rlcore traces RUN_DIR``: write the run's traces page (one HTML file, opened from disk) and print its path;
``--export STEP``: the step's prompts and responses as a data set (jsonl or parquet rows in rl-core's data format)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from rl_core.problems import UserError

from rl_traces.page import write_page
from rl_traces.reader import Traces


def add_parser(sub) -> None:
    p = sub.add_parser("traces", help="write an offline HTML page of a run's rollout traces (or --export a step as a data set)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", help="the run's trainer.output_dir (holds traces/), e.g. outputs/quickstart")
    p.add_argument("--out", help="the page (default RUN_DIR/traces.html); with --export the data set "
                                 "(default RUN_DIR/traces_step_STEP.jsonl; .parquet writes parquet)")
    p.add_argument("--steps", help="A:B: only these steps' samples go into the page (the steps table lists every step)")
    p.add_argument("--max-samples", type=int, default=10000, help="samples in the page at most; steps are thinned evenly (default 10000)")
    p.add_argument("--export", type=int, metavar="STEP", help="write STEP's prompts and responses as a data set instead of the page")
    p.add_argument("--phase", choices=("train", "val"), default="train", help="with --export: training or validation rollouts")
    p.set_defaults(func=run)


def _steps(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    try:
        a, _, b = text.partition(":")
        lo, hi = int(a) if a else 0, int(b) if b else 2**31
    except ValueError:
        raise UserError(f"--steps {text!r}: expected A:B (step numbers, either may be left out)") from None
    return lo, hi


def export_rows(run_dir: str | Path, step: int, phase: str = "train") -> list[dict]:
    """STEP's samples as data rows: ``prompt`` (the messages), ``data_source``, ``reward_model.ground_truth``, the
    ``response`` and its ``reward``, ``extra_info`` naming where it came from."""
    table = Traces(run_dir).read(phase, step)
    rows = []
    for r in table.to_pylist():
        messages = json.loads(r["prompt_messages"]) if r["prompt_messages"] else [{"role": "user", "content": r["prompt"]}]
        rows.append({
            "data_source": r["data_source"], "prompt": messages,
            "reward_model": {"style": "rule", "ground_truth": r["ground_truth"]},
            "response": r["response"], "reward": r["reward"],
            "extra_info": {"trace_step": step, "trace_phase": phase, "group": r["group"], "sample": r["sample"],
                           "finish_reason": r["finish_reason"], "advantage": r["advantage"]},
        })
    return rows


def export(run_dir: str | Path, step: int, out: str | Path | None = None, phase: str = "train") -> Path:
    path = Path(out) if out is not None else Path(run_dir) / f"traces_step_{step}{'' if phase == 'train' else '_val'}.jsonl"
    rows = export_rows(run_dir, step, phase)
    tmp = path.with_name(f".{path.name}.tmp")
    if path.suffix == ".parquet":
        table = pa.Table.from_pylist(rows)
        pq.write_table(table, tmp)
    else:
        with open(tmp, "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    tmp.replace(path)
    return path


def run(args) -> int:
    try:
        if args.export is not None:
            path = export(args.run_dir, args.export, args.out, args.phase)
            print(f"wrote {path} ({args.phase} step {args.export}): read it as data.train_files / data.val_files", file=sys.stderr)
        else:
            path = write_page(args.run_dir, args.out, max_samples=args.max_samples, steps=_steps(args.steps))
    except UserError as exc:
        print(f"rlcore traces: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0
