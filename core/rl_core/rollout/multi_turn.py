"""Multi-turn (agent) rollouts: the contract between rollout backends and a plugin's agent runtime (rl-agent holds
the tools, parsers and loops). A backend exposes a batched turn, :data:`Decode` ``(prompts, budgets, stop) ->
list[Generated]`` (or hands :class:`MultiTurn` its ``continue_ids``); the batch's ``response_mask`` is 1 on sampled
tokens only, ``rollout_log_probs`` 0 on inserted tokens. rl-agent's ``MultiTurnConformance`` checks every backend.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any, Callable, Protocol, Sequence

import attrs
import torch

from rl_core.batch import Batch
from rl_core.cards import load_object
from rl_core.problems import Problem
from rl_core.rollout.samples import Sample

ContinueIds = Callable[[list[list[int]], list[int], tuple[str, ...]], list[Sample]]

__all__ = ["AgentRuntime", "ContinueIds", "Decode", "Generated", "MultiTurn", "agent_runtime", "cut_at_stop", "eos_token_ids",
           "final_turn_mask", "require_agent", "unique_ids"]

#: the card kinds an agent runtime reads (tools, tool-call formats, agent loops)
AGENT_KINDS = ("tool", "tool_parser", "agent_loop")


@attrs.frozen
class Generated:
    """One turn of one trajectory: the engine's exact sampled ids (the stop string's last token included)."""

    token_ids: tuple[int, ...]
    log_probs: tuple[float, ...] | None
    finish_reason: str  # "eos", "stop" (a stop string, e.g. the end of a tool call) or "length"


Decode = Callable[[list[list[int]], list[int], tuple[str, ...]], list[Generated]]


class AgentRuntime(Protocol):
    """What a rollout backend calls for ``rollout.multi_turn`` (a plugin's runner builds it: :func:`agent_runtime`)."""

    def tool_schemas(self) -> list[dict] | None:
        """The configured tools' function schemas (the trainer renders them into the prompts), or None."""

    def setup(self, tokenizer: Any) -> Any:
        """Tools, parser and loops for one engine, built once (fails on an unknown tool, format or default loop)."""

    def rollout(self, setup: Any, batch: Batch, params: Any, decode: Decode, *, pad_id: int, eos_ids: Sequence[int]) -> Batch:
        """``params.n`` trajectories per prompt of ``batch``, each turn of all active ones decoded by one ``decode`` call."""


def multi_turn_on(config: Any) -> bool:
    """``rollout.multi_turn.enable``: the section is rl-agent's (a ConfigSectionCard), absent (off) without the package."""
    return bool(getattr(getattr(config.rollout, "multi_turn", None), "enable", False))


def agent_runtime(config: Any, registry: Any) -> tuple[AgentRuntime | None, list[Problem]]:
    """The runtime of ``rollout.multi_turn`` (None when off): ``runner(multi_turn_config, cards)`` of the agent-loop
    card it names, else the one runner the installed loop cards name; ``cards`` holds the agent kinds only."""
    if not multi_turn_on(config):
        return None, []
    mt = config.rollout.multi_turn
    loops = registry.cards.get("agent_loop", {})
    chosen = loops.get(mt.agent_loop)
    runners = sorted({c.runner for c in loops.values() if c.runner is not None}, key=str)
    if chosen is not None and chosen.runner is not None:
        runner, card = chosen.runner, chosen
    elif len(runners) == 1:
        runner, card = runners[0], next(c for c in loops.values() if c.runner == runners[0])
    elif not runners:
        return None, [Problem(key="rollout.multi_turn.enable", what="is true but no installed plugin runs agent loops (no agent_loop card names a runner)",
                              fix="pip install rl-agent (plugins/agent in this repository), or set rollout.multi_turn.enable=false")]
    else:
        return None, [Problem(key="rollout.multi_turn.agent_loop", what=f"{mt.agent_loop!r} names no runner and the installed agent loops name several ({', '.join(map(str, runners))})",
                              fix="set rollout.multi_turn.agent_loop to a loop of the plugin whose runner should run the trajectories")]
    try:
        factory = load_object(runner)
    except Exception as exc:  # noqa: BLE001 - a plugin's import failure is reported by name
        return None, [Problem(key="rollout.multi_turn.agent_loop", what=f"agent_loop {card.name!r} from {card.provider or 'an unregistered card'} has a runner {runner!r} that does not load: {type(exc).__name__}: {exc}",
                              fix=f"fix the card's runner path (report it to the authors of {card.provider.distribution if card.provider else 'the plugin'})")]
    cards = attrs.evolve(registry, cards={k: dict(registry.cards.get(k, {})) for k in AGENT_KINDS}, plugins=[])
    return factory(mt, cards), []


def require_agent(agent: AgentRuntime | None, engine: str = "this rollout engine") -> AgentRuntime:
    """``agent`` (``WorkerContext.agent``), or a clear error for an engine built without the resolved stack."""
    if agent is None:
        raise RuntimeError(
            f"rollout.multi_turn.enable is true but {engine} was built without an agent runtime (WorkerContext.agent is None); "
            "build engines from the resolved stack (rl_core.plan.resolver.resolve: Plan.agent, which the workers pass on), "
            "or pass WorkerContext(agent=rl_core.rollout.multi_turn.agent_runtime(config, registry)[0]) yourself"
        )
    return agent


class MultiTurn:
    """The agent set-up of one engine (tools, parser, loops of ``rollout.multi_turn``), built once."""

    def __init__(self, config, tokenizer, eos_ids: Sequence[int], *, agent: AgentRuntime | None = None) -> None:
        self.agent = require_agent(agent)
        self.setup = self.agent.setup(tokenizer)
        self.tokenizer = tokenizer
        self.eos_ids = [int(i) for i in eos_ids]

    def generate(self, batch: Batch, params, continue_ids: ContinueIds, *, pad_id: int) -> Batch:
        """``params.n`` trajectories per prompt of ``batch`` (the layout of :meth:`AgentRuntime.rollout`)."""
        eos = set(self.eos_ids)
        decode = lambda ids: self.tokenizer.decode(ids, skip_special_tokens=False)  # noqa: E731

        def decode_turn(prompts, budgets, stop):
            outs = continue_ids(prompts, budgets, stop)
            if len(outs) != len(prompts):
                raise RuntimeError(f"the engine answered {len(outs)} of {len(prompts)} multi-turn requests")
            return [_generated(cut_at_stop(s, stop, decode), budget, eos) for s, budget in zip(outs, budgets)]

        out = self.agent.rollout(self.setup, batch, params, decode_turn, pad_id=pad_id, eos_ids=self.eos_ids)
        if (problem := _rollout_problem(out, len(batch) * params.n, params.max_new_tokens)) is not None:
            raise RuntimeError(f"the agent runtime {_who(self.agent)} broke the multi-turn contract: {problem}; it returns the "
                               "rollout batch of rl_core.rollout.output.rollout_batch (report it to the plugin's authors)")
        return out


def _rollout_problem(out: Any, rows: int, R: int) -> str | None:
    """What is wrong with an agent runtime's rollout batch (``responses`` / ``response_mask`` of ``rows x R``)."""
    if not isinstance(out, Batch):
        return f"it returned {type(out).__name__}, not a Batch"
    for key in ("responses", "response_mask"):
        t = out.tensors.get(key)
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != (rows, R):
            return f"its {key} is {tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}, not ({rows}, {R})"
    return None


def _who(obj: Any) -> str:
    """``module.Class (distribution version)`` of a plugin's object."""
    module = type(obj).__module__
    name = f"{module}.{type(obj).__qualname__}"
    dists = metadata.packages_distributions().get(module.split(".")[0], [])
    if dists:
        try:
            name += f" ({dists[0]} {metadata.version(dists[0])})"
        except metadata.PackageNotFoundError:
            name += f" ({dists[0]})"
    return name


def _generated(sample: Sample, budget: int, eos: set[int]) -> Generated:
    ids = tuple(int(i) for i in sample.token_ids[:budget])
    lps = None if sample.log_probs is None else tuple(float(x) for x in sample.log_probs[: len(ids)])
    if ids and ids[-1] in eos:
        finish = "eos"
    elif sample.finish_reason != "stop" and (sample.finish_reason == "length" or len(ids) >= budget):
        finish = "length"
    else:
        finish = "stop"
    return Generated(ids, lps, finish)


def final_turn_mask(response_mask: torch.Tensor) -> torch.Tensor:
    """1 on each row's last run of sampled tokens (its last assistant turn, what ``solution_str`` is decoded from),
    0 elsewhere."""
    mask = response_mask.bool()
    out = torch.zeros_like(mask)
    for r in range(mask.shape[0]):
        on = mask[r].nonzero().flatten().tolist()
        if not on:
            continue
        end = start = on[-1]
        while start > 0 and mask[r, start - 1]:
            start -= 1
        out[r, start : end + 1] = True
    return out


def cut_at_stop(sample: Sample, stop: Sequence[str], decode: Callable[[list[int]], str]) -> Sample:
    """``sample`` cut after the token that completes the first stop string (log-probs alike); unchanged when none."""
    if not stop or not sample.token_ids:
        return sample
    ids = list(sample.token_ids)
    if not any(s in decode(ids) for s in stop):
        return sample
    for k in range(1, len(ids) + 1):
        if any(s in decode(ids[:k]) for s in stop):
            lps = None if sample.log_probs is None else sample.log_probs[:k]
            return Sample(ids[:k], lps, "stop")
    return sample


def eos_token_ids(model_path: str, tokenizer, *, trust_remote_code: bool = False) -> list[int]:
    """The ids that end a turn: ``generation_config.json``'s and ``config.json``'s ``eos_token_id``, then the tokenizer's
    (what the ``hf`` backend reads from its loaded model); local files only."""
    sources: list = []
    try:
        from transformers import GenerationConfig

        sources.append(GenerationConfig.from_pretrained(model_path, local_files_only=True).eos_token_id)
    except Exception:  # noqa: BLE001 - a model folder without generation_config.json
        pass
    try:
        from transformers import AutoConfig

        sources.append(getattr(AutoConfig.from_pretrained(model_path, local_files_only=True, trust_remote_code=trust_remote_code), "eos_token_id", None))
    except Exception:  # noqa: BLE001 - the tokenizer's EOS still counts
        pass
    sources.append(getattr(tokenizer, "eos_token_id", None))
    return unique_ids(sources)


def unique_ids(sources: Sequence[Any]) -> list[int]:
    """The token ids of ``sources`` (each an id, a list of ids or None), first seen first, each once."""
    ids: list[int] = []
    for src in sources:
        for i in src if isinstance(src, (list, tuple)) else [src]:
            if i is not None and int(i) not in ids:
                ids.append(int(i))
    return ids
