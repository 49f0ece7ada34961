"""Reliability suite: prints the summary table of tests/reliability/tally.py after the run."""

from __future__ import annotations

from tests.reliability import tally


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not tally.counts():
        return
    terminalreporter.section("rl-core reliability")
    terminalreporter.write_line(tally.table())
    tally.maybe_dump()


import pytest  # noqa: E402

from tests.reliability.runs import cli, make_run, set_config  # noqa: E402


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory):
    """A tiny 2-step run with checkpoints after steps 1 and 2 (copy it with runs.copy_run before changing it)."""
    pytest.importorskip("rl_train_fsdp", reason="needs the rl-train-fsdp plugin (pip install -e plugins/train_fsdp)")
    root = tmp_path_factory.mktemp("finished") / "run"
    cfg = make_run(root)
    set_config(cfg, trainer__save_freq=1, trainer__max_ckpt_to_keep=None, trainer__total_training_steps=2)
    code, out, err = cli("train", str(cfg), "--no-progress")
    assert code == 0, out + err
    return root
