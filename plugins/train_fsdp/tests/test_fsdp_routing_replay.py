"""MoE routing replay on the fsdp backend (actor.router_replay; rl-routing-replay), one process, tiny Qwen3-MoE:
R3 replays the hf rollout's routing (the actor's log-probs are the rollout's), R2 records in the old-log-prob pass and
the update routes every token to the batch's experts (activation checkpointing's recompute too)."""

from __future__ import annotations

import attrs
import pytest
import torch
from rl_core.backends import SamplingParams, WorkerContext
from rl_routing_replay.replay import NO_ROUTE
from rl_core_testing.rollout_conformance import prompt_batch
from rl_core_testing.train_conformance import default_config, make_step_batch

pytestmark = pytest.mark.usefixtures("one_thread")


def _cfg(model_dir, mode, **actor):
    cfg = default_config(model_dir)
    return attrs.evolve(
        cfg,
        actor=attrs.evolve(cfg.actor, router_replay=mode, ppo_epochs=1, **actor),
        rollout=attrs.evolve(cfg.rollout, return_routed_experts=mode == "R3"),
        critic=attrs.evolve(cfg.critic, enable=False),
    )


def _experts_calls(model):
    calls = []
    for name, m in model.named_modules():
        if name.endswith("mlp.experts"):
            m.register_forward_pre_hook(lambda mod, args: calls.append(args[1].clone()))
    return calls


def test_r3_replays_the_rollouts_routing(tiny_model_dir):
    from rl_core_testing.routing_replay import assert_r3_replays_the_rollout, r3_rollout_batch
    from rl_train_fsdp.engine import build_engine

    path = tiny_model_dir("qwen3_moe")
    cfg = _cfg(path, "R3")
    batch = r3_rollout_batch(cfg, path)
    actor = build_engine("actor", cfg, WorkerContext())
    assert actor.backend.router_replay is not None and not actor.backend.share_prompts
    assert_r3_replays_the_rollout(actor, batch, experts=4)
    del batch.tensors["routed_experts"]
    with pytest.raises(ValueError, match="R3 but the batch has no routed_experts"):
        actor.compute_log_prob(batch)


def test_r2_records_then_the_update_replays(tiny_model_dir):
    from rl_train_fsdp.engine import build_engine

    path = tiny_model_dir("qwen3_moe")
    step = make_step_batch(path)
    runs = {}
    for ckpt in (False, True):
        cfg = _cfg(path, "R2")
        cfg = attrs.evolve(cfg, model=attrs.evolve(cfg.model, enable_gradient_checkpointing=ckpt))
        actor = build_engine("actor", cfg, WorkerContext())
        batch = step.index(torch.arange(len(step)))
        out = actor.compute_log_prob(batch)  # the old-log-prob pass records
        routed = out["routed_experts"]
        real = batch["attention_mask"].bool()
        assert routed.shape == (*real.shape, 2, 2) and (routed[~real] == NO_ROUTE).all() and (routed[real] >= 0).all()
        forced = routed.clone()
        forced[real] = (forced[real] + 1) % 4  # the update must take the batch's experts, not its own
        batch["routed_experts"] = forced
        calls = _experts_calls(actor.model)
        metrics = actor.update(batch)
        n_layers = 2
        micro = len(calls) // n_layers
        flat = torch.cat([c for c in calls[: micro * n_layers : n_layers]])  # layer 0 of each forward / recompute
        assert (flat >= 0).all()
        runs[ckpt] = (metrics, calls)
        for i, c in enumerate(calls[:n_layers]):  # the first micro-batch (1 row): its real tokens got the forced experts
            row_real = real[0].nonzero().squeeze(1)
            assert torch.equal(c[row_real], forced[0, row_real, i].long())
    (plain, plain_calls), (ckpt, ckpt_calls) = runs[False], runs[True]
    assert len(ckpt_calls) == 2 * len(plain_calls)  # the backward's recompute ran the routers again, replaying too
    for k in ("loss", "grad_norm"):
        assert ckpt[k] == pytest.approx(plain[k], rel=1e-6), k


def test_the_lora_reference_routes_natively(tiny_model_dir):
    """verl's reference model does not replay (ref.router_replay.mode defaults to disabled): with LoRA the reference is
    the actor's model with its adapters off, and it routes natively under actor.router_replay=R3 too."""
    from rl_core.rollout.hf import HFRolloutEngine
    from rl_routing_replay.feature import FEATURE
    from rl_train_fsdp.engine import build_engine

    path = tiny_model_dir("qwen3_moe")
    cfg = _cfg(path, "R3")
    cfg = attrs.evolve(cfg, model=attrs.evolve(cfg.model, lora_rank=4, lora_alpha=8))
    batch = HFRolloutEngine(cfg, WorkerContext(features={"routing_replay": FEATURE})).generate(prompt_batch(path), SamplingParams(n=2, max_new_tokens=6, logprobs=True, seed=5))
    actor = build_engine("actor", cfg, WorkerContext())
    ref = actor.compute_log_prob(batch, reference=True)["log_probs"]
    batch["routed_experts"] = torch.where(batch["routed_experts"] >= 0, (batch["routed_experts"] + 1) % 4, batch["routed_experts"])
    assert torch.equal(actor.compute_log_prob(batch, reference=True)["log_probs"], ref)
    mask = batch["response_mask"].bool()
    assert (actor.compute_log_prob(batch)["log_probs"][mask] - ref[mask]).abs().max() > 1e-3  # the actor itself replays
