"""Resume with another number of steps under a schedule that spans the total (issue 56): a config change, said and
needing --resume-anyway; the continuation follows the new total from the resumed update on (docs/checkpoints.md).

References: the cosine formula written out here with math.cos (lr * (1 + cos(pi * k / T)) / 2 for update k of T, no
warmup), against the lr each step logged (actor/lr)."""

from __future__ import annotations

import math

import pytest
from rl_core.trainer.schedule_resume import schedule_changes

from tests.reliability.runs import cli, make_run, read_metrics, set_config

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
LR = 0.001


def cosine(k: int, total: int) -> float:
    return LR * 0.5 * (1 + math.cos(math.pi * min(1.0, k / total)))


@pytest.fixture
def cosine_run(tmp_path):
    pytest.importorskip("rl_train_fsdp", reason="needs the rl-train-fsdp plugin (pip install -e plugins/train_fsdp)")
    cfg = make_run(tmp_path / "run")
    set_config(cfg, trainer__save_freq=1, trainer__total_training_steps=2, actor__optim__lr_scheduler="cosine", actor__optim__lr=LR)
    code, out, err = cli("train", str(cfg), "--no-progress")
    assert code == 0, out + err
    return cfg


@pytest.mark.slow
def test_more_steps_under_a_cosine_schedule_is_a_change_and_continues_over_the_new_total(cosine_run):
    cfg = cosine_run
    out_dir = cfg.parent / "out"
    code, out, err = cli("train", str(cfg), "--no-progress", "trainer.total_training_steps=4")
    assert code == 1 and "Traceback" not in err, out + err
    assert "trainer.total_training_steps: 2 -> 4" in err and "actor.optim's schedule (cosine decay over the total)" in err, err
    assert f"step 3's lr {cosine(2, 2):.3g} -> {cosine(2, 4):.3g}" in err and "--resume-anyway" in err, err
    assert len(read_metrics(out_dir)) == 2  # nothing ran
    code, out, err = cli("train", str(cfg), "--no-progress", "trainer.total_training_steps=4", "--resume-anyway")
    assert code == 0, out + err
    assert "trainer.total_training_steps: 2 -> 4" in out, out
    lrs = [r["actor/lr"] for r in read_metrics(out_dir)]
    # steps 1-2 under T=2, then update k (0-based) under T=4: the resumed updates are not replayed
    want = [cosine(0, 2), cosine(1, 2), cosine(2, 4), cosine(3, 4)]
    assert lrs == pytest.approx(want, rel=1e-6), (lrs, want)


def _cfg(total=4, epochs=1, **optim):
    return {"trainer": {"total_training_steps": total, "total_epochs": epochs}, "critic": {"enable": False},
            "actor": {"optim": {"lr": 1e-3, **optim}}}


def test_which_changes_of_the_total_move_the_schedule():
    assert schedule_changes(_cfg(4), _cfg(8)) == []  # constant lr, no warmup: more steps change nothing
    assert schedule_changes(_cfg(4, epochs=1, lr_scheduler="cosine"), _cfg(4, epochs=3, lr_scheduler="cosine")) == []
    (line,) = schedule_changes(_cfg(10, lr_warmup_steps_ratio=0.5), _cfg(20, lr_warmup_steps_ratio=0.5), resumed_step=4)
    # warmup of 5 steps over 10, of 10 over 20: update 4 at 5/5 -> 5/10 of lr
    assert line.startswith("trainer.total_training_steps: 10 -> 20") and "warmup of lr_warmup_steps_ratio=0.5" in line, line
    assert "step 5's lr 0.001 -> 0.0005" in line, line
    assert schedule_changes(_cfg(10, lr_warmup_steps=3, lr_warmup_steps_ratio=0.5), _cfg(20, lr_warmup_steps=3, lr_warmup_steps_ratio=0.5)) == []
    (line,) = schedule_changes(_cfg(None, epochs=1, lr_scheduler="linear"), _cfg(None, epochs=2, lr_scheduler="linear"))
    assert line.startswith("trainer.total_epochs: 1 -> 2") and "linear decay" in line, line
