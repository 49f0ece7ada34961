"""`rlcore clean` (checkpoints out, results kept) on a finished tiny run (issue 56; rl-clean).

The run is quickstart-shaped: it validates at its last step (test_freq), saves a checkpoint each step and writes
hf_final. Reference: the files on disk.
"""

from __future__ import annotations

import os

import pytest

from tests.reliability.runs import cli

pytest.importorskip("rl_train_fsdp", reason="needs the rl-train-fsdp plugin (pip install -e plugins/train_fsdp)")
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.slow
def test_clean_removes_the_checkpoints_and_keeps_the_results(finished_run):
    _, run = finished_run
    ckpts = run / "checkpoints"
    size = sum(f.stat().st_size for f in ckpts.rglob("*") if f.is_file())
    assert size > 0 and len(list(ckpts.glob("global_step_*"))) == 2
    kept = {p: p.stat().st_size for p in run.rglob("*") if p.is_file() and ckpts not in p.parents}
    assert run / "metrics.jsonl" in kept and run / "config.yaml" in kept and any(run / "hf_final" in p.parents for p in kept)
    code, out, _ = cli("clean", str(run), "--dry-run")
    assert code == 0 and f"would remove {ckpts}" in out and ckpts.is_dir()
    # a run still writing into the folder holds its lock: clean refuses
    from rl_core.trainer.outputs import output_lock

    with output_lock(str(run)):
        pid = os.fork()
        if pid == 0:  # flock is per open file: another process, as a running trainer would be
            code, _, err = cli("clean", str(run))
            os._exit(0 if code == 1 and "in use by another run" in err else 1)
        _, status = os.waitpid(pid, 0)
    assert status == 0 and ckpts.is_dir()
    code, out, _ = cli("clean", str(run))
    assert code == 0, out
    assert not ckpts.exists()
    assert f"{size / 1e6:.1f} MB" in out or f"{size / 1e9:.2f} GB" in out, out
    assert {p: p.stat().st_size for p in run.rglob("*") if p.is_file() and p.name != ".rlcore.lock"} == {
        p: n for p, n in kept.items() if p.name != ".rlcore.lock"}
    code, out, _ = cli("clean", str(run))
    assert code == 0 and "no checkpoints to remove" in out


def test_the_command_is_rl_cleans_card_and_names_its_install_when_missing(monkeypatch, capsys):
    from rl_core.cli.main import main
    from rl_core.plugins import Registry, get_registry

    assert get_registry().cards["command"]["clean"].provider.distribution == "rl-clean"
    monkeypatch.setattr("rl_core.plugins.get_registry", lambda **kw: Registry())  # rl-clean not installed
    assert main(["clean", "outputs/run", "--dry-run"]) == 1
    err = capsys.readouterr().err
    assert "`rlcore clean` comes with the distribution rl-clean, which is not installed: pip install rl-clean" in err
    assert "Traceback" not in err
