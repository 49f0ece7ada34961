"""MoE routing replay (``actor.router_replay`` R2 / R3; rl-routing-replay) in the Megatron backend.

Where it hooks in
    megatron-core's ``TopKRouter`` hands its top-k choice to ``router.router_replay.get_replay_topk(scores, topk,
    num_groups, group_topk, compute_topk)`` when ``router_replay`` is set (``moe_utils.topk_routing_with_score_function``;
    megatron-core sets it from ``moe_enable_routing_replay``, whose instances live in one class-wide list: the engine
    sets its own :class:`LayerReplay` on each router instead, one per engine). So every router megatron-core builds
    here is covered the same way: softmax top-k (``moe_router_pre_softmax`` either way), the sigmoid routers of HY-V3 /
    GLM-4-MoE with their expert bias and GLM's group-limited choice. (Transformer Engine's fused router,
    ``moe_router_fusion``, would bypass it: the backend does not pass that field through.)

What a replayed router computes (rl-core's semantics, megatron-core's arithmetic)
    The router's own top-k runs first (its choice for tokens without a recorded routing, ``-1``: padding, the last
    sampled token, the rows and columns the engine adds); each recorded token's indices replace it, and megatron-core
    takes the weights from the current scores at those indices: the top-k logits' softmax (Qwen3-MoE:
    renormalised), the full softmax's values (Qwen2-MoE, ``norm_topk_prob=false``: not renormalised), or the sigmoid
    scores without the bias, renormalised and scaled (the bias only chooses). Where the recorded indices are the
    router's own, the result is bit-identical to the unreplayed forward; the router keeps its gradient.

Token layout (:class:`TokenMap`)
    A router sees this rank's tokens as ``[s_local, b]`` flattened (sequence-major). The engine builds, for each
    forward, the batch position (``row x S + column``, or -1 for a column / row the engine added) of every token its
    routers see, by applying to a ``[b, S]`` tensor of positions the same steps as to ``input_ids``: the expert-parallel
    padding (rows at the bottom, columns on the left), the sequence-parallel left padding, the context-parallel split
    (right padding, this rank's zig-zag chunks), the transpose to ``[s, b]`` and, under sequence parallelism, this TP
    rank's ``1 / TP`` of the columns (megatron-core's scatter). Pipeline stages (and VPP chunks) hold a subset of the
    layers: each router is told its global layer (``layer_number - 1``) and reads that slot. Expert parallelism moves
    tokens after routing only. Replay reads ``routed_experts [b, S, layers, k]`` at those positions; R2's recording
    writes each router's choice back at them and takes the element-wise max over the TP x CP ranks (each holds other
    tokens) and the pipeline stages (each other layers): every rank returns the whole ``[b, S, layers, k]``.
"""

from __future__ import annotations

import torch

from rl_core.problems import UserError
from rl_core.train_engine.backend import NO_ROUTE  # the routed_experts layout's unrouted mark (rl-routing-replay's)

KEY = "actor.router_replay"


class RouterReplayError(UserError, ValueError):
    """A batch or setting routing replay cannot handle, naming the key and the fix."""


class LayerReplay:
    """One router's replay state: megatron-core calls :meth:`get_replay_topk` in place of its top-k."""

    def __init__(self, layer: int, experts: int) -> None:
        self.layer, self.experts = layer, experts
        self.target: torch.Tensor | None = None  # [tokens the router sees, k] long, -1 rows route natively
        self.recorded: list[torch.Tensor] = []
        self.recording = False

    def get_replay_topk(self, scores, topk, num_groups=None, group_topk=None, default_compute_topk=None):
        values, indices = default_compute_topk(scores, topk, num_groups=num_groups, group_topk=group_topk)
        if self.recording:
            self.recorded.append(indices.detach().clone())
        if self.target is None:
            return values, indices
        target = self.target.to(indices.device)
        if target.shape != indices.shape:
            raise RouterReplayError(
                f"{KEY}: the router of layer {self.layer} saw {indices.shape[0]} tokens (top-k {indices.shape[1]}) but the replayed "
                f"routing holds {tuple(target.shape)}: the batch's rows or tokens were changed before the forward"
            )
        known = (target >= 0).all(-1, keepdim=True)
        chosen = torch.where(known, target, indices)
        return scores.gather(1, chosen), chosen


def routers(chunks) -> list[tuple[int, torch.nn.Module]]:
    """``(global decoder layer, TopKRouter)`` of every MoE layer in this rank's model chunks."""
    out = []
    for chunk in chunks:
        for m in chunk.modules():
            if type(m).__name__ == "TopKRouter":
                out.append((int(m.layer_number) - 1, m))
    return out


class TokenMap:
    """The batch position of each token this rank's routers see in one forward; see the module docstring."""

    def __init__(self, rows: int, columns: int, device) -> None:
        self.shape = (rows, columns)
        self.pos = torch.arange(rows * columns, device=device).view(rows, columns)

    def fit(self, y: dict[str, torch.Tensor]) -> None:
        """Padded as ``y`` was (rows at the bottom, columns on the left: expert- and sequence-parallel padding)."""
        b, s = y["input_ids"].shape
        rows, cols = self.pos.shape
        self.pos = torch.nn.functional.pad(self.pos, (s - cols, 0, 0, b - rows), value=NO_ROUTE)

    def local(self, split, tp: int, tp_rank: int, sp: bool) -> torch.Tensor:
        """``[tokens]``: the positions in the routers' order on this rank (context split, ``[s, b]``, sequence split)."""
        pos = split.local(self.pos, value=NO_ROUTE) if split is not None else self.pos
        pos = pos.t()
        if sp:
            pos = pos.chunk(tp, dim=0)[tp_rank]
        return pos.reshape(-1)


def top_k_free(given: dict | None) -> bool:
    """Whether train.options.transformer_config (``given``) routes without a top-k to record or replay (sinkhorn)."""
    return str((given or {}).get("moe_router_load_balancing_type", "")).strip("'\"") == "sinkhorn"


def wanted(config, role: str, shape, given: dict | None) -> bool:
    """Whether this role replays (``actor.router_replay`` on the actor); what it cannot replay is refused by key (before
    the engine sets up its process groups)."""
    mode = getattr(config.actor, "router_replay", "disabled")
    if mode == "disabled" or role != "actor":
        return False
    if not shape.moe:
        raise RouterReplayError(f"{KEY}={mode}: the {shape.family} model has no MoE routers to replay; set it to disabled")
    if top_k_free(given):
        raise RouterReplayError(
            f"{KEY}={mode}: train.options.transformer_config.moe_router_load_balancing_type=sinkhorn routes without a top-k that can be "
            "replayed; set actor.router_replay=disabled, or another moe_router_load_balancing_type"
        )
    return True


class MegatronRouterReplay:
    """The actor's routers under ``actor.router_replay``: :meth:`replay` / :meth:`record` per forward."""

    def __init__(self, chunks, shape) -> None:
        self.shape = shape
        self.routers = routers(chunks)
        self.layers, self.top_k = shape.layers, shape.topk
        for layer, r in self.routers:
            r.router_replay = LayerReplay(layer, shape.experts)

    def check(self, routed: torch.Tensor, input_ids: torch.Tensor) -> None:
        b, S = input_ids.shape
        if routed.dim() != 4 or tuple(routed.shape) != (b, S, self.layers, self.top_k):
            raise RouterReplayError(
                f"{KEY}: routed_experts has shape {tuple(routed.shape)}; this model needs [rows, tokens, layers, top-k] = "
                f"[{b}, {S}, {self.layers}, {self.top_k}] (rows and tokens as input_ids)"
            )
        if routed.numel() and (int(routed.max()) >= self.shape.experts or int(routed.min()) < NO_ROUTE):
            raise RouterReplayError(
                f"{KEY}: routed_experts holds expert {int(routed.max())} / {int(routed.min())}; the model has experts 0..{self.shape.experts - 1} "
                "(-1: no recorded routing); the routing was recorded for another model"
            )

    def replay(self, routed: torch.Tensor, tokens: torch.Tensor) -> None:
        """Route the tokens at batch positions ``tokens`` (-1: added by the engine, native) to ``routed [b, S, L, k]``."""
        flat = routed.reshape(-1, self.layers, self.top_k).to(tokens.device).long()
        known = tokens >= 0
        picked = flat.index_select(0, tokens.clamp(min=0))
        picked[~known] = NO_ROUTE
        for layer, r in self.routers:
            r.router_replay.target = picked[:, layer]

    def start_recording(self) -> None:
        for _, r in self.routers:
            r.router_replay.recording, r.router_replay.recorded = True, []

    def recorded(self, tokens: torch.Tensor, shape: tuple[int, int], groups) -> torch.Tensor:
        """The recording of the last forward as ``[b, S, layers, k]`` int16 on every rank (``groups``: the process groups
        whose ranks hold other tokens or other layers: TP x CP, pipeline)."""
        b, S = shape
        out = torch.full((b * S, self.layers, self.top_k), NO_ROUTE, dtype=torch.long, device=tokens.device)
        known = tokens >= 0
        for layer, r in self.routers:
            fires = r.router_replay.recorded
            if len(fires) != 1 or fires[0].shape[0] != tokens.shape[0]:
                raise RouterReplayError(f"{KEY}: the router of layer {layer} ran {len(fires)} times ({[tuple(f.shape) for f in fires]}) in one "
                                        f"recorded forward of {tokens.shape[0]} tokens")
            out[tokens[known], layer] = fires[0][known].to(out.device)
        for group in groups:
            if group is not None and torch.distributed.get_world_size(group) > 1:
                torch.distributed.all_reduce(out, op=torch.distributed.ReduceOp.MAX, group=group)
        return out.view(b, S, self.layers, self.top_k).to(torch.int16)

    def stop(self) -> None:
        """Routers route natively again (nothing kept)."""
        for _, r in self.routers:
            rr = r.router_replay
            rr.target, rr.recording, rr.recorded = None, False, []
