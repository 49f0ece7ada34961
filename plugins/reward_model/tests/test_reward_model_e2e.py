"""The reward model in the training loop: colocated with the actor, or on a pool of its own; mixed with a rule."""

from __future__ import annotations

import pytest

from tests.e2e.helpers import train_tiny
from rm_fixtures import make_reward_model_dir


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory):
    return make_reward_model_dir(tmp_path_factory.mktemp("rm") / "rm", seed=3)


def test_grpo_step_mixes_rule_and_model_scores_per_source(tmp_path, rm_dir):
    rows = train_tiny(
        tmp_path, steps=1,
        reward_model__enable=True, reward_model__model__path=str(rm_dir), reward_model__micro_batch_size_per_gpu=3,
        reward__weights={"tiny/*": {"rule": 1.0, "model": 0.5}},
    )
    m = rows[-1]
    rule, model, mixed = m["reward/tiny/digits/rule_mean"], m["reward/tiny/digits/model_mean"], m["reward/tiny/digits/mean"]
    assert mixed == pytest.approx(rule + 0.5 * model, abs=1e-5)
    assert model != 0.0 and m["reward/model/score_mean"] == pytest.approx(model)
    assert m["reward/model/errors"] == 0 and m["reward/tiny/digits/failed"] == 0
    assert 0 < m["timing_s/reward_model"] <= m["timing_s/reward"]


def test_ppo_with_the_reward_model_on_a_pool_of_its_own(tmp_path, rm_dir):
    rows = train_tiny(
        tmp_path, steps=1, estimator="gae",
        reward_model__enable=True, reward_model__model__path=str(rm_dir), reward_model__n_gpus_per_node=1,
    )
    m = rows[-1]
    # the model's score alone is the reward (no weights given): verl's behaviour with a reward model
    assert m["reward/tiny/digits/mean"] == pytest.approx(m["reward/model/score_mean"]) and "reward/tiny/digits/rule_mean" not in m
    assert "critic/vf_loss" in m and "timing_s/update_critic" in m  # PPO: the critic trained in the same step
    assert 0 < m["timing_s/reward_model"] <= m["timing_s/reward"]


def test_grpo_step_with_the_judge_on_the_rollout_card_the_stack_resolved(tmp_path):
    """The judge's engine comes from the resolved stack (Stack.reward_model_rollout), not a registry lookup in the worker."""
    from rl_core.config.load import load_config
    from rl_core.plan.resolver import resolve
    from rl_core_testing.tiny_model import make_tiny_model_dir

    from rl_reward_model.judge import factory
    from tests.e2e.helpers import write_tiny_run

    judge = make_tiny_model_dir(tmp_path / "judge", arch="llama")
    overrides = dict(
        reward_model__enable=True, reward_model__name="judge", reward_model__model__path=str(judge), reward_model__apply_chat_template=False,
        reward_model__judge__engine="hf", reward_model__judge__max_new_tokens=2, reward_model__judge__template="Rate: {response}",
        reward__on_error="skip",
    )
    stack, problems = resolve(load_config(write_tiny_run(tmp_path / "run", **overrides)))
    assert stack is not None, [p.render() for p in problems]
    assert stack.reward_model.name == "judge" and stack.reward_model_fn is factory and stack.reward_model_rollout.name == "hf"
    rows = train_tiny(tmp_path / "train", steps=1, **overrides)
    m = rows[-1]
    # a random tiny judge rarely writes a number: its samples score 0 as parse failures (reward.on_error=skip)
    assert m["reward/model/errors"] == m["reward/model/parse_failures"] and 0 < m["timing_s/reward_model"] <= m["timing_s/reward"]
