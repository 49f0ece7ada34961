"""rl-traces on a trace folder of a million samples: the page and an export read it one step at a time.

Builds STEPS step files of ROWS samples each (one synthetic step of quickstart-shaped rows written through the
writer, then copied to every step with its step number and summary), then times ``page_data`` (the steps table
from the footers + the samples of the steps that fit --max-samples) and an export, with the process's peak RSS
and pyarrow's peak allocation. Results: $OUT/traces_1m.json (default bench/results/traces/).

    python bench/traces_1m.py [STEPS] [ROWS]        # default 1000 x 1000 = 1M samples
"""

from __future__ import annotations

import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from rl_core_testing.tiny_model import build_tokenizer
from rl_traces.command import export
from rl_traces.options import TracesOptions
from rl_traces.page import page_data, render
from rl_traces.synthetic import synthetic_rollouts
from rl_traces.writer import META_KEY, TraceWriter, step_file


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    rows = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    out = Path(os.environ.get("OUT", Path(__file__).parent / "results" / "traces"))
    out.mkdir(parents=True, exist_ok=True)
    run = Path(tempfile.mkdtemp(prefix="traces-1m-"))
    tok = build_tokenizer()
    w = TraceWriter(run / "traces", TracesOptions(budget_mb=1e9))
    w.on_start(0)
    n = 8
    w.on_rollouts(synthetic_rollouts(1, tok, groups=rows // n, n=n))
    w.on_step_end(1)
    base = pq.read_table(step_file(run / "traces", "train", 1))
    meta = json.loads(base.schema.metadata[META_KEY])
    t0 = time.perf_counter()
    for s in range(2, steps + 1):
        table = base.set_column(0, "step", pa.array([s] * base.num_rows, pa.int32()))
        table = table.replace_schema_metadata({META_KEY: json.dumps({**meta, "step": s}).encode()})
        pq.write_table(table, step_file(run / "traces", "train", s), compression="zstd")
    build_s = time.perf_counter() - t0
    folder = sum(p.stat().st_size for p in (run / "traces").rglob("*.parquet"))
    rss0 = rss_mb()
    pool = pa.default_memory_pool()
    t0 = time.perf_counter()
    data = page_data(run, max_samples=10000)
    html = render(data)
    page_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    exported = export(run, steps // 2, run / "export.jsonl")
    export_s = time.perf_counter() - t0
    result = {
        "samples": steps * base.num_rows, "steps": steps, "rows_per_step": base.num_rows,
        "trace_folder_mb": round(folder / 2**20, 1), "build_s": round(build_s, 1),
        "page_s": round(page_s, 2), "page_html_mb": round(len(html.encode()) / 2**20, 2),
        "page_samples": sum(len(v) for v in data["samples"]["train"].values()), "page_steps_read": len(data["samples"]["train"]),
        "export_s": round(export_s, 2), "export_rows": len(exported.read_text().splitlines()),
        "peak_rss_mb_before_reading": round(rss0, 1), "peak_rss_mb_after": round(rss_mb(), 1),
        "pyarrow_peak_mb": round(pool.max_memory() / 2**20, 1),
        "python": sys.version.split()[0], "pyarrow": pa.__version__, "cpus": os.cpu_count(),
    }
    (out / "traces_1m.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
