"""MoE routing replay (verl's ``router_replay.mode`` R2 / R3): record the top-k experts each token was routed to, and
force a later forward to route every token to those experts.

Why: in an MoE policy a tiny change of the weights (or of the numerics: another engine, another batch shape) can
route a token to other experts, so the trainer's log-probs are not those of the policy that sampled the token.
R2 replays, in the actor's update, the routing of the actor's own old-log-prob pass; R3 replays the routing the
rollout engine used, in the old-log-prob pass and in the update (``actor.router_replay``,
``rollout.return_routed_experts``).

Layout (the batch field ``routed_experts``)
    ``[rows, prompt + response, num_hidden_layers, top_k]`` int16, aligned with ``input_ids``: slot ``l`` is decoder
    layer ``l`` (dense layers stay empty), as vLLM's ``CompletionOutput.routed_experts`` numbers them. ``-1`` marks a
    token without a recorded routing (padding, a layer without a router, the last sampled token, which no forward
    routed); such a token routes natively.

What a replayed router computes (the same as megatron-core's ``RouterReplay`` and verl's VeOmni patch)
    The router's logits and probabilities as always (``softmax`` in float32), the recorded indices instead of the
    top-k, and as weights the current probabilities at those indices (renormalised where the model renormalises its
    top-k). So the experts' outputs are weighted by the router being trained and the router still gets its gradient;
    only the choice of experts is fixed. Where the recorded indices are the model's own top-k, the output is
    bit-identical to the unreplayed forward.

Routers handled: transformers' top-k router modules of :data:`ROUTERS` (Qwen2-MoE, Qwen3-MoE, Qwen3-Next, Qwen3.5-MoE,
Qwen3-VL-MoE, OLMoE, Mixtral: a linear router, softmax, top-k); any other MoE model is refused by
:func:`install` naming its router class.

Token alignment in the trainer's forwards
    Forwards drop padding columns every row shares (``rl_core.logprobs``), never a row and never a real token, so
    the real tokens (``attention_mask`` 1) reach the routers in the same row-major order as in the batch: a
    pre-forward hook on the model reads the forward's own ``attention_mask`` and :class:`RouterReplay` places the
    recorded rows there. A forward whose real tokens do not match the targets' count is an error, never a silent
    misplacement. The shared-prompt forward (one prompt row for a group) reorders rows, so a backend turns it off
    under replay.
"""

from __future__ import annotations

import contextlib
import re
from typing import Iterator

import torch
from rl_core.train_engine.backend import NO_ROUTE  # the batch contract's mark of an unrouted token (-1)

__all__ = ["NO_ROUTE", "ROUTERS", "RouterReplay", "RoutingReplayError", "RolloutRecorder", "find_routers", "num_layers", "stack_rollout"]

#: router class -> (renormalises its top-k: "always" or "attr" (its norm_topk_prob), casts the weights to the logits' dtype)
ROUTERS: dict[str, tuple[str, bool]] = {
    "Qwen2MoeTopKRouter": ("attr", True),
    "Qwen3MoeTopKRouter": ("attr", True),
    "Qwen3NextTopKRouter": ("attr", True),
    "OlmoeTopKRouter": ("attr", True),
    "Qwen3_5MoeTopKRouter": ("always", True),
    "Qwen3VLMoeTextTopKRouter": ("always", True),
    "MixtralTopKRouter": ("always", False),
}
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


class RoutingReplayError(ValueError):
    """A model or batch routing replay cannot handle, with the key and the fix."""


def find_routers(model: torch.nn.Module) -> list[tuple[int, torch.nn.Module]]:
    """``(decoder layer, router)`` of every top-k router in ``model``, in layer order."""
    out = []
    for name, m in model.named_modules():
        if type(m).__name__.lower().endswith("topkrouter") or type(m).__name__ in ROUTERS:
            hit = _LAYER.search(name)
            if hit is None:
                raise RoutingReplayError(f"routing replay: cannot tell the decoder layer of router {name!r}; set actor.router_replay=disabled")
            out.append((int(hit.group(1)), m))
    return sorted(out, key=lambda lm: lm[0])


def num_layers(model: torch.nn.Module) -> int:
    cfg = getattr(model, "config", None)
    cfg = getattr(cfg, "text_config", None) or cfg
    return int(getattr(cfg, "num_hidden_layers", 0) or 0)


class RouterReplay:
    """Records and forces the top-k experts of one model's routers; see the module docstring.

    ``install(model)`` once; then, per forward, one of the contexts :meth:`recording` or :meth:`replaying` (outside
    them the routers run as always).
    """

    def __init__(self, model: torch.nn.Module, key: str = "actor.router_replay") -> None:
        self.key = key
        routers = find_routers(model)
        if not routers:
            raise RoutingReplayError(
                f"{key}: the {getattr(getattr(model, 'config', None), 'model_type', type(model).__name__)} model has no MoE top-k "
                "routers to replay; set it to disabled"
            )
        for layer, r in routers:
            if type(r).__name__ not in ROUTERS:
                raise RoutingReplayError(
                    f"{key}: the router {type(r).__name__} (layer {layer}) is not one rl-core can replay "
                    f"(it replays {', '.join(sorted(ROUTERS))}); set it to disabled"
                )
        self.layers = num_layers(model) or (routers[-1][0] + 1)
        self.top_k = int(routers[0][1].top_k)
        self.router_layers = [layer for layer, _ in routers]
        self._mode: str | None = None
        self._fires: dict[int, list[torch.Tensor]] = {}
        self._targets: torch.Tensor | None = None  # [N real tokens, layers, k]
        self._real: torch.Tensor | None = None  # flat row positions of the real tokens in the current forward
        self._last_mask: torch.Tensor | None = None  # the last forward's attention_mask [b, width] (bool)
        for layer, r in routers:
            r.forward = self._wrapped(layer, r, r.forward)
        model.register_forward_pre_hook(self._read_mask, with_kwargs=True)

    # ------------------------------------------------------------ contexts
    @contextlib.contextmanager
    def recording(self) -> Iterator[dict[int, list[torch.Tensor]]]:
        """Each router's top-k of every call, ``{layer: [indices [tokens, k] int16, ...]}`` in call order (the tokens
        as the router saw them: a forward's ``batch x width``, row-major)."""
        self._mode, self._fires = "record", {layer: [] for layer in self.router_layers}
        try:
            yield self._fires
        finally:
            self._mode = None

    def replay(self, routed: torch.Tensor, attention_mask: torch.Tensor) -> None:
        """From now on (until :meth:`stop`) forwards route the real tokens of ``attention_mask`` ([b, S]) to
        ``routed`` ([b, S, layers, k]); kept through the backward (activation checkpointing recomputes the routers)."""
        if routed.dim() != 4 or routed.shape[:2] != attention_mask.shape or routed.shape[2] != self.layers or routed.shape[3] != self.top_k:
            raise RoutingReplayError(
                f"{self.key}: routed_experts has shape {tuple(routed.shape)}; this model needs [rows, {tuple(attention_mask.shape)[1]} "
                f"tokens, {self.layers} layers, top-k {self.top_k}] (rows and tokens as input_ids {tuple(attention_mask.shape)})"
            )
        self._mode, self._targets, self._real = "replay", routed[attention_mask.bool()].to(torch.long), None

    def stop(self) -> None:
        """Routers run natively again."""
        self._mode, self._targets, self._real = None, None, None

    @contextlib.contextmanager
    def replaying(self, routed: torch.Tensor, attention_mask: torch.Tensor) -> Iterator[None]:
        """:meth:`replay` for the forwards (and backwards) inside."""
        self.replay(routed, attention_mask)
        try:
            yield
        finally:
            self.stop()

    def recorded_layout(self, attention_mask: torch.Tensor, forward_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The last :meth:`recording` of one forward as ``[b, S, layers, k]`` int16 for the batch's ``attention_mask``
        ``[b, S]`` (``forward_mask``: the mask the forward ran with, default the last forward's; padding columns it
        dropped hold no tokens)."""
        mask = attention_mask.bool()
        fwd = self._last_mask if forward_mask is None else forward_mask.bool()
        out = torch.full((*mask.shape, self.layers, self.top_k), NO_ROUTE, dtype=torch.int16)
        real = fwd.reshape(-1).nonzero().squeeze(1).cpu()
        if int(real.numel()) != int(mask.sum()):
            raise RoutingReplayError(f"{self.key}: the forward routed {real.numel()} real tokens, the batch has {int(mask.sum())}")
        per_token = torch.full((real.numel(), self.layers, self.top_k), NO_ROUTE, dtype=torch.int16)
        for layer, fires in self._fires.items():
            if len(fires) != 1:
                raise RoutingReplayError(f"{self.key}: layer {layer}'s router ran {len(fires)} times in one recorded forward")
            per_token[:, layer] = fires[0].cpu()[real]
        out[mask.cpu()] = per_token
        return out

    # ----------------------------------------------------------- internals
    def _read_mask(self, module, args, kwargs):
        mask = kwargs.get("attention_mask")
        if isinstance(mask, torch.Tensor) and mask.dim() == 2:
            self._last_mask = mask.bool()
            if self._mode == "replay":
                self._real = mask.bool().reshape(-1).nonzero().squeeze(1)
                if self._real.numel() != self._targets.shape[0]:
                    raise RoutingReplayError(
                        f"{self.key}: this forward has {self._real.numel()} real tokens but routed_experts holds "
                        f"{self._targets.shape[0]}: the batch's rows or tokens were changed before the forward"
                    )
        return None

    def _wrapped(self, layer: int, router: torch.nn.Module, forward):
        renorm, cast = ROUTERS[type(router).__name__]

        def replayed(hidden_states):
            logits, scores, indices = forward(hidden_states)
            if self._mode == "record":
                if torch.is_grad_enabled() and self._fires[layer]:  # activation checkpointing's recompute: already recorded
                    return logits, scores, indices
                self._fires[layer].append(indices.detach().to(torch.int16))
                return logits, scores, indices
            if self._mode != "replay":
                return logits, scores, indices
            if self._real is None:
                raise RoutingReplayError(f"{self.key}: a router ran before the model's forward was given its attention_mask")
            if logits.shape[0] != self._last_mask.numel():
                raise RoutingReplayError(f"{self.key}: router of layer {layer} saw {logits.shape[0]} tokens, the forward has {self._last_mask.numel()}")
            target = self._targets[:, layer].to(indices.device)
            known = (target >= 0).all(-1)
            chosen = indices.clone()
            chosen[self._real[known]] = target[known]
            probs = torch.softmax(logits.float(), dim=-1)
            weights = probs.gather(1, chosen)
            if renorm == "always" or getattr(router, "norm_topk_prob", False):
                weights = weights / weights.sum(dim=-1, keepdim=True)
            if cast:
                weights = weights.to(logits.dtype)
            return logits, weights, chosen

        return replayed


def stack_rollout(prefill: list[torch.Tensor], steps: list[list[torch.Tensor]], rows: int, prompt_width: int, n: int, response_width: int,
                  layers: int, router_layers: list[int]) -> torch.Tensor:
    """The hf rollout's recording as ``[rows * n, prompt_width + response_width, layers, k]`` int16.

    ``prefill``: per router (``router_layers`` order) its prompt call ``[rows * prompt_width, k]``; ``steps``: per
    router its decode calls, call ``t`` ``[rows * n, k]`` for response token ``t`` (the last sampled token is never
    fed back: it stays unrouted)."""
    k = prefill[0].shape[-1]
    out = torch.full((rows * n, prompt_width + response_width, layers, k), NO_ROUTE, dtype=torch.int16)
    for j, layer in enumerate(router_layers):
        out[:, :prompt_width, layer] = prefill[j].reshape(rows, prompt_width, k).repeat_interleave(n, dim=0).cpu()
        for t, call in enumerate(steps[j]):
            out[:, prompt_width + t, layer] = call.reshape(rows * n, k).cpu()
    return out


class RolloutRecorder:
    """The hf rollout's side of R3 (``rollout.return_routed_experts``): a :class:`RouterReplay` on the engine's model whose
    :meth:`recording` wraps each chunk's decode and lays its recording out (:meth:`chunk`), :meth:`routed_experts` joins
    the chunks into the batch's ``routed_experts`` (padding and the unrouted last token: :data:`NO_ROUTE`)."""

    def __init__(self, model: torch.nn.Module, key: str = "rollout.return_routed_experts") -> None:
        self.replay = RouterReplay(model, key=key)

    @contextlib.contextmanager
    def recording(self, into: list[torch.Tensor], rows: int, P: int, n: int, R: int):
        """One chunk's decode (``rows`` prompts of ``P`` tokens, ``n`` samples of up to ``R``) recorded, appended to ``into``."""
        with self.replay.recording() as fires:
            yield
        into.append(self.chunk(fires, rows, P, n, R))

    def chunk(self, fires: dict[int, list[torch.Tensor]], rows: int, P: int, n: int, R: int) -> torch.Tensor:
        """One chunk's recording (the prompt's forward, then one call per fed-back response token) as ``[rows * n, P + R, layers, k]``."""
        layers = self.replay.router_layers
        return stack_rollout([fires[layer][0] for layer in layers], [fires[layer][1:] for layer in layers], rows, P, n, R, self.replay.layers, layers)

    def routed_experts(self, chunks: list[torch.Tensor], attention_mask: torch.Tensor) -> torch.Tensor:
        experts = torch.cat(chunks)
        experts[~attention_mask.bool()] = NO_ROUTE
        return experts
