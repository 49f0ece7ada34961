"""rl-hf-decode's check (``hf_decode_values``): the values of its ``rollout.engine_kwargs`` keys
(:mod:`rl_hf_decode.keys`), in ``rlcore check`` rather than when the first decode starts. Light: no torch."""

from __future__ import annotations

from typing import Any, Callable

from rl_core.problems import Problem

from rl_hf_decode.keys import ATTENTION, SAMPLER


def _whole(least: int) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= least


def _choice(values: tuple[str, ...]) -> tuple[Callable[[Any], bool], str]:
    return (lambda v: v in values), f"must be {', '.join(values[:-1])} or {values[-1]}"


def _flag(unset_ok: bool = False) -> tuple[Callable[[Any], bool], str]:
    return (lambda v: isinstance(v, bool) or (unset_ok and v is None)), "must be true or false"


#: key -> (is the value good?, what a good one is, a good setting with what it does); None is the default only where
#: the decoder reads it so (static_decode: core's hf rollout picks by device; decode_chunk: sized by the cache)
RULES: dict[str, tuple[Callable[[Any], bool], str, str]] = {
    "static_decode": (*_flag(unset_ok=True), "static_decode=false (the hf rollout's plain decode loop)"),
    "cuda_graph": (*_flag(), "cuda_graph=false (each decode step runs eagerly)"),
    "compile": (*_flag(), "compile=false (the decode step uncompiled)"),
    "pack_projections": (*_flag(), "pack_projections=false (q / k / v and gate / up as separate GEMMs)"),
    "check_every": (_whole(1), "must be a whole number of decode steps >= 1", "check_every=16 (decode steps between the all-finished checks)"),
    "decode_chunk": (lambda v: v is None or _whole(0)(v), "must be a whole number of cache slots >= 0",
                     "decode_chunk=1024 (0: every decode step attends over the whole cache)"),
    "decode_attention": (*_choice(ATTENTION), "decode_attention=auto (the Triton kernel on CUDA, sdpa elsewhere)"),
    "decode_sampler": (*_choice(SAMPLER), "decode_sampler=auto (the fused Triton sampler on CUDA for plain temperature sampling, "
                                          "the plain loop's torch sampler elsewhere)"),
}


def value_problems(config: Any, registry: Any = None) -> list[Problem]:
    """One problem per key of rl-hf-decode's in ``rollout.engine_kwargs`` with a value its decoder does not take
    (the hf rollout only; core's check names the keys no installed package reads)."""
    if config.rollout.name != "hf":
        return []
    given = config.rollout.engine_kwargs or {}
    return [Problem(key=f"rollout.engine_kwargs.{name}", what=f"{what}, got {given[name]!r}", fix=f"e.g. rollout.engine_kwargs.{example}")
            for name, (good, what, example) in RULES.items() if name in given and not good(given[name])]
