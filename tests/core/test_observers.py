"""Step observers (rl_core.observers): the plan loads every installed ObserverCard and checks trainer.observers;
the trainer's Observers hands each method on and drops an observer that raises, training going on."""

from __future__ import annotations

import logging

import attrs
import pytest
from rl_core import hookimpl
from rl_core.card_options import Options
from rl_core.cards import ObserverCard, Provider
from rl_core.config.schema import RunConfig, TrainerConfig
from rl_core.observers import Observers, observer_plan
from rl_core.plugins import get_registry
from rl_core.problems import UserError


@attrs.frozen(kw_only=True)
class RecOptions(Options):
    level: int = 1


CALLS: list = []


class Recorder:
    def __init__(self, options):
        self.options = options

    def on_start(self, step):
        CALLS.append(("start", step, self.options))

    def on_step_end(self, step):
        CALLS.append(("end", step))


class Broken:
    def on_start(self, step):
        raise OSError(28, "No space left on device")

    def on_step_end(self, step):
        CALLS.append(("broken end", step))


def make_recorder(config, options, output_dir):
    return Recorder(options)


def make_broken(config, options, output_dir):
    return Broken()


def make_off(config, options, output_dir):
    return None


class _Plugin:
    @staticmethod
    @hookimpl
    def rl_core_register_observers(register):
        register(ObserverCard(name="rec", factory=make_recorder, options=RecOptions))
        register(ObserverCard(name="broken", factory=make_broken))
        register(ObserverCard(name="off", factory=make_off))


@pytest.fixture
def registry():
    return get_registry(extra=[(_Plugin, Provider(distribution="test-observers"))])


def _config(observers):
    return RunConfig(trainer=TrainerConfig(observers=observers))


def test_plan_checks_the_options_and_names(registry):
    planned, problems = observer_plan(_config({"rec": {"level": 2}}), registry)
    assert {c.name for c, _ in planned} >= {"rec", "broken", "off"} and not [p for p in problems if p.severity == "error"]
    _, problems = observer_plan(_config({"rec": {"levl": 2}, "recc": {}}), registry)
    text = "\n".join(p.render() for p in problems)
    assert "trainer.observers.rec.levl" in text and "did you mean 'level'" in text
    assert "trainer.observers.recc: is no installed observer (did you mean 'rec'?)" in text


def test_observers_are_called_and_a_failing_one_is_dropped(registry, caplog):
    planned, _ = observer_plan(_config({"rec": {"level": 2}}), registry)
    mine = tuple((c, f) for c, f in planned if c.name in ("rec", "broken", "off"))
    obs = Observers(mine, _config({"rec": {"level": 2}}), "/nonexistent")
    assert sorted(c.name for c, _ in obs.active) == ["broken", "rec"]  # "off" returned None
    CALLS.clear()
    with caplog.at_level(logging.WARNING):
        obs.call("on_start", 3)
        obs.call("on_rollouts", object())  # no observer has it: nothing happens
        obs.call("on_step_end", 4)
    assert CALLS == [("start", 3, {"level": 2}), ("end", 4)]  # the broken one is off after its error
    assert "'broken' (test-observers) raised in on_start" in caplog.text and "training goes on" in caplog.text


def test_a_factory_that_fails_names_the_observer(registry):
    card = ObserverCard(name="bad", factory=make_recorder, provider=Provider(distribution="x"))

    def boom(config, options, output_dir):
        raise ValueError("nope")

    with pytest.raises(UserError, match="the observer 'bad' \\(x\\) failed to start: ValueError: nope"):
        Observers(((card, boom),), _config({}), "/nonexistent")
