"""`rlcore plot RUN_DIR [--out DIR]` (rl-tracking's command): PNG curves of a run's metrics.jsonl.

One PNG per metric group the run logged (:data:`rl_core.trainer.tracking.METRIC_GROUPS`), plus ``overview.png`` with
each group's key metric. A metric that is 0 at every step (KL without a KL term) is left out, and so is a group left
with nothing. Legends sit beside the axes, never over the curves.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

from rl_core.problems import UserError
from rl_core.trainer.outputs import write_failure
from rl_core.trainer.tracking import (
    METRIC_GROUPS,
    METRICS_FILE,
    find_key_metric,
    read_jsonl_metrics,
)

MAX_CURVES = 8
# a group's own PNG may show more than its key metrics: the whole timing breakdown, for instance
GROUP_EXTRA = {"step_time": r"^timing_s/"}
TITLES = {
    "reward": "training reward",
    "validation": "validation",
    "response_length": "response length (tokens)",
    "kl": "KL",
    "entropy": "entropy",
    "grad_norm": "gradient norm",
    "lr": "learning rate",
    "step_time": "time per step (s)",
    "mismatch": "rollout vs trainer: max |delta log-prob|",
}


class PlotError(UserError, ValueError):
    """A run directory whose metrics cannot be plotted."""


def add_parser(sub) -> None:
    p = sub.add_parser("plot", help="draw PNG curves of a run's metrics (RUN_DIR/metrics.jsonl)")
    p.add_argument("run_dir", metavar="RUN_DIR", help="the run's output_dir (holds metrics.jsonl)")
    p.add_argument("--out", metavar="DIR", help="where to write the PNGs (default RUN_DIR/plots)")
    p.set_defaults(func=run)


def load_series(path: str) -> dict[str, tuple[list[int], list[float]]]:
    """``{metric: (steps, values)}`` from a metrics.jsonl, skipping nulls; the last row of a step wins."""
    rows = read_jsonl_metrics(path)
    by_step: dict[int, dict[str, Any]] = {}
    for row in rows:
        by_step.setdefault(int(row["step"]), {}).update(row)
    series: dict[str, tuple[list[int], list[float]]] = {}
    for step in sorted(by_step):
        for k, v in by_step[step].items():
            if k in ("step", "time") or not isinstance(v, (int, float)) or isinstance(v, bool):
                continue
            xs, ys = series.setdefault(k, ([], []))
            xs.append(step)
            ys.append(float(v))
    return series


def informative(series: dict[str, tuple[list[int], list[float]]]) -> list[str]:
    """Names of the metrics that are not 0 at every step."""
    return sorted(n for n, (_, ys) in series.items() if any(y != 0 for y in ys))


def group_members(names: list[str], group: str) -> list[str]:
    """The metrics of ``group`` to draw, key metric first, at most :data:`MAX_CURVES`."""
    pattern = re.compile(GROUP_EXTRA.get(group, METRIC_GROUPS[group][0]))
    hits = [n for n in names if pattern.search(n) or re.search(METRIC_GROUPS[group][0], n)]
    key = find_key_metric(names, group)
    ordered = ([key] if key else []) + sorted(n for n in hits if n != key)
    return ordered[:MAX_CURVES]


def _draw(ax, series, names: list[str], title: str) -> None:
    for name in names:
        xs, ys = series[name]
        ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, markersize=3, label=name)
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
    if len(names) > 1:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, frameon=False)


def plot_run(run_dir: str, out_dir: str | None = None) -> list[Path]:
    """Write the PNGs for ``run_dir``; returns their paths, overview first."""
    path = os.path.join(run_dir, METRICS_FILE)
    if not os.path.isfile(path):
        raise PlotError(f"{path} does not exist; RUN_DIR must be a run's trainer.output_dir with the jsonl logger on")
    series = load_series(path)
    if not series:
        raise PlotError(f"{path} has no metric rows yet; plot again after the first training step")
    names = informative(series)
    groups = {g: group_members(names, g) for g in METRIC_GROUPS}
    groups = {g: members for g, members in groups.items() if members}
    if not groups:
        raise PlotError(f"{path} has none of the metrics rlcore plot knows ({', '.join(METRIC_GROUPS)}); it has {names[:10]}")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir or os.path.join(run_dir, "plots"))
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PlotError(f"cannot create {out}: {write_failure(exc, str(out))}") from None
    written = []

    cols = min(3, len(groups))
    rows = -(-len(groups) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.4 * rows), squeeze=False)
    for ax, (group, members) in zip(axes.flat, groups.items()):
        _draw(ax, series, [members[0]], f"{TITLES[group]}: {members[0]}")
    for ax in list(axes.flat)[len(groups):]:
        ax.set_visible(False)
    fig.suptitle(os.path.basename(os.path.abspath(run_dir)))
    fig.tight_layout()
    _save(fig, out / "overview.png")
    written.append(out / "overview.png")

    for group, members in groups.items():
        fig, ax = plt.subplots(figsize=(9 if len(members) > 1 else 7, 4))
        _draw(ax, series, members, TITLES[group])
        fig.tight_layout()
        _save(fig, out / f"{group}.png")
        written.append(out / f"{group}.png")
    return written


def _save(fig, path: Path) -> None:
    """``fig`` as a PNG at ``path``, written beside it and renamed: a full disk leaves no broken image, and says so."""
    import matplotlib.pyplot as plt

    tmp = path.with_name(f".{path.name}.partial")
    try:
        fig.savefig(tmp, dpi=100, format="png", bbox_inches="tight")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise PlotError(f"cannot write {path}: {write_failure(exc, str(path))}") from None
    finally:
        plt.close(fig)


def run(args) -> int:
    try:
        written = plot_run(args.run_dir, args.out)
    except ValueError as e:  # a malformed metrics.jsonl (read_jsonl_metrics); PlotError is a UserError already
        if isinstance(e, PlotError):
            raise
        raise PlotError(str(e)) from None
    for p in written:
        print(p)
    print(f"{len(written)} plot(s) in {written[0].parent}", file=sys.stderr)
    return 0
