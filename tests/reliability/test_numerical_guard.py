"""NaN / inf stop the step, named, and nothing is saved from them (issue 11, item 3)."""

from __future__ import annotations

import math

import pytest
import torch
from rl_core.checkpoints.store import CheckpointManager

from tests.reliability import tally
from tests.reliability.runs import cli, make_run, read_metrics, set_config

pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
]
pytest.importorskip("rl_train_fsdp", reason="needs the rl-train-fsdp plugin (pip install -e plugins/train_fsdp)")

BAD_STEP = 2


@pytest.fixture
def at_step(monkeypatch):
    """``at_step()`` is the trainer step being run (the injections fire at BAD_STEP)."""
    from rl_core.trainer.loop import Trainer

    current = {"step": 0}
    original = Trainer.train_step

    def train_step(self, prompts, step):
        current["step"] = step
        return original(self, prompts, step)

    monkeypatch.setattr(Trainer, "train_step", train_step)
    return lambda: current["step"]


def _poison(t: torch.Tensor, value: float = math.nan) -> torch.Tensor:
    t = t.clone()
    t.view(-1)[0] = value
    return t


def _inject_loss(monkeypatch, at_step):
    import rl_core.algorithms.actor_loss as actor_loss

    original = actor_loss.compute_actor_loss

    def compute_actor_loss(**kw):
        loss, metrics = original(**kw)
        return (loss * math.nan if at_step() == BAD_STEP else loss), metrics

    monkeypatch.setattr(actor_loss, "compute_actor_loss", compute_actor_loss)


def _inject_rewards(monkeypatch, at_step):
    from rl_core.trainer.loop import Trainer

    original = Trainer.score_rows  # the training path's scoring (validation and the greedy baseline call it too)

    def score_rows(self, batch, *, train=True):
        scores, metrics, raw, extras = original(self, batch, train=train)
        return (_poison(scores, math.inf) if at_step() == BAD_STEP else scores), metrics, raw, extras

    monkeypatch.setattr(Trainer, "score_rows", score_rows)


def _inject_log_probs(monkeypatch, at_step):
    from rl_core.placement.worker import HybridWorker

    original = HybridWorker.compute_log_prob

    def compute_log_prob(self, batch, temperature, with_entropy):
        out = original(self, batch, temperature, with_entropy)
        if at_step() == BAD_STEP:
            out["log_probs"] = _poison(out["log_probs"])
        return out

    monkeypatch.setattr(HybridWorker, "compute_log_prob", compute_log_prob)


CASES = {
    # name: (injection, extra overrides, words the error must contain)
    "loss": (_inject_loss, [], ["non-finite loss", "'update_actor'", "role 'actor'", "rank 0"]),
    "rewards": (_inject_rewards, [], ["non-finite reward scores", "'reward'"]),
    "log-probs": (_inject_log_probs, ["actor.recompute_old_log_prob=true"], ["non-finite log-probs", "'old_log_prob'", "role 'actor'", "rank 0"]),
    # a huge lr: finite weights after step 1, inf after step 2 (inf itself is rejected by the config check)
    "weights (lr 1e37)": (None, ["actor.optim.lr=1e37"], ["non-finite weight", "'update_actor'", "role 'actor'", "rank 0"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_non_finite_values_stop_the_step(tmp_path, monkeypatch, at_step, case):
    inject, overrides, words = CASES[case]
    if inject is not None:
        inject(monkeypatch, at_step)
    cfg = make_run(tmp_path)
    set_config(cfg, trainer__save_freq=1, trainer__total_training_steps=3)
    code, out, err = cli("train", str(cfg), "--no-progress", *overrides)
    out_dir = tmp_path / "out"
    ckpt = CheckpointManager(str(out_dir / "checkpoints"))
    complete = [s for s, _ in ckpt.complete()]
    failed_step = BAD_STEP
    ok = (
        code == 1
        and all(w in err for w in words)
        and f"step {failed_step}:" in err
        and "Traceback" not in err
        and not (out_dir / "hf_final").exists()
        and complete == list(range(1, failed_step))
        and all(ckpt.verify(ckpt.step_dir(s)) is None for s in complete)
    )
    tally.record("nan", f"NaN/inf in {case}", ok)
    assert code == 1, out + err
    for w in words:
        assert w in err, (w, err)
    assert f"step {failed_step}:" in err and "Traceback" not in err, err
    assert not (out_dir / "hf_final").exists(), "hf_final must not be written from a step with non-finite values"
    assert complete == list(range(1, failed_step)), complete
    for s in complete:
        assert ckpt.verify(ckpt.step_dir(s)) is None
    if case == "loss":
        # the last checkpoint is usable: without the injection the rerun resumes from it and finishes
        monkeypatch.undo()
        code, out, err = cli("train", str(cfg), "--no-progress")
        assert code == 0 and "(step 1)" in out, out + err
        assert [r["step"] for r in read_metrics(out_dir)] == [1, 2, 3]
        assert (out_dir / "hf_final").is_dir()


def test_scorer_returning_nan_is_a_clear_reward_error(tmp_path):
    cfg = make_run(tmp_path)
    (tmp_path / "reward.py").write_text("def compute_score(**kw):\n    return float('nan')\n")
    code, out, err = cli("train", str(cfg), "--no-progress")
    ok = code == 1 and "non-finite score" in err and "sample" in err and "Traceback" not in err
    tally.record("nan", "NaN returned by the reward function", ok)
    assert ok, out + err
