"""Mixed rewards' checks (core: rl_core.rewards.mixing, the resolver runs them) and the manager's weights per source.

The reward model itself (its folder, its cards' checks) is rl-reward-model's: plugins/reward_model/tests.
"""

from __future__ import annotations

import attrs
import pytest
from rl_core.batch import Batch
from rl_core.config.schema import RewardConfig, RunConfig
from rl_core.rewards.manager import RewardConfigError, RewardManager
from rl_core.rewards.mixing import mixing_problems
from rl_core.rewards.pool import ERROR, OK, Outcome


def keys(problems, severity="error"):
    return {p.key: p for p in problems if p.severity == severity}


def with_reward_model(config, *, path=None, **rm):
    """``config`` with ``reward_model`` fields set (``path``: reward_model.model.path)."""
    section = config.reward_model
    if path is not None:
        rm["model"] = attrs.evolve(section.model, path=path)
    return attrs.evolve(config, reward_model=attrs.evolve(section, **rm))


def test_weights_and_an_unused_rule_reward():
    cfg = with_reward_model(RunConfig(), enable=False)
    cfg = attrs.evolve(cfg, reward=RewardConfig(weights={"a": {"rule": 1, "modle": 2}, "b": {"model": 1}}))
    got = keys(mixing_problems(cfg))
    assert "not a part" in got["reward.weights.a.modle"].what and "reward_model.enable" in got["reward.weights.b.model"].fix
    with pytest.raises(RewardConfigError, match="reward.weights.a.modle"):
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

    scores, metrics, extras = RewardManager(cfg, registry, model_name="classifier").score(batch, model=model)
    rule = [len(t) / 10 for t in ["ab", "abcd", "abc", "a"]]
    assert sorted(asked) == [0, 1, 3]
    assert scores.tolist() == pytest.approx([rule[0] + 0.5, 0.5, rule[2], 0.0])
    assert metrics["reward/errors"] == 1 and metrics["reward/model/errors"] == 1
    assert metrics["reward/chat/y/failed"] == 1 and metrics["reward/gsm8k/rule_mean"] == pytest.approx(rule[0])
    assert metrics["reward/gsm8k/model_mean"] == 1.0 and "reward/other/model_mean" not in metrics
    assert extras[3] == {"reward_error": "boom"}
