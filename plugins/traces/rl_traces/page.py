"""The traces page: one self-contained HTML file (inline script and style, no request leaves it) with the steps table
of every step and the samples of the steps chosen (all of them while they fit ``max_samples``), read one step at a time."""

from __future__ import annotations

import json
import math
from importlib import resources
from pathlib import Path
from typing import Any

from rl_traces.reader import Traces

#: the columns the page shows (the prompt messages and the data set's fields stay in the files)
PAGE_COLUMNS = ["group", "sample", "policy_version", "prompt", "response", "finish_reason", "truncated", "response_length", "reward",
                "reward_parts", "advantage", "logprob_gap", "turns", "tool_calls", "tool_errors", "tokens", "token_advantage",
                "token_gap", "token_trained"]


def _clean(v: Any) -> Any:
    if isinstance(v, float):
        return None if not math.isfinite(v) else round(v, 5)
    if isinstance(v, list):
        return [_clean(x) for x in v]
    return v


def choose_steps(counts: list[tuple[str, int, int]], max_samples: int, wanted: tuple[int, int] | None) -> set[tuple[str, int]]:
    """The (phase, step) whose samples go into the page: those in ``wanted`` (else all), evenly thinned to fit
    ``max_samples`` (the last step always in)."""
    pool = [c for c in counts if wanted is None or wanted[0] <= c[1] <= wanted[1]]
    total = sum(k for _, _, k in pool)
    if total <= max_samples:
        return {(p, s) for p, s, _ in pool}
    chosen: set[tuple[str, int]] = set()
    for phase in ("train", "val"):
        mine = [c for c in pool if c[0] == phase]
        if not mine:
            continue
        share = max_samples * sum(k for _, _, k in mine) / total
        stride = max(1, math.ceil(sum(k for _, _, k in mine) / max(share, 1)))
        picks = mine[::-1][::stride]  # from the last step back
        used = 0
        for p, s, k in picks:
            if used + k > share and used:
                break
            chosen.add((p, s))
            used += k
    return chosen


def page_data(run_dir: str | Path, *, max_samples: int = 10000, steps: tuple[int, int] | None = None) -> dict[str, Any]:
    traces = Traces(run_dir)
    data: dict[str, Any] = {"run": str(run_dir), "steps": {}, "samples": {}, "prompts": [], "scale": {}}
    counts = []
    for phase in ("train", "val"):
        data["steps"][phase] = rows = []
        for s in traces.steps(phase):
            info = traces.summary(phase, s)
            rows.append({k: info.get(k) for k in ("step", "samples", "kept", "groups", "reward_mean", "length_mean", "truncated",
                                                  "tool_calls", "tool_errors", "equal_reward_groups", "logprob_gap_mean")})
            counts.append((phase, s, int(info.get("kept") or 0)))
    chosen = choose_steps(counts, max_samples, steps)
    prompt_index: dict[str, int] = {}
    adv_max = gap_max = 0.0
    for phase in ("train", "val"):
        data["samples"][phase] = per_step = {}
        for step, table in traces.iter_steps(phase, sorted(s for p, s in chosen if p == phase), PAGE_COLUMNS):
            out = []
            for row in table.to_pylist():  # one step at a time
                row = {k: _clean(v) for k, v in row.items()}
                prompt = row.pop("prompt")
                row["p"] = prompt_index.setdefault(prompt, len(prompt_index))
                row["reward_parts"] = json.loads(row["reward_parts"] or "{}")
                row["turns"] = json.loads(row["turns"]) if row["turns"] else []
                adv_max = max(adv_max, max((abs(x) for x in row["token_advantage"] if x is not None), default=0.0))
                gap_max = max(gap_max, max((abs(x) for x in row["token_gap"] if x is not None), default=0.0))
                out.append(row)
            per_step[step] = out
    data["prompts"] = list(prompt_index)
    data["scale"] = {"advantage": adv_max or 1.0, "gap": gap_max or 1.0}
    n_steps = sum(len(v) for v in data["steps"].values())
    data["note"] = (f"{sum(len(v) for v in data['samples'].values())} of {n_steps} step files with their samples in this page"
                    + ("" if len(chosen) == len(counts) else f" (at most {max_samples} samples; --steps A:B / --max-samples choose)"))
    return data


def render(data: dict[str, Any]) -> str:
    template = resources.files("rl_traces").joinpath("page.html").read_text(encoding="utf-8")
    blob = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    blob = blob.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")  # nothing in it ends the script element
    title = str(data["run"]).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return template.replace("__TITLE__", title).replace("__DATA__", blob)


def write_page(run_dir: str | Path, out: str | Path | None = None, **kwargs: Any) -> Path:
    path = Path(out) if out is not None else Path(run_dir) / "traces.html"
    html = render(page_data(run_dir, **kwargs))
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(html, encoding="utf-8")
    tmp.replace(path)
    return path
