"""`rlcore eval` (validation only) on a finished tiny run (issue 56; rl-eval).

The run is quickstart-shaped: it validates at its last step (test_freq), saves a checkpoint each step and writes
hf_final. Its validation data holds two data sources. References: the run's own last validation (the trained weights in
memory, logged in metrics.jsonl) for the overall scores of ``rlcore eval`` on hf_final read back from disk; an eval of
one source's rows alone (``--data``) for that source's line of the full eval.
"""

from __future__ import annotations

import json

import pytest

from tests.e2e.helpers import read_metrics
from tests.reliability.runs import cli

pytest.importorskip("rl_train_fsdp", reason="needs the rl-train-fsdp plugin (pip install -e plugins/train_fsdp)")
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.slow
def test_eval_scores_the_final_model_per_data_source(finished_run):
    tmp, run = finished_run
    logged = read_metrics(run)[-1]
    assert logged["step"] == 2 and "val/reward_mean" in logged
    before = {p for p in run.rglob("*")}
    code, out, err = cli("eval", str(run))
    assert code == 0, out + err
    scores = json.loads((run / "eval" / "scores.json").read_text())
    # the same greedy validation as the loop's, of the same weights (read back from hf_final)
    assert scores["val/samples"] == logged["val/samples"] == 8
    assert scores["val/reward_mean"] == pytest.approx(logged["val/reward_mean"], abs=1e-6)
    assert scores["val/accuracy"] == pytest.approx(logged["val/accuracy"], abs=1e-6)
    assert scores["model"] == str(run / "hf_final")
    assert scores["val/source/tiny/digits/samples"] == scores["val/source/tiny/other/samples"] == 4
    mean = (scores["val/source/tiny/digits/reward_mean"] + scores["val/source/tiny/other/reward_mean"]) / 2
    assert mean == pytest.approx(scores["val/reward_mean"], abs=1e-6)
    assert "tiny/digits: accuracy=" in out and "tiny/other: accuracy=" in out and "all: accuracy=" in out
    # nothing large written: only the scores file is new in the run folder
    new = {p for p in run.rglob("*")} - before
    assert new == {run / "eval", run / "eval" / "scores.json"}, new
    assert (run / "eval" / "scores.json").stat().st_size < 10_000
    # any data file: one source's rows alone give that source's line of the full eval
    code, out, err = cli("eval", str(run), "--data", str(tmp / "other.jsonl"))
    assert code == 0, out + err
    alone = json.loads((run / "eval" / "other.json").read_text())
    assert alone["val/samples"] == 4
    assert alone["val/reward_mean"] == pytest.approx(scores["val/source/tiny/other/reward_mean"], abs=1e-6)


@pytest.mark.slow
def test_eval_names_what_is_missing(finished_run, tmp_path):
    tmp, run = finished_run
    code, _, err = cli("eval", str(tmp / "model"))
    assert code == 1 and "is a model: name the config" in err
    code, _, err = cli("eval", str(tmp_path))
    assert code == 1 and "neither a run folder" in err
    (tmp_path / "config.yaml").write_text("{}\n")
    code, _, err = cli("eval", str(tmp_path))
    assert code == 1 and "has no final model" in err


def test_the_command_is_rl_evals_card_and_names_its_install_when_missing(monkeypatch, capsys):
    from rl_core.cli.main import main
    from rl_core.plugins import Registry, get_registry

    assert get_registry().cards["command"]["eval"].provider.distribution == "rl-eval"
    monkeypatch.setattr("rl_core.plugins.get_registry", lambda **kw: Registry())  # rl-eval not installed
    assert main(["eval", "outputs/run", "--data", "x.jsonl"]) == 1
    err = capsys.readouterr().err
    assert "`rlcore eval` comes with the distribution rl-eval, which is not installed: pip install rl-eval" in err
    assert "Traceback" not in err
