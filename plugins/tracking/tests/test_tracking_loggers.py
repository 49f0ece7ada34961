"""rl-tracking's loggers through core's Tracker, as the plan hands them over: tensorboard events (purged after a
resumed step), wandb's missing install named, and the check that names a logger's missing package."""

from __future__ import annotations

import pytest
from rl_core.trainer.tracking import Tracker
from rl_tracking.checks import logger_problems
from rl_tracking.loggers import TensorboardLogger, WandbLogger

TRACKERS = {"tensorboard": TensorboardLogger, "wandb": WandbLogger}


def test_tensorboard_writes_scalars_and_purges_after_resume(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with Tracker(["tensorboard"], str(tmp_path), "p", "e", {"lr": 1e-5}, trackers=TRACKERS) as tr:
        for step in range(1, 5):
            tr.log({"reward/mean": float(step)}, step=step)
    with Tracker(["tensorboard"], str(tmp_path), trackers=TRACKERS) as tr:
        tr.truncate_after(2)
        tr.log({"reward/mean": 10.0}, step=3)
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    got = [(e.step, e.value) for e in acc.Scalars("reward/mean")]
    assert got == [(1, 1.0), (2, 2.0), (3, 10.0)]


def test_wandb_missing_names_the_install(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_wandb(name, *a, **k):
        if name == "wandb":
            raise ImportError("No module named 'wandb'")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    with pytest.raises(ImportError, match="pip install wandb"):
        Tracker(["wandb"], str(tmp_path), trackers=TRACKERS)




# ----------------------------------------------------------------- the plan
def _registry(without: str | None = None):
    import attrs
    from rl_core.plugins import get_registry

    base = get_registry()
    cards = {kind: dict(table) for kind, table in base.cards.items()}
    if without:
        cards[without] = {}
    return attrs.evolve(base, cards=cards)


def _config(tmp_path, loggers):
    from rl_core.config.load import load_config
    from rl_core_testing.tiny_run import write_tiny_run

    return load_config(write_tiny_run(tmp_path, **{"trainer.loggers": loggers}))


def test_the_plan_carries_the_named_trackers_factories(tmp_path):
    from rl_core.plan.resolver import resolve

    plan, problems = resolve(_config(tmp_path, ["console", "jsonl", "tensorboard"]), _registry())
    assert plan is not None, [p.render() for p in problems]
    assert plan.trackers == (("tensorboard", TensorboardLogger),)  # core's own console / jsonl need no card


def test_a_logger_without_its_package_names_the_install(tmp_path):
    from rl_core.plan.resolver import resolve

    plan, problems = resolve(_config(tmp_path, ["console", "wandb"]), _registry(without="tracker"))
    assert plan is None
    (p,) = [p for p in problems if p.severity == "error"]
    assert p.key == "trainer.loggers[1]" and "pip install rl-tracking" in p.what and p.fix.startswith("pip install rl-tracking")


def test_the_check_names_a_missing_logger_package(tmp_path, monkeypatch):
    import rl_tracking.checks as checks

    cfg = _config(tmp_path, ["jsonl", "tensorboard", "wandb"])
    monkeypatch.setattr(checks, "installed", lambda module: module != "wandb")
    (p,) = logger_problems(cfg)
    assert p.key == "trainer.loggers" and "'wandb' needs the package wandb" in p.what and "pip install wandb" in p.fix
    monkeypatch.setattr(checks, "installed", lambda module: True)
    assert logger_problems(cfg) == []
