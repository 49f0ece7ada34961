"""The rollout pool's contract in core (rl_core.placement.rollout_pool), independent of the package that implements
it: a RolloutPoolCard resolved once into the Plan, its worker extension's methods extending the workers' method
table (ExtensionMethod), and the problems of a config that asks for a pool no package or several provide."""

from __future__ import annotations

import pytest
from rl_core import hookimpl
from rl_core.cards import Provider, RolloutPoolCard
from rl_core.config.load import load_config
from rl_core.placement.contract import ExtensionMethod, WorkerMethod, dispatch
from rl_core.plan.resolver import _rollout_pool
from rl_core.plugins import Registry, get_registry


class _Extension:
    def __init__(self, worker):
        self.worker = worker

    def ping(self, x):
        return ("ping", self.worker.name, x)

    def generate(self, *args):  # a name of the table: never reached through the extension
        raise AssertionError("the table's generate is the worker's")


class _Worker:
    name = "w0"
    extension_methods = frozenset({"ping", "generate"})

    def __init__(self):
        self.extension = _Extension(self)

    def generate(self, batch, params):
        return ("worker generate", batch)


def test_an_extension_method_runs_on_the_worker_s_extension_and_the_table_keeps_its_names():
    worker = _Worker()
    assert dispatch(worker, "ping", (3,)) == ("ping", "w0", 3)  # as a spawned rank gets it: the name
    assert dispatch(worker, ExtensionMethod("ping"), (4,)) == ("ping", "w0", 4)  # in process: the object
    assert dispatch(worker, "generate", ("b", None)) == ("worker generate", "b")
    assert WorkerMethod.named(ExtensionMethod("ping")) == ExtensionMethod("ping")
    with pytest.raises(ValueError, match=r"unknown worker method 'pong'.*ping"):
        dispatch(worker, "pong", ())
    with pytest.raises(ValueError, match="unknown worker method 'ping'"):  # a worker without the extension
        WorkerMethod.named("ping")


def _make_schedule(handle):
    return ("schedule", handle)


class _Plugin:
    @staticmethod
    @hookimpl
    def rl_core_register_rollout_pools(register):
        register(RolloutPoolCard(name="mine", factory=_make_schedule, worker=_Extension, methods=("ping",)))


def _config(*overrides):
    return load_config(None, ["trainer.device=cpu", *overrides])


def test_the_plan_loads_the_one_installed_card_when_the_rollout_has_a_pool_of_its_own():
    registry = get_registry(extra=[(_Plugin, Provider(distribution="test-rollout-pool"))])
    mine = Registry(cards={**registry.cards, "rollout_pool": {"mine": registry.cards["rollout_pool"]["mine"]}})
    problems = []
    card, schedule_fn, worker_fn = _rollout_pool(_config("rollout.n_gpus_per_node=1"), mine, problems)
    assert not problems and card.name == "mine" and schedule_fn is _make_schedule and worker_fn is _Extension
    assert card.methods == frozenset({"ping"})
    assert _rollout_pool(_config(), mine, problems) == (None, None, None) and not problems  # the hybrid engine: no pool
    # async.* without a pool: no card in the Plan (the package's own check names what is missing)
    assert _rollout_pool(_config("async.max_staleness=1"), mine, problems) == (None, None, None) and not problems


@pytest.mark.parametrize("installed", [0, 2])
def test_no_card_or_several_is_a_problem_naming_the_key(installed):
    base = get_registry(extra=[(_Plugin, Provider(distribution="test-rollout-pool"))])
    cards = {f"c{i}": RolloutPoolCard(name=f"c{i}", factory=_make_schedule, worker=_Extension, provider=Provider(distribution=f"d{i}"))
             for i in range(installed)}
    registry = Registry(cards={**base.cards, "rollout_pool": cards})
    for key in ("rollout.n_gpus_per_node", "async.on_stale"):
        problems = []
        value = "1" if key == "rollout.n_gpus_per_node" else "wait"
        assert _rollout_pool(_config(f"{key}={value}"), registry, problems) == (None, None, None)
        (p,) = problems
        assert p.key == key
        if installed:
            assert "several are installed: c0 (d0), c1 (d1)" in p.what and "uninstall all but one" in p.fix
        else:
            assert "not installed" in p.what and f"pip install rl-async, or remove {key}" in p.fix


def test_a_worker_extension_that_does_not_load_is_named():
    card = RolloutPoolCard(name="broken", factory=_make_schedule, worker="no_such_module_xyz:Ext", provider=Provider(distribution="d"))
    registry = Registry(cards={**get_registry().cards, "rollout_pool": {"broken": card}})
    problems = []
    _card, _schedule, worker_fn = _rollout_pool(_config("rollout.n_gpus_per_node=1"), registry, problems)
    (p,) = problems
    assert worker_fn is None
    assert p.key == "rollout.n_gpus_per_node" and "'no_such_module_xyz:Ext' that does not load" in p.what and "d" in p.fix

