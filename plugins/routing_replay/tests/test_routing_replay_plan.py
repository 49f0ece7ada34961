"""rl-routing-replay through core's feature contract: the Plan holds its FeatureCard's object (what the hf rollout calls),
its check refuses backends that cannot replay, and a config asking for routing replay without the package is an
`rlcore check` problem naming `pip install rl-routing-replay` (not a traceback at run time)."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
from rl_core.backends import WorkerContext
from rl_core.config.schema import ActorConfig, DataConfig, ModelConfig, RolloutConfig, RunConfig
from rl_core.plan.checks import plan_for
from rl_core.plugins import get_registry
from rl_routing_replay.feature import FEATURE


def _without_the_package(monkeypatch):
    registry = get_registry()
    monkeypatch.setitem(registry.cards, "feature", {k: c for k, c in registry.cards["feature"].items() if k != "routing_replay"})
    monkeypatch.setitem(registry.cards, "check", {k: c for k, c in registry.cards["check"].items() if c.provider.distribution != "rl-routing-replay"})
    return registry


DATA = str(Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "data" / "tiny_gsm8k.jsonl")


def _config(model_dir, **kw):
    return RunConfig(model=ModelConfig(path=str(model_dir)), data=DataConfig(train_files=[DATA]), **kw)


def test_the_plan_holds_the_feature_and_its_check_runs(tiny_model_dir, monkeypatch):
    path = tiny_model_dir("qwen3_moe")
    r3 = dict(actor=ActorConfig(router_replay="R3"), rollout=RolloutConfig(return_routed_experts=True))
    plan, problems = plan_for(_config(path, **r3), devices=False)
    assert plan is not None, [p.render() for p in problems]
    assert plan.features["routing_replay"] is FEATURE
    registry = get_registry()  # a rollout card that does not return routed experts: refused by the package's check
    monkeypatch.setitem(registry.cards["rollout"], "hf", attrs.evolve(registry.cards["rollout"]["hf"], routed_experts=False))
    plan, problems = plan_for(_config(path, **r3), devices=False)
    (p,) = [p for p in problems if p.severity == "error"]
    assert plan is None and p.key == "rollout.return_routed_experts" and "does not return the experts" in p.what


@pytest.mark.parametrize(("kw", "key"), [
    (dict(actor=ActorConfig(router_replay="R2")), "actor.router_replay"),
    (dict(actor=ActorConfig(router_replay="R3"), rollout=RolloutConfig(return_routed_experts=True)), "actor.router_replay"),
])
def test_without_the_package_check_names_it(tiny_model_dir, monkeypatch, kw, key):
    _without_the_package(monkeypatch)
    plan, problems = plan_for(_config(tiny_model_dir("qwen3_moe"), **kw), devices=False)
    errs = [p for p in problems if p.severity == "error"]
    assert plan is None and [p.key for p in errs] == [key], [p.render() for p in errs]
    assert "pip install rl-routing-replay" in errs[0].render() and "no installed package provides it" in errs[0].what
    # routing replay off: the same registry plans the run (nothing else needs the package)
    plan, problems = plan_for(_config(tiny_model_dir("qwen3_moe")), devices=False)
    assert plan is not None and "routing_replay" not in plan.features, [p.render() for p in problems]


def test_the_hf_rollout_without_the_feature_names_it(tiny_model_dir):
    from rl_core.rollout.hf import HFRolloutEngine

    cfg = _config(tiny_model_dir("qwen3_moe"), rollout=RolloutConfig(return_routed_experts=True), actor=ActorConfig(router_replay="R3"))
    with pytest.raises(LookupError, match=r"rollout.return_routed_experts needs the 'routing_replay' feature"):
        HFRolloutEngine(cfg, WorkerContext())


@pytest.mark.parametrize(("kw", "key", "words"), [
    (dict(actor=ActorConfig(router_replay="R3")), "actor.router_replay", "the rollout records none"),
    (dict(rollout=RolloutConfig(return_routed_experts=True)), "rollout.return_routed_experts", "only R3 replays"),
    (dict(actor=ActorConfig(router_replay="R2"), rollout=RolloutConfig(return_routed_experts=True)), "rollout.return_routed_experts",
     "R2 records its own"),
])
def test_the_two_keys_must_agree(tiny_model_dir, kw, key, words):
    """The package's check (core's load-time rule until session 21): R3 needs the rollout's routing, nothing else reads it."""
    plan, problems = plan_for(_config(tiny_model_dir("qwen3_moe"), **kw), devices=False)
    errs = [p for p in problems if p.severity == "error"]
    assert plan is None and [p.key for p in errs] == [key] and words in errs[0].render(), [p.render() for p in errs]


def test_multi_turn_rollouts_record_no_routing():
    pytest.importorskip("rl_agent")
    from rl_core.config.load import load_report
    from rl_routing_replay.checks import config_problems

    loaded = load_report(None, ["actor.router_replay=R3", "rollout.return_routed_experts=true", "rollout.multi_turn.enable=true"])
    (p,) = config_problems(loaded.config)
    assert p.key == "rollout.return_routed_experts" and "multi-turn trajectories" in p.what
    assert config_problems(attrs.evolve(loaded.config, rollout=RolloutConfig(return_routed_experts=True))) == []  # single-turn R3


def test_the_dry_run_describes_the_replay(tiny_model_dir):
    """`rlcore train --dry-run` (describe_plan) says what is replayed: the package's ``plan_lines`` hook."""
    from rl_core.trainer.loop import describe_plan, needs_old_log_prob_pass

    path = tiny_model_dir("qwen3_moe")
    plan, problems = plan_for(_config(path, actor=ActorConfig(router_replay="R2")), devices=False)
    assert plan is not None, [p.render() for p in problems]
    assert ("MoE routing replay: R2: the old-log-prob pass's routing" if needs_old_log_prob_pass(plan) else "MoE routing replay: R2 without") in describe_plan(plan)
    plan, _ = plan_for(_config(path), devices=False)
    assert "MoE routing replay" not in describe_plan(plan)
