"""Through the real actor update (fsdp engine, one process): the loss gradient is exactly zero on every inserted
tool / template token of a multi-turn trajectory and non-zero on every sampled token."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rl_core.backends import SamplingParams, WorkerContext
from rl_agent.config import MultiTurnConfig
from rl_core.config.schema import ActorConfig, DataConfig, ModelConfig, OptimConfig, RolloutConfig, RunConfig, TrainerConfig
from rl_core.config.sections import evolve_key
from rl_agent.testing import agent_context, register_fixtures
from rl_core_testing.distributed import torch_threads
from rl_core_testing.rollout_conformance import prompt_batch
from rl_core_testing.tiny_model import make_tiny_model_dir

pytest.importorskip("rl_train_fsdp", reason="the actor update runs on the fsdp train engine (pip install -e plugins/train_fsdp)")


def test_gradient_is_zero_on_inserted_tokens_and_not_on_sampled(tmp_path):
    from rl_core.modeling import load_tokenizer
    from rl_core.rollout.hf import factory as rollout_factory
    from rl_train_fsdp.engine import build_engine

    register_fixtures()
    model_dir = make_tiny_model_dir(tmp_path / "m", "llama", seed=0)
    R = 64
    cfg = RunConfig(
        model=ModelConfig(path=str(model_dir)),
        data=DataConfig(train_batch_size=2, max_prompt_length=32, max_response_length=R),
        rollout=RolloutConfig(n=2),
        actor=ActorConfig(ppo_mini_batch_size=2, ppo_micro_batch_size_per_gpu=4, entropy_coeff=0.01, optim=OptimConfig(lr=1e-3)),
        trainer=TrainerConfig(total_training_steps=1, seed=0),
    )
    cfg = evolve_key(cfg, "rollout.multi_turn", MultiTurnConfig(enable=True, tools=["count_chars"], format="every_turn", max_assistant_turns=3, max_tokens_per_turn=3))
    tok = load_tokenizer(model_dir)
    messages = [[{"role": "user", "content": t}] for t in ("hi", "abc")]
    prompts = prompt_batch(model_dir, [tok.apply_chat_template(m, tokenize=False, add_generation_prompt=True) for m in messages])
    prompts.non_tensors["raw_prompt"] = np.array(messages + [None], dtype=object)[:2]
    with torch_threads(1):
        rollout = rollout_factory(cfg, agent_context(cfg))
        batch = rollout.generate(prompts, SamplingParams(n=2, max_new_tokens=R, temperature=1.0, seed=3))
        rollout.shutdown()
        mask = batch["response_mask"]
        inserted = batch["attention_mask"][:, -R:].bool() & ~mask.bool()
        assert inserted.sum() > 0 and mask.sum() > 0
        batch["advantages"] = torch.tensor([1.0, -0.5, 0.7, -1.2]).unsqueeze(1) * torch.ones(4, R)

        actor = build_engine("actor", cfg, WorkerContext(seed=0))
        captured = []
        backend = actor.backend
        original = type(backend).forward

        def forward(x, **kwargs):
            heads = original(backend, x, **kwargs)
            for t in (heads.log_probs, heads.entropy):
                if t is not None and t.requires_grad:
                    t.retain_grad()
            captured.append((heads.log_probs, heads.entropy))
            return heads

        backend.forward = forward
        actor.update(batch, on_policy=True)  # one mini-batch, one epoch, no old log-prob pass
        actor.shutdown()
    (log_prob, entropy), = captured  # one mini-batch, one micro-batch of all 4 rows
    g = log_prob.grad
    assert g is not None and g.shape[0] == 4
    used = g.shape[1]  # the engine skips response columns that are padding in every row
    assert not batch["attention_mask"][:, -R:][:, used:].any()
    mask, inserted = mask[:, :used], inserted[:, :used]
    assert torch.all(g[inserted] == 0), "the loss must not reach the log-probs of tool / template tokens"
    assert torch.all(g[~batch["attention_mask"][:, -R:][:, :used].bool()] == 0)
    assert torch.all(g[mask.bool()] != 0), "every sampled token gets a gradient"
    if entropy is not None and entropy.grad is not None:
        assert torch.all(entropy.grad[inserted] == 0) and torch.all(entropy.grad[mask.bool()] != 0)
