"""`rlcore plot`: PNGs from a synthetic metrics.jsonl; clear errors on missing or empty files."""

import json
import math

from rl_core.cli.main import main
from rl_tracking.plot import group_members, load_series


def _write_metrics(run_dir, steps=20):
    rows = []
    for s in range(1, steps + 1):
        row = {
            "step": s,
            "time": 1000.0 + s,
            "reward/mean": s / steps,
            "reward/std": 0.1,
            "response_length/mean": 20 - s / 2,
            "actor/entropy": 1.0 / s,
            "actor/grad_norm": math.sqrt(s),
            "actor/kl_loss": None,  # NaN written as null
            "timing_s/step": 9.0,
            "timing_s/gen": 6.0,
            "perf/throughput_tokens_per_s": 300.0,
        }
        if s % 5 == 0:
            row.update({"val/accuracy": s / 40, "val/reward_mean": s / 40, "timing_s/validate": 3.0})
        rows.append(row)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_plot_writes_one_png_per_group_and_an_overview(tmp_path, capsys):
    _write_metrics(tmp_path)
    out = tmp_path / "pngs"
    assert main(["plot", str(tmp_path), "--out", str(out)]) == 0
    names = sorted(p.name for p in out.iterdir())
    # no lr metric and only nulls for KL: those groups are left out
    assert names == ["entropy.png", "grad_norm.png", "overview.png", "response_length.png", "reward.png", "step_time.png", "validation.png"]
    for p in out.iterdir():
        data = p.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    printed = capsys.readouterr().out.split()
    assert printed[0] == str(out / "overview.png") and len(printed) == 7
    # default output folder
    assert main(["plot", str(tmp_path)]) == 0
    assert (tmp_path / "plots" / "overview.png").is_file()


def test_series_and_group_members(tmp_path):
    _write_metrics(tmp_path, steps=10)
    series = load_series(str(tmp_path / "metrics.jsonl"))
    assert "actor/kl_loss" not in series  # all null
    assert series["val/accuracy"] == ([5, 10], [0.125, 0.25])
    names = sorted(series)
    assert group_members(names, "reward") == ["reward/mean", "reward/std"]
    assert group_members(names, "validation") == ["val/accuracy", "val/reward_mean"]
    assert group_members(names, "step_time") == ["timing_s/step", "timing_s/gen", "timing_s/validate"]


def test_plot_errors_name_the_file(tmp_path, capsys):
    assert main(["plot", str(tmp_path)]) == 1
    assert f"{tmp_path}/metrics.jsonl does not exist" in capsys.readouterr().err
    (tmp_path / "metrics.jsonl").write_text("")
    assert main(["plot", str(tmp_path)]) == 1
    assert "has no metric rows yet" in capsys.readouterr().err
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "foo": 2.0}) + "\n")
    assert main(["plot", str(tmp_path)]) == 1
    assert "none of the metrics rlcore plot knows" in capsys.readouterr().err


def test_flat_zero_metrics_and_their_panels_are_left_out_and_legends_sit_outside(tmp_path):
    """No KL term: KL 0 at every step draws no KL panel; reward errors that never happened draw no line (issue 31)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from rl_tracking.plot import _draw, informative, plot_run

    rows = [{"step": s, "reward/mean": s / 10, "reward/std": 0.2 + s / 100, "reward/errors": 0.0, "reward/all_failed": 0.0,
             "actor/kl_loss": 0.0, "actor/entropy": 1.0 / s} for s in range(1, 11)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    series = load_series(str(tmp_path / "metrics.jsonl"))
    assert informative(series) == ["actor/entropy", "reward/mean", "reward/std"]
    names = sorted(p.name for p in plot_run(str(tmp_path)))
    assert "kl.png" not in names and "reward.png" in names
    fig, ax = plt.subplots(figsize=(9, 4))
    _draw(ax, series, ["reward/mean", "reward/std"], "reward")
    fig.canvas.draw()
    legend, axes_box = ax.get_legend().get_window_extent(), ax.get_window_extent()
    assert legend.x0 >= axes_box.x1  # beside the data, not over it
    plt.close(fig)
