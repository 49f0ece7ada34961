"""A PPO micro-batch whose sequences differ a lot in length (packed-sequence tests and benches).

Prompts are left-padded to ``prompt_len`` and responses right-padded to
``response_len``; the update fields (``old_log_probs``, ``advantages``,
``ref_log_prob``, ``values``, ``returns``) are random and masked.
"""

from __future__ import annotations

from typing import Any

import torch
from rl_core.batch import Batch
from rl_core.util.positions import position_ids_from_mask


def mixed_length_batch(prompt_lens: list[int], response_lens: list[int], *, prompt_len: int | None = None, response_len: int | None = None,
                       vocab: int = 256, seed: int = 0) -> Batch:
    """Rows ``i`` with ``prompt_lens[i]`` prompt and ``response_lens[i]`` response tokens (ids 3 .. vocab + 2, pad 0)."""
    if len(prompt_lens) != len(response_lens):
        raise ValueError(f"{len(prompt_lens)} prompt lengths but {len(response_lens)} response lengths")
    g = torch.Generator().manual_seed(seed)
    rows = len(prompt_lens)
    P, R = prompt_len or max(prompt_lens), response_len or max(response_lens)
    prompts = torch.randint(3, vocab + 3, (rows, P), generator=g)
    responses = torch.randint(3, vocab + 3, (rows, R), generator=g)
    pmask = torch.zeros(rows, P, dtype=torch.long)
    rmask = torch.zeros(rows, R, dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompt_lens, response_lens)):
        if not (1 <= p <= P and 1 <= r <= R):
            raise ValueError(f"row {i}: prompt {p} / response {r} tokens do not fit 1..{P} / 1..{R}")
        pmask[i, P - p :] = 1
        rmask[i, :r] = 1
    prompts = prompts * pmask
    responses = responses * rmask
    mask = torch.cat([pmask, rmask], 1)
    lp = -torch.rand(rows, R, generator=g) * 3
    batch = Batch(
        {
            "prompts": prompts, "responses": responses, "input_ids": torch.cat([prompts, responses], 1), "attention_mask": mask,
            "position_ids": position_ids_from_mask(mask), "response_mask": rmask,
            "old_log_probs": lp * rmask, "ref_log_prob": (lp + 0.1 * torch.randn(rows, R, generator=g)) * rmask,
            "advantages": torch.randn(rows, R, generator=g) * rmask, "values": 0.1 * torch.randn(rows, R, generator=g) * rmask,
            "returns": torch.randn(rows, R, generator=g) * rmask,
        },
        {"uid": [f"u{i}" for i in range(rows)]},
        {"temperature": 1.0},
    )
    return batch


def loss_and_grads(backend: Any, batch: Batch, *, temperature: float = 0.7) -> tuple[torch.Tensor, dict[str, torch.Tensor], Any]:
    """One training forward of ``backend`` (a TrainBackend) over the whole ``batch`` as one micro-batch, its role's loss,
    the backward at weight 1: ``(loss, {name: full gradient}, heads)``. Sharded gradients are gathered (every rank
    must call it)."""
    from rl_core.algorithms.actor_loss import get_policy_loss
    from rl_core.train_engine import update as upd

    cfg = backend.config.critic if backend.role == "critic" else backend.config.actor
    extra, want_entropy = upd.loss_fields(backend.role, batch, cfg, False)
    x = upd.inputs(backend, batch, slice(0, len(batch)), extra)
    backend.model.train()
    heads = backend.forward(x, temperature=temperature, with_entropy=want_entropy, entropy_grad=True, training=True)
    policy_loss = None if backend.role == "critic" else get_policy_loss(cfg.policy_loss)
    loss, _ = upd.role_loss(backend.role, x, heads, cfg, False, policy_loss)
    backend.zero_grad()
    backend.backward(loss, 1.0)
    grads = {}
    for name, p in backend.model.named_parameters():
        g = p.grad
        grads[name] = (g.full_tensor() if hasattr(g, "full_tensor") else g).detach().clone()
    return loss.detach(), grads, heads
