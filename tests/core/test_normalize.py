"""Normalisation arithmetic: global sizes in prompts -> per-rank sizes in sequences."""

from __future__ import annotations

import attrs
import pytest
from rl_core.config.load import load_config
from rl_core.config.normalize import normalize
from rl_core.problems import ConfigError


def _norm(*overrides, needs_critic=False):
    cfg = load_config(None, ["model.path=Qwen/Qwen2.5-0.5B", "trainer.device=cuda", *overrides])
    return normalize(cfg, needs_critic=needs_critic)


def test_worked_example_from_the_issue():
    # 60 prompts x n=12 = 720 sequences; 6 GPUs / rollout TP 2 = 3 replicas of 720/3 = 240;
    # mini-batch 60 prompts = 720 sequences / 6 ranks = 120 per training rank.
    _, sizes, problems = _norm(
        "data.train_batch_size=60", "rollout.n=12", "trainer.n_gpus_per_node=6",
        "rollout.tensor_model_parallel_size=2", "actor.ppo_mini_batch_size=60", "actor.ppo_micro_batch_size_per_gpu=8",
    )
    assert problems == []
    assert sizes.sequences_per_step == 720
    assert sizes.rollout_replicas == 3
    assert sizes.sequences_per_rollout_replica == 240
    assert sizes.train_dp == 6
    assert sizes.sequences_per_train_rank == 120
    assert sizes.actor_mini_batch_per_rank == 120
    assert sizes.actor_mini_batches == 1
    assert sizes.actor_grad_accum == 120 // 8 == 15


def test_several_mini_batches_and_nodes():
    # 2 nodes x 4 GPUs = 8 ranks; 32 prompts x 4 = 128 seqs; mini 8 prompts = 32 seqs / 8 = 4 per rank;
    # 32 / 8 = 4 optimizer steps per epoch; micro 2 -> 2 accumulation steps.
    _, sizes, problems = _norm(
        "trainer.nnodes=2", "trainer.n_gpus_per_node=4", "data.train_batch_size=32", "rollout.n=4",
        "actor.ppo_mini_batch_size=8", "actor.ppo_micro_batch_size_per_gpu=2",
    )
    assert problems == []
    assert (sizes.world_size, sizes.sequences_per_step, sizes.actor_mini_batches) == (8, 128, 4)
    assert (sizes.actor_mini_batch_per_rank, sizes.actor_grad_accum) == (4, 2)
    assert sizes.rollout_replicas == 8 and sizes.sequences_per_rollout_replica == 16


def test_train_model_parallel_reduces_data_parallel():
    # 8 GPUs, train TP 2 x PP 2 -> dp 2; 16 prompts x 2 = 32 seqs -> 16 per dp rank.
    _, sizes, problems = _norm(
        "trainer.n_gpus_per_node=8", "train.tensor_model_parallel_size=2", "train.pipeline_model_parallel_size=2",
        "data.train_batch_size=16", "rollout.n=2", "actor.ppo_mini_batch_size=16", "actor.ppo_micro_batch_size_per_gpu=4",
    )
    assert problems == []
    assert sizes.train_dp == 2 and sizes.sequences_per_train_rank == 16 and sizes.actor_grad_accum == 4


def test_critic_inherits_actor_sizes_when_unset():
    cfg, sizes, problems = _norm("data.train_batch_size=8", "rollout.n=2", "actor.ppo_mini_batch_size=4", "actor.ppo_micro_batch_size_per_gpu=2", needs_critic=True)
    assert problems == []
    assert cfg.critic.enable is True
    assert cfg.critic.ppo_mini_batch_size == 4 and sizes.critic_mini_batch_per_rank == 8 and sizes.critic_grad_accum == 4


def test_micro_batch_error_shows_arithmetic_and_nearest_values():
    # 8 prompts x 2 / 1 rank = 16 per rank; micro 5 does not divide 16; nearest divisors 4 and 8.
    _, sizes, problems = _norm("data.train_batch_size=8", "rollout.n=2", "actor.ppo_mini_batch_size=8", "actor.ppo_micro_batch_size_per_gpu=5")
    assert sizes is None
    (p,) = problems
    assert p.key == "actor.ppo_micro_batch_size_per_gpu"
    assert "8 prompts x n=2 / 1 ranks = 16 sequences (16 % 5 = 1)" in p.what
    assert "4, 8" in p.fix


def test_batch_not_divisible_by_dp_suggests_a_valid_size():
    # 5 x 1 = 5 sequences over 2 ranks: 5 % 2 = 1; the next valid batch is 6.
    _, sizes, problems = _norm("trainer.n_gpus_per_node=2", "data.train_batch_size=5", "rollout.n=1", "actor.ppo_mini_batch_size=5", "actor.ppo_micro_batch_size_per_gpu=1")
    keys = {p.key for p in problems}
    assert "data.train_batch_size" in keys
    p = next(p for p in problems if "data-parallel" in p.what)
    assert "5 % 2 = 1" in p.what and "data.train_batch_size=6" in p.fix


def test_fills_clip_ratios_and_log_prob_micro_batch():
    cfg, _, _ = _norm("actor.clip_ratio=0.25", "actor.clip_ratio_high=0.28")
    assert cfg.actor.clip_ratio_low == 0.25 and cfg.actor.clip_ratio_high == 0.28
    assert cfg.actor.log_prob_micro_batch_size_per_gpu == cfg.actor.ppo_micro_batch_size_per_gpu
    assert cfg.ref.enable is False


@pytest.mark.parametrize("key", ["data.train_batch_size", "rollout.n", "actor.ppo_micro_batch_size_per_gpu", "trainer.n_gpus_per_node"])
@pytest.mark.parametrize("value", [0, -4])
def test_non_positive_sizes(key, value):
    # load_config refuses them (the schema's rules); normalize checks the same rules for configs built in code
    with pytest.raises(ConfigError) as exc:
        _norm(f"{key}={value}")
    assert [p.key for p in exc.value.problems] == [key] and "positive" in exc.value.problems[0].what
    cfg = load_config(None, ["model.path=Qwen/Qwen2.5-0.5B", "trainer.device=cuda"])
    section, name = key.split(".")
    cfg = attrs.evolve(cfg, **{section: attrs.evolve(getattr(cfg, section), **{name: value})})
    _, sizes, problems = normalize(cfg)
    assert sizes is None
    assert [p.key for p in problems] == [key]
    assert "positive" in problems[0].what


def test_a_critic_pool_of_its_own_sizes_the_critic_by_its_ranks():
    # 4 actor GPUs, critic on 2 of its own: 16 prompts x 4 = 64 seqs; critic mini 16 prompts = 64 seqs / 2 ranks
    # = 32 per critic rank, micro 8 -> 4 accumulation steps (the actor: 64 / 4 = 16 per rank, 2 steps of 8)
    _, sizes, problems = _norm(
        "trainer.n_gpus_per_node=4", "data.train_batch_size=16", "rollout.n=4", "actor.ppo_mini_batch_size=16",
        "actor.ppo_micro_batch_size_per_gpu=8", "critic.n_gpus_per_node=2", needs_critic=True,
    )
    assert problems == []
    assert sizes.pools == {"critic": (2, 2)} and sizes.ranks("critic") == (2, 2) and sizes.ranks("ref") == (4, 4)
    assert sizes.actor_mini_batch_per_rank == 16 and sizes.actor_grad_accum == 2
    assert sizes.critic_mini_batch_per_rank == 32 and sizes.critic_grad_accum == 4
    assert sizes.devices == 6
    assert ("critic workers (own pool)", "2 (2 data-parallel), 32 sequences each") in sizes.table()


@pytest.mark.parametrize(
    "overrides, key, words",
    [
        (["critic.n_gpus_per_node=2", "critic.enable=false"], "critic.n_gpus_per_node", "has no critic"),
        (["ref.nnodes=2"], "ref.nnodes", "ref.n_gpus_per_node is not set"),
        (["actor.use_kl_loss=true", "ref.n_gpus_per_node=2", "ref.nnodes=2"], "ref.nnodes", "needs Ray"),
        (["actor.use_kl_loss=true", "ref.n_gpus_per_node=3"], "ref.n_gpus_per_node", "cannot be split over the ref's 3"),
    ],
    ids=["pool-for-a-role-that-is-off", "nnodes-without-a-pool", "several-nodes-locally", "pool-not-dividing-the-step"],
)
def test_pool_problems_name_the_key(overrides, key, words):
    _, sizes, problems = _norm("data.train_batch_size=8", "rollout.n=4", "actor.ppo_mini_batch_size=8", "actor.ppo_micro_batch_size_per_gpu=4", *overrides)
    assert sizes is None and [p.key for p in problems] == [key], [p.render() for p in problems]
    assert words in problems[0].render()
