"""Rollout engines that die or hang are replaced (issue 47): killed, rebuilt, given the current weights (verified),
the call's requests again; too many failures in a window stop the run with a clear error."""

from __future__ import annotations

import threading
import time

import pytest
from rl_core.problems import UserError
from rl_core.rollout.supervisor import EngineFailed, EngineHung, EngineSupervisor, call_with_deadline

from tests.reliability import tally
from tests.reliability.runs import cli, make_run, read_metrics, set_config


class _Engine:
    """Answers ``len(batch)``; ``faults`` says what each call does: 'ok', 'die', 'hang', 'user'."""

    built = 0

    def __init__(self, faults: list[str]) -> None:
        _Engine.built += 1
        self.id, self.faults, self.killed, self.weights = _Engine.built, faults, False, None

    def generate(self, batch, params):
        fault = self.faults.pop(0) if self.faults else "ok"
        if fault == "die":
            raise RuntimeError("engine core process died (EngineDeadError)")
        if fault == "hang":
            time.sleep(5)
        if fault == "user":
            raise UserError("rollout.stop: not a list")
        return (self.id, len(batch), self.weights)

    def kill(self):
        self.killed = True


def _supervisor(faults, *, restarts=2, window=3600.0, timeout=None, clock=time.monotonic, resync=True):
    notes: list[str] = []
    first = _Engine(faults)

    def load(engine):
        engine.weights = "current"

    sup = EngineSupervisor(first, build=lambda: _Engine(faults), resync=load if resync else None, name="fake", rank=0,
                           timeout_s=timeout, restarts=restarts, window_s=window, clock=clock, log=notes.append)
    return sup, first, notes


def test_a_dead_engine_is_replaced_with_the_current_weights_and_the_call_repeated():
    sup, first, notes = _supervisor(["die"])
    engine_id, n, weights = sup.generate([1, 2, 3], None)
    assert first.killed and engine_id == first.id + 1 and n == 3 and weights == "current"
    assert len(notes) == 1 and "failed (RuntimeError: engine core process died" in notes[0] and "3 requests submitted again" in notes[0]


def test_a_hung_engine_is_killed_and_replaced():
    sup, first, notes = _supervisor(["hang"], timeout=0.5)
    start = time.monotonic()
    engine_id, _, weights = sup.generate([1], None)
    assert time.monotonic() - start < 4 and first.killed and engine_id == first.id + 1 and weights == "current"
    assert "hung (EngineHung: no answer within rollout.engine_timeout_s=0.5 s)" in notes[0]


def test_too_many_failures_in_the_window_stop_with_a_clear_error():
    sup, _, notes = _supervisor(["die", "die", "die"], restarts=2)
    with pytest.raises(EngineFailed, match=r"failed 3 times within rollout.engine_restart_window_s=3600 s \(rollout.engine_restarts=2\)"):
        sup.generate([1], None)
    assert len(notes) == 2


def test_failures_outside_the_window_do_not_count():
    now = [0.0]
    sup, _, notes = _supervisor(["die", "ok", "die", "ok", "die"], restarts=1, window=10.0, clock=lambda: now[0])
    for _ in range(3):
        sup.generate([1], None)
        now[0] += 11.0
    assert len(notes) == 3


def test_a_user_error_is_not_an_engine_failure():
    sup, first, notes = _supervisor(["user"])
    with pytest.raises(UserError):
        sup.generate([1], None)
    assert not first.killed and not notes


def test_a_split_pool_engine_is_not_rebuilt_without_its_weights():
    sup, _, _ = _supervisor(["die"], resync=False)
    with pytest.raises(EngineFailed, match="rollout pool of its own"):
        sup.generate([1], None)


def test_call_with_deadline_passes_results_and_errors():
    assert call_with_deadline(lambda: 7, 1.0) == 7
    with pytest.raises(ValueError):
        call_with_deadline(lambda: (_ for _ in ()).throw(ValueError("x")), 1.0)
    with pytest.raises(EngineHung):
        call_with_deadline(lambda: threading.Event().wait(3), 0.2)


@pytest.mark.dist
def test_a_run_whose_engine_dies_twice_and_hangs_once_finishes_every_step(tmp_path, monkeypatch):
    """A real run (hf engine, tiny model): the engine dies at steps 2 and 4 and hangs at step 6; all 8 steps finish
    with the same metrics rows, one note per recovery, and the replacement engines sampled with the trained weights
    (the verified sync names a mismatch otherwise)."""
    from rl_core.rollout.hf import HFRolloutEngine

    calls = {"n": 0}
    real = HFRolloutEngine.generate

    def flaky(self, batch, params):
        calls["n"] += 1
        if calls["n"] in (2, 4):
            raise RuntimeError(f"engine process killed (call {calls['n']})")
        if calls["n"] == 6:
            time.sleep(8)  # longer than rollout.engine_timeout_s: counted as hung, the thread is abandoned
        return real(self, batch, params)

    monkeypatch.setattr(HFRolloutEngine, "generate", flaky)
    cfg = make_run(tmp_path)
    set_config(cfg, trainer__total_training_steps=8, rollout__engine_timeout_s=4.0, rollout__engine_restarts=3)
    code, out, err = cli("train", str(cfg), "--no-progress")
    rows = read_metrics(tmp_path / "out")
    notes = [line for line in out.splitlines() if "rollout engine on rank 0" in line and "replaced" in line]
    ok = code == 0 and [r["step"] for r in rows] == list(range(1, 9)) and len(notes) == 3 and "hung" in notes[2]
    tally.record("engines", "hf engine died twice and hung once in an 8-step run", ok)
    assert ok, (code, notes, out[-2000:], err[-2000:])
