"""`rlcore check` probes of model-based rewards, mixing weights, and the memory estimate with a reward model."""

from __future__ import annotations

import attrs
import pytest
import torch
from rl_core.batch import Batch
from rl_core.cards import Provider, RolloutCard
from rl_core.config.load import load_config
from rl_core.config.schema import RewardConfig, RunConfig
from rl_core.plugins import Registry
from rl_core.rewards.manager import RewardConfigError, RewardManager
from rl_core.rewards.model_checks import reward_model_problems
from rl_core.rewards.pool import ERROR, OK, Outcome

from tests.rewards.rm_fixtures import make_reward_model_dir, with_reward_model


def keys(problems, severity="error"):
    return {p.key: p for p in problems if p.severity == severity}


def rm_problems(**rm):
    from rl_core.plugins import get_registry

    return reward_model_problems(with_reward_model(RunConfig(), enable=True, **rm), get_registry())


def test_missing_reward_model_is_named_with_the_fix(tmp_path):
    got = keys(rm_problems(model={"path": str(tmp_path / "nowhere")}))
    assert "neither a folder nor a model in the Hugging Face cache" in got["reward_model.model.path"].what
    assert "huggingface-cli download" in got["reward_model.model.path"].fix
    assert "is required" in keys(rm_problems())["reward_model.model.path"].what


def test_a_causal_lm_has_no_classification_head(tmp_path):
    from rl_core_testing.tiny_model import make_tiny_model_dir

    lm = make_tiny_model_dir(tmp_path / "lm")
    p = keys(rm_problems(model={"path": str(lm)}))["reward_model.model.path"]
    assert "LlamaForCausalLM" in p.what and "sequence-classification head" in p.what and "reward_model.name=judge" in p.fix
    assert "reward_model.model.path" not in keys(rm_problems(name="judge", model={"path": str(lm)}))  # fine as a judge


def test_a_tokenizer_without_chat_template(tmp_path):
    rm = make_reward_model_dir(tmp_path / "rm", chat_template=None)
    p = keys(rm_problems(model={"path": str(rm)}))["reward_model.model.chat_template"]
    assert "no chat template" in p.what and "reward_model.apply_chat_template=false" in p.fix
    assert rm_problems(model={"path": str(rm)}, apply_chat_template=False) == []
    assert rm_problems(model={"path": str(rm), "chat_template": "{{ messages[0]['content'] }}"}) == []


def test_judge_engine_not_installed_is_named_with_its_install_line(tmp_path, monkeypatch):
    from rl_core_testing.tiny_model import make_tiny_model_dir

    registry = Registry()
    card = RolloutCard(name="fastgen", factory="nowhere:factory", engine="fastgen-engine-not-installed", engine_install="pip install fastgen-engine==1.0")
    registry.add(card, Provider(distribution="rl-rollout-fastgen"))
    from rl_core.rewards.model_builtin import JUDGE

    registry.add(JUDGE, Provider(distribution="rl-core"))
    monkeypatch.setattr("rl_core.plugins.get_registry", lambda **_: registry)
    lm = make_tiny_model_dir(tmp_path / "lm")
    got = keys(rm_problems(name="judge", model={"path": str(lm)}, judge={"engine": "fastgen", "template": "{response} {answer}"}))
    assert "not installed" in got["reward_model.judge.engine"].what and got["reward_model.judge.engine"].fix == "pip install fastgen-engine==1.0"
    assert "{answer}" in got["reward_model.judge.template"].what
    got = keys(rm_problems(name="judge", model={"path": str(lm)}, judge={"engine": "vllmx"}))
    assert "vllmx" in got["reward_model.judge.engine"].what and "fastgen" in got["reward_model.judge.engine"].fix


def test_weights_and_an_unused_rule_reward():
    cfg = with_reward_model(RunConfig(), enable=False)
    cfg = attrs.evolve(cfg, reward=RewardConfig(weights={"a": {"rule": 1, "modle": 2}, "b": {"model": 1}}))
    got = keys(reward_model_problems(cfg, None))
    assert "not a part" in got["reward.weights.a.modle"].what and "reward_model.enable" in got["reward.weights.b.model"].fix
    with pytest.raises(RewardConfigError, match="reward.weights.a.modle"):
        RewardManager(cfg.reward)
    cfg = with_reward_model(attrs.evolve(RunConfig(), reward=RewardConfig(name="gsm8k")), enable=True, model={"path": "x"})
    warn = keys(reward_model_problems(cfg, None), "warning")["reward.name"]
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


def test_memory_estimate_counts_the_reward_model(tmp_path):
    from rl_core.config.normalize import normalize
    from rl_core.plan.memory import estimate
    from rl_core_testing.tiny_model import make_tiny_model_dir

    policy = make_tiny_model_dir(tmp_path / "policy")
    rm = make_reward_model_dir(tmp_path / "rm", hidden=64, layers=4)
    base = load_config(overrides=[f"model.path={policy}", "trainer.device=cuda", "data.train_batch_size=4", "actor.ppo_mini_batch_size=2", "actor.ppo_micro_batch_size_per_gpu=2"])
    on = with_reward_model(base, enable=True, model={"path": str(rm)})
    pooled = with_reward_model(base, enable=True, model={"path": str(rm)}, n_gpus_per_node=1)
    est = {name: estimate(*normalize(c)[:2], available=80 * 2**30) for name, c in (("off", base), ("on", on), ("pool", pooled))}
    assert "reward model" not in est["off"].phases
    # colocated on a GPU: on the device only while scoring (offloaded), so it has a phase of its own over the states
    assert est["on"].phases["reward model"] > est["on"].phases["log-probs"] - est["on"].terms.get("logits (log-probs, chunked)", 0)
    assert est["on"].terms["reward model weights (on device while scoring)"] > 0
    assert "reward model (own devices)" in est["pool"].phases and "reward model" not in est["pool"].phases
    kept = with_reward_model(base, enable=True, model={"path": str(rm)}, offload=False)
    assert estimate(*normalize(kept)[:2], available=80 * 2**30).phases["update"] > est["on"].phases["update"]
    assert torch.tensor(list(est["on"].phases.values())).isfinite().all()
