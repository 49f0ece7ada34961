"""Mixed rewards' checks (rl_reward_model.mixing, the resolver runs them through the feature) and the manager's weights
per source; without rl-reward-model, reward.weights / reward_model.enable are an `rlcore check` problem naming it."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
from rl_core.config.sections import evolve_key
from rl_core.batch import Batch
from rl_core.config.schema import DataConfig, ModelConfig, RewardConfig, RunConfig
from rl_core.plan.checks import plan_for
from rl_core.plugins import get_registry
from rl_core.rewards.manager import RewardConfigError, RewardManager
from rl_core.rewards.outcome import ERROR, OK, Outcome
from rl_reward_model.feature import FEATURE
from rl_reward_model.mixing import RewardWeights, checked_weights, mixing_problems


def keys(problems, severity="error"):
    return {p.key: p for p in problems if p.severity == severity}


def with_reward_model(config, *, path=None, **rm):
    """``config`` with ``reward_model`` fields set (``path``: reward_model.model.path)."""
    section = config.reward_model
    if path is not None:
        rm["model"] = attrs.evolve(section.model, path=path)
    return evolve_key(config, "reward_model", attrs.evolve(section, **rm))


def test_weights_and_an_unused_rule_reward():
    cfg = with_reward_model(RunConfig(), enable=False)
    cfg = attrs.evolve(cfg, reward=RewardConfig(weights={"a": {"rule": 1, "modle": 2}, "b": {"model": 1}}))
    got = keys(mixing_problems(cfg))
    assert "not a part" in got["reward.weights.a.modle"].what and "reward_model.enable" in got["reward.weights.b.model"].fix
    with pytest.raises(RewardConfigError, match="reward.weights.a.modle"):
        checked_weights(cfg.reward.weights)
    with pytest.raises(RewardConfigError, match="pip install rl-reward-model"):  # weights with no mixing: not installed
        RewardManager(cfg.reward, None)
    cfg = with_reward_model(attrs.evolve(RunConfig(), reward=RewardConfig(name="gsm8k")), enable=True, path="x")
    warn = keys(mixing_problems(cfg), "warning")["reward.name"]
    assert "model's score alone" in warn.what and "reward.weights" in warn.fix


def test_weights_per_source_pick_parts_and_failures_count_once():
    """gsm8k: rule + model; chat/*: model only (no rule reward needed); the rest: rule only."""
    cfg = RewardConfig(weights={"gsm8k": {"rule": 1.0, "model": 0.5}, "chat/*": {"model": 2.0}, "default": {"rule": 1.0}}, on_error="skip")
    from tests.rewards.test_reward_manager import make_registry
    from rl_core.cards import RewardCard

    registry = make_registry(RewardCard(name="len", factory="tests.rewards.scorers:text_length", fields=()))
    cfg = attrs.evolve(cfg, name="len")
    batch = Batch({}, {"response_text": ["ab", "abcd", "abc", "a"], "data_source": ["gsm8k", "chat/x", "other", "chat/y"]})
    asked = []

    def model(rows):
        asked.extend(rows)
        return {1: Outcome(OK, 0.25), 0: Outcome(OK, 1.0), 3: Outcome(ERROR, error="boom")}

    scores, metrics, extras = RewardManager(cfg, registry, mixing=RewardWeights(cfg.weights, model_name="classifier")).score(batch, model=model)
    rule = [len(t) / 10 for t in ["ab", "abcd", "abc", "a"]]
    assert sorted(asked) == [0, 1, 3]
    assert scores.tolist() == pytest.approx([rule[0] + 0.5, 0.5, rule[2], 0.0])
    assert metrics["reward/errors"] == 1 and metrics["reward/model/errors"] == 1
    assert metrics["reward/chat/y/failed"] == 1 and metrics["reward/gsm8k/rule_mean"] == pytest.approx(rule[0])
    assert metrics["reward/gsm8k/model_mean"] == 1.0 and "reward/other/model_mean" not in metrics
    assert extras[3] == {"reward_error": "boom"}


DATA = str(Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "data" / "tiny_gsm8k.jsonl")


def _plan_config(model_dir, **reward_model):
    config = RunConfig(model=ModelConfig(path=str(model_dir)), data=DataConfig(train_files=[DATA]),
                       reward=RewardConfig(name="gsm8k", weights={"default": {"rule": 2.0}}))
    return with_reward_model(config, **reward_model) if reward_model else config


def test_the_plan_holds_the_feature_and_the_manager_mixes_with_it(tiny_model_dir):
    plan, problems = plan_for(_plan_config(tiny_model_dir()), devices=False)
    assert plan is not None, [p.render() for p in problems]
    assert plan.features["reward_model"] is FEATURE
    manager = RewardManager.for_stack(plan)
    batch = Batch({}, {"response_text": ["#### 4", "#### 5"], "data_source": ["openai/gsm8k"] * 2, "ground_truth": ["4", "4"]})
    scores, metrics, _ = manager.score(batch)
    assert scores.tolist() == [2.0, 0.0] and metrics["reward/openai/gsm8k/rule_mean"] == 0.5


@pytest.mark.parametrize(("reward_model", "key"), [({}, "reward.weights"), ({"enable": True, "path": "x"}, "reward_model.enable")])
def test_without_the_package_check_names_it(tiny_model_dir, monkeypatch, reward_model, key):
    registry = get_registry()
    for kind in ("feature", "check", "reward_model", "config_section"):
        monkeypatch.setitem(registry.cards, kind, {k: c for k, c in registry.cards[kind].items() if c.provider.distribution != "rl-reward-model"})
    plan, problems = plan_for(_plan_config(tiny_model_dir(), **reward_model), devices=False)
    errs = {p.key: p for p in problems if p.severity == "error"}
    assert plan is None and key in errs, [p.render() for p in problems]
    assert "pip install rl-reward-model" in errs[key].render() and "no installed package provides it" in errs[key].what
