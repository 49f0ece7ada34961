"""The reward-model role: model-based rewards (a learned reward model, an LLM judge) living in workers.

What crosses from the controller to the reward model is **text**, never the policy's token ids: the
controller decodes each response with the policy's tokenizer (``response_text``) and sends a
:class:`ScoreRequest` (the prompt's chat messages, the response, the row's fields); the scorer re-templates
that chat with its own tokenizer and chat template. A reward model with another vocabulary than the
policy's therefore scores exactly what it would score for the same text given to it directly.

Where the scorer lives: in the actor's workers (colocated; on a GPU it is moved to the CPU between uses
unless ``reward_model.offload=false``), or on workers of its own (``reward_model.n_gpus_per_node`` /
``nnodes``, a resource pool like the critic's and the reference model's, :mod:`rl_core.placement.pools`).
The controller splits the requests over the workers that hold it (:func:`split_requests`); every worker
runs the same number of micro-batch rounds, so a model sharded with FSDP (``reward_model.strategy=fsdp``)
keeps its collectives in step.

A scorer is what a :class:`~rl_core.cards.RewardModelCard`'s factory returns (``factory(config, context)``,
loaded once when the stack resolves: ``Stack.reward_model_fn``), from a plugin registering it through
``rl_core_register_reward_models`` (docs/reward-models.md). This module holds the requests, the scorer's
protocol, the controller's split and the worker's role; core reaches them through the ``reward_model``
feature (:mod:`rl_reward_model.feature`).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Protocol, Sequence, runtime_checkable

from rl_core.rewards.outcome import Outcome

__all__ = [
    "ModelScorer",
    "RewardModelRole",
    "ScoreRequest",
    "chat_of",
    "in_process",
    "plain_prompt",
    "requests_from_batch",
    "rounds_for",
    "split_requests",
]


class ScoreRequest(NamedTuple):
    """One response to score, as text (picklable, small)."""

    index: int  # the sample's row in the step's batch
    data_source: Any
    messages: tuple[dict[str, str], ...] | None  # the prompt as chat messages (the data row's "prompt"), if known
    prompt_text: str  # the prompt as plain text (the messages' contents), for templates
    response: str  # decoded with the policy's tokenizer (special tokens skipped)
    ground_truth: Any = None
    extra_info: Any = None


@runtime_checkable
class ModelScorer(Protocol):
    """What a reward-model card's factory returns.

    ``score`` returns one :class:`~rl_core.rewards.outcome.Outcome` per request, in order: ``OK`` with the
    score, ``ERROR`` with a message naming what failed (``extras={"parse_failure": 1}`` for an answer that
    could not be read), or ``TIMEOUT``. ``rounds`` is the number of micro-batch forwards every worker of the
    role runs this call (the same on all, for sharded models; a worker with fewer requests runs empty
    rounds). ``offload`` / ``onload`` (optional) move the model off / onto the device between uses.
    """

    def score(self, requests: Sequence[ScoreRequest], *, rounds: int | None = None) -> list[Outcome]: ...


def plain_prompt(messages: Sequence[dict[str, str]] | None, fallback: str = "") -> str:
    """The prompt as text: the messages' contents, one per line (no role markers, no template)."""
    if not messages:
        return fallback
    return "\n".join(str(m.get("content", "")) for m in messages)


def chat_of(request: ScoreRequest) -> list[dict[str, str]]:
    """The (prompt, response) conversation a reward model's chat template renders."""
    messages = list(request.messages) if request.messages else [{"role": "user", "content": request.prompt_text}]
    return [*({"role": m["role"], "content": m["content"]} for m in messages), {"role": "assistant", "content": request.response}]


def requests_from_batch(batch: Any, indices: Sequence[int]) -> list[ScoreRequest]:
    """Requests for rows ``indices`` of a rollout batch (needs the non-tensor ``response_text``)."""
    non = batch.non_tensors
    if "response_text" not in non:
        raise KeyError(f"model-based rewards need the non-tensor field 'response_text'; the batch has {sorted(batch.keys())}")
    column = lambda key: non[key] if key in non else None  # noqa: E731
    texts, raw, prompt_texts = non["response_text"], column("raw_prompt"), column("prompt_text")
    sources, truths, infos = column("data_source"), column("ground_truth"), column("extra_info")
    out = []
    for i in indices:
        messages = tuple(dict(m) for m in raw[i]) if raw is not None and raw[i] else None
        fallback = str(prompt_texts[i]) if prompt_texts is not None and prompt_texts[i] is not None else ""
        out.append(
            ScoreRequest(
                index=int(i),
                data_source=sources[i] if sources is not None else None,
                messages=messages,
                prompt_text=plain_prompt(messages, fallback),
                response=str(texts[i]) if texts[i] is not None else "",
                ground_truth=truths[i] if truths is not None else None,
                extra_info=infos[i] if infos is not None else None,
            )
        )
    return out


def split_requests(requests: Sequence[ScoreRequest], workers: int) -> list[list[ScoreRequest]]:
    """Contiguous, near-equal shares of ``requests`` for ``workers`` workers (some may get none)."""
    per, extra = divmod(len(requests), workers)
    out, start = [], 0
    for w in range(workers):
        size = per + (1 if w < extra else 0)
        out.append(list(requests[start : start + size]))
        start += size
    return out


def rounds_for(shares: Sequence[Sequence[Any]], micro_batch: int) -> int:
    """Micro-batch rounds every worker runs: enough for the largest share."""
    return max((math.ceil(len(s) / micro_batch) for s in shares), default=0)


def in_process(scorer: ModelScorer, batch: Any):
    """A ``model`` part for :meth:`RewardManager.score` that scores ``batch``'s rows with ``scorer`` in this process."""

    def part(rows: Sequence[int]) -> dict[int, Outcome]:
        requests = requests_from_batch(batch, rows)
        return {r.index: o for r, o in zip(requests, scorer.score(requests))}

    return part


class RewardModelRole:
    """The worker side: builds the card's scorer and moves it off the device between uses when asked."""

    def __init__(self, stack: Any, context: Any, *, colocated: bool) -> None:
        cfg = stack.config.reward_model
        card, factory = stack.reward_model, stack.reward_model_fn
        if card is None or factory is None:  # pragma: no cover - the resolver sets them whenever reward_model.enable
            raise ValueError("reward_model.enable is set but the stack has no loaded reward-model card; resolve the config first")
        # a card with a rollout_key (a generative judge) gets the rollout card the resolver found for it
        extra = {"rollout": stack.reward_model_rollout} if card.rollout_key else {}
        self.scorer = factory(stack.config, context, **extra)
        on_device = context.device != "cpu"
        self.offloads = bool(cfg.offload if cfg.offload is not None else (colocated and on_device)) and on_device
        if self.offloads and cfg.strategy == "fsdp":
            self.offloads = False  # sharded: its share is small; FSDP's parameters are not moved by hand
        if self.offloads:
            self._call("offload")

    def _call(self, name: str) -> None:
        fn = getattr(self.scorer, name, None)
        if fn is not None:
            fn()

    def score(self, requests: Sequence[ScoreRequest], rounds: int | None = None) -> list[Outcome]:
        if self.offloads:
            self._call("onload")
        try:
            out = list(self.scorer.score(list(requests), rounds=rounds))
        finally:
            if self.offloads:
                self._call("offload")
        if len(out) != len(requests):
            raise RuntimeError(f"the reward model returned {len(out)} outcomes for {len(requests)} requests")
        return out

    def shutdown(self) -> None:
        self._call("shutdown")
