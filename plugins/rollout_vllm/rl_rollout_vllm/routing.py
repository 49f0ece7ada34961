"""MoE routing replay R3 with vLLM: the experts vLLM routed each token to, as rl-core's batch field ``routed_experts``.

What vLLM returns (``LLM(enable_return_routed_experts=True)``; vLLM 0.26's default V1 model runner captures it)
    Per finished request, ``CompletionOutput.routed_experts``: a numpy array ``[tokens, num_hidden_layers, top_k]``
    (uint8; uint16 above 256 experts) of the expert ids each MoE router picked, captured in the router before
    vLLM maps them to expert-parallel ranks: global (logical) ids, the same with TP or EP. The rows are the prompt's
    tokens (all of them, a prefix-cache hit included: vLLM keeps the routing with the cached KV blocks) and then each
    fed-back response token, so ``prompt + response - 1`` rows: the last sampled token is never forwarded. Layer slot
    ``l`` is decoder layer ``l`` (vLLM's MoE ``layer_id`` is the index in ``model.layers.<l>.``); a layer without a
    router stays 0 there.

What rl-core wants (:mod:`rl_routing_replay.replay`)
    ``[rows, P + R, num_hidden_layers, top_k]`` int16 aligned with ``input_ids`` (prompt left-padded to ``P``,
    response right-padded to ``R``), ``-1`` on padding, on the last sampled token and on every layer without a router:
    what the hf rollout records. :func:`routed_field` builds it and refuses (naming the sample) any array whose token
    count, layers or top-k do not match, never a silent misplacement.

Which layers route
    The HF model's routers (:func:`rl_routing_replay.replay.find_routers` on the model built on the meta device) are
    the layers the trainer replays; the engine checks at start-up that vLLM's MoE layers (:func:`worker_moe_layers`,
    the modules vLLM binds its capture to) are the same decoder layers, so slot ``l`` means the same layer on both
    sides.
"""

from __future__ import annotations

from typing import Any, Sequence

import attrs
import torch
from rl_routing_replay.replay import NO_ROUTE, find_routers, num_layers


class RoutedExpertsError(ValueError):
    """vLLM's routing does not fit the batch or the model (the message names the sample or the layers)."""


@attrs.frozen
class RoutingLayout:
    """What the batch field holds per token: ``layers`` decoder layers (``router_layers`` of them route), ``top_k``."""

    layers: int
    router_layers: tuple[int, ...]
    top_k: int


def hf_layout(config) -> RoutingLayout:
    """The HF model's routing layout, from the model built on the meta device (no weights, no memory)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    m = config.model
    hf_cfg = AutoConfig.from_pretrained(m.path, trust_remote_code=m.trust_remote_code)
    for key, value in (m.override_config or {}).items():
        setattr(hf_cfg, key, value)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_cfg, trust_remote_code=m.trust_remote_code)
    routers = find_routers(model)
    if not routers:
        raise RoutedExpertsError(
            f"rollout.return_routed_experts: the {hf_cfg.model_type} model at {m.path} has no MoE top-k routers; "
            "set rollout.return_routed_experts=false and actor.router_replay=disabled"
        )
    return RoutingLayout(num_layers(model) or routers[-1][0] + 1, tuple(layer for layer, _ in routers), int(routers[0][1].top_k))


def worker_moe_layers(worker) -> list[int]:
    """The decoder layers whose MoE router vLLM captures (runs in the worker, ``collective_rpc``): the modules its
    model runner binds the capture to (an ``MoERunner`` with a ``BaseRouter``), by their ``layer_id``."""
    from vllm.model_executor.layers.fused_moe.layer import MoERunner
    from vllm.model_executor.layers.fused_moe.router.base_router import BaseRouter

    model = worker.model_runner.get_model()
    return sorted({int(m.layer_id) for m in model.modules() if isinstance(m, MoERunner) and isinstance(m.router, BaseRouter)})


def check_layers(layout: RoutingLayout, vllm_layers: Sequence[int], model_path: str) -> None:
    """vLLM's MoE layers must be the HF model's router layers (slot ``l`` is the same decoder layer on both sides)."""
    if tuple(vllm_layers) != layout.router_layers:
        raise RoutedExpertsError(
            f"rollout.return_routed_experts: vLLM routes the model at {model_path} in decoder layers {list(vllm_layers)}, "
            f"transformers in {list(layout.router_layers)}: the recorded routing would be replayed in other layers; "
            "set rollout.return_routed_experts=false (actor.router_replay=R2 records the actor's own) or use rollout.name=hf"
        )


def routed_field(arrays: Sequence[Any], prompt_mask: torch.Tensor, n: int, response_lengths: torch.Tensor, R: int,
                 layout: RoutingLayout) -> torch.Tensor:
    """The batch's ``routed_experts`` ``[B * n, P + R, layers, k]`` int16 from vLLM's per-sample arrays.

    ``arrays[r]``: sample ``r``'s ``CompletionOutput.routed_experts`` (the n samples of a prompt adjacent);
    ``prompt_mask``: the prompts' ``attention_mask`` ``[B, P]``; ``response_lengths``: each sample's token count.
    A sample with no response token keeps -1 everywhere (its row carries no loss; its prompt routes natively)."""
    pmask = prompt_mask.bool().cpu().repeat_interleave(n, dim=0)
    rows, P = pmask.shape
    if len(arrays) != rows:
        raise RoutedExpertsError(f"vLLM returned routing for {len(arrays)} samples, the batch has {rows}")
    out = torch.full((rows, P + R, layout.layers, layout.top_k), NO_ROUTE, dtype=torch.int16)
    routed = torch.tensor(layout.router_layers, dtype=torch.long)
    for r, array in enumerate(arrays):
        k = int(response_lengths[r])
        if k == 0:
            continue
        if array is None:
            raise RoutedExpertsError(f"vLLM returned no routed experts for sample {r} although the engine was built to "
                                     "return them (enable_return_routed_experts)")
        got = torch.as_tensor(array.astype("int16") if hasattr(array, "astype") else array).to(torch.int16)
        positions = torch.cat([pmask[r].nonzero().squeeze(1), P + torch.arange(k)])[:-1]  # the last sampled token: unrouted
        if got.dim() != 3 or got.shape[0] != positions.numel() or tuple(got.shape[1:]) != (layout.layers, layout.top_k):
            raise RoutedExpertsError(
                f"vLLM's routed experts of sample {r} have shape {tuple(got.shape)}; its {int(pmask[r].sum())} prompt and {k} "
                f"response tokens need [{positions.numel()} routed tokens, {layout.layers} layers, top-k {layout.top_k}]"
            )
        out[r, positions.unsqueeze(1), routed.unsqueeze(0)] = got[:, routed]
    return out
