"""Shared checks of a train backend's MoE routing replay (``actor.router_replay``; rl-routing-replay)."""

from __future__ import annotations

import torch
from rl_core.backends import SamplingParams, WorkerContext


def r3_rollout_batch(cfg, model_dir):
    """The hf rollout's batch of :func:`~rl_core_testing.rollout_conformance.prompt_batch` (2 samples, 6 tokens), with the
    routing it recorded (``cfg``: ``rollout.return_routed_experts=true``)."""
    from rl_core.rollout.hf import HFRolloutEngine

    from rl_routing_replay.feature import FEATURE

    from rl_core_testing.rollout_conformance import prompt_batch

    rollout = HFRolloutEngine(cfg, WorkerContext(features={"routing_replay": FEATURE}))
    return rollout.generate(prompt_batch(model_dir), SamplingParams(n=2, temperature=1.0, max_new_tokens=6, logprobs=True, seed=5))


def assert_r3_replays_the_rollout(actor, batch, experts: int) -> None:
    """Under R3 the actor's log-probs are the rollout's own (same weights, the rollout's routing replayed), it records
    nothing, and forcing other experts (each recorded one shifted by 1 of ``experts``) moves them (the replay decides)."""
    mask = batch["response_mask"].bool()
    lp = actor.compute_log_prob(batch)
    assert "routed_experts" not in lp  # R3 replays, it does not record
    torch.testing.assert_close(lp["log_probs"][mask], batch["rollout_log_probs"][mask], rtol=1e-5, atol=1e-5)
    routed = batch["routed_experts"]
    other = routed.clone()
    other[other >= 0] = (other[other >= 0] + 1) % experts
    batch["routed_experts"] = other
    moved = actor.compute_log_prob(batch)["log_probs"]
    batch["routed_experts"] = routed
    assert (moved[mask] - lp["log_probs"][mask]).abs().max() > 1e-3
