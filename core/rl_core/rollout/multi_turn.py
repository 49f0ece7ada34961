"""Multi-turn (agent) rollouts for a rollout plugin: the engine continues token ids, rl-core does the rest.

A rollout engine whose ``generate`` sees ``rollout.multi_turn.enable`` hands
the batch to :meth:`MultiTurn.generate` together with one function of its
own, ``continue_ids(prompts, budgets, stop) -> list[Sample]``: continue each
token-id prompt for at most its budget of new tokens, stopping at EOS or at
any of the ``stop`` strings, and return the engine's exact sampled ids and
their log-probs (:class:`rl_core.rollout.samples.Sample`). Everything else,
the agent loops, tools, template tokens between turns, ``response_mask``,
log-probs of 0 on inserted tokens, ``agent/*`` counters, the token check,
is :mod:`rl_core.agent.runner`, the same code the ``hf`` backend runs, so
every backend builds trajectories the same way (the rollout conformance
suite's multi-turn case checks it).

``continue_ids`` is called once per turn with the requests of every active
trajectory (finished ones drop out). A turn's response ends with the token
that completes a stop string (:func:`cut_at_stop` applies that cut for
engines that stop later or not at all).
"""

from __future__ import annotations

from typing import Callable, Sequence

from rl_core.batch import Batch
from rl_core.rollout.samples import Sample

ContinueIds = Callable[[list[list[int]], list[int], tuple[str, ...]], list[Sample]]

__all__ = ["ContinueIds", "MultiTurn", "cut_at_stop", "eos_token_ids"]


class MultiTurn:
    """The agent set-up of one engine (tools, parser, loops of ``rollout.multi_turn``), built once."""

    def __init__(self, config, tokenizer, eos_ids: Sequence[int]) -> None:
        from rl_core.agent.runner import AgentSetup

        self.setup = AgentSetup(config.rollout.multi_turn, tokenizer)
        self.tokenizer = tokenizer
        self.eos_ids = [int(i) for i in eos_ids]

    def generate(self, batch: Batch, params, continue_ids: ContinueIds, *, pad_id: int) -> Batch:
        """``params.n`` trajectories per prompt of ``batch`` (the layout of :func:`rl_core.agent.runner.run_agent_rollout`)."""
        from rl_core.agent.runner import run_agent_rollout

        eos = set(self.eos_ids)
        decode = lambda ids: self.tokenizer.decode(ids, skip_special_tokens=False)  # noqa: E731

        def decode_turn(prompts, budgets, stop):
            outs = continue_ids(prompts, budgets, stop)
            if len(outs) != len(prompts):
                raise RuntimeError(f"the engine answered {len(outs)} of {len(prompts)} multi-turn requests")
            return [_generated(cut_at_stop(s, stop, decode), budget, eos) for s, budget in zip(outs, budgets)]

        return run_agent_rollout(self.setup, batch, params, decode_turn, pad_id=pad_id, eos_ids=self.eos_ids)


def _generated(sample: Sample, budget: int, eos: set[int]):
    from rl_core.agent.loop import Generated

    ids = tuple(int(i) for i in sample.token_ids[:budget])
    lps = None if sample.log_probs is None else tuple(float(x) for x in sample.log_probs[: len(ids)])
    if ids and ids[-1] in eos:
        finish = "eos"
    elif sample.finish_reason != "stop" and (sample.finish_reason == "length" or len(ids) >= budget):
        finish = "length"
    else:
        finish = "stop"
    return Generated(ids, lps, finish)


def cut_at_stop(sample: Sample, stop: Sequence[str], decode: Callable[[list[int]], str]) -> Sample:
    """``sample`` ending with the token that completes the first stop string (unchanged when none occurs).

    The kept tokens include the one that completes the stop string, as the
    rollout contract asks; log-probs are cut alike.
    """
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
    ids: list[int] = []
    for src in sources:
        for i in src if isinstance(src, (list, tuple)) else [src]:
            if i is not None and int(i) not in ids:
                ids.append(int(i))
    return ids
