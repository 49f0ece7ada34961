"""Registers the built-in `hf` rollout backend."""

from __future__ import annotations

import attrs

from rl_core.cards import CheckCard, RolloutCard
from rl_core.hookspecs import hookimpl
from rl_core.problems import Problem
from rl_core.rollout.engine_kwargs import PREFIX, engine_kwargs_problems

#: The ``rollout.engine_kwargs`` keys core's hf rollout reads (:mod:`rl_core.rollout.hf`); those an installed feature
#: card lists under ``rollout.engine_kwargs`` are taken too (rl-hf-decode's decoder settings, checked by its package).
HF_ENGINE_KEYS = ("attn_implementation", "share_weights", "static_decode", "sleep_threshold", "share_prefill")
DECODER = "pip install rl-hf-decode (plugins/hf_decode in this repository)"


def check_hf_engine_kwargs(config, registry) -> list[Problem]:
    """The ``hf`` rollout's keys are its own or an installed feature card's: anything else is a typo (or, without
    rl-hf-decode, perhaps a key of its decoder); ``sleep_threshold`` is a fraction."""
    if config.rollout.name != "hf":
        return []
    given = dict(config.rollout.engine_kwargs or {})
    features = registry.cards.get("feature", {})
    listed = {k.removeprefix(f"{PREFIX}.") for card in features.values() for k in card.keys if k.startswith(f"{PREFIX}.")}
    more = "" if "hf_decode" in features else f"; if it is a key of the hf rollout's GPU decoder: {DECODER}"
    problems = [attrs.evolve(p, why="the hf rollout reads its own keys and those of the installed packages: it would ignore this one",
                             fix=f"fix or remove {p.key}{more}") for p in engine_kwargs_problems(given, HF_ENGINE_KEYS, own=listed, engine="hf rollout")]
    value = given.get("sleep_threshold")
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1):
        problems.append(Problem(key="rollout.engine_kwargs.sleep_threshold", what=f"must be a fraction of the device's memory in [0, 1], got {value!r}",
                                fix="e.g. rollout.engine_kwargs.sleep_threshold=0.1 (0: free the engine's memory on every sleep)"))
    return problems


HF_ROLLOUT = RolloutCard(
    name="hf",
    factory="rl_core.rollout.hf:factory",
    description="plain transformers generation with a KV cache (reference backend; CPU or one GPU per replica)",
    devices={"cpu", "cuda"},
    max_tp=1,
    weight_formats={"hf"},
    logprobs=True,
    exact=True,  # rollout.exact: the sampled sequences' log-probs recomputed with the trainer's forward (LogProbForwardCard)
    lora_adapters=True,  # adapters merged in place into the targeted weights each sync (rl-lora's rl_lora.merge, the plan's rollout_adapters hook)
    routed_experts=True,  # each token's top-k experts recorded in the decode loop (rl-routing-replay's feature)
    images=True,  # prompts with images: the prefill reads them with the model's 3-D positions (rl-multimodal's feature)
    engine="transformers",
    engine_versions=">=4.56",
)


@hookimpl
def rl_core_register_rollout_backends(register):
    register(HF_ROLLOUT)


def decoder_problems(config, registry) -> list[Problem]:
    """The hf rollout without rl-hf-decode (its ``hf_decode`` feature): ``static_decode=true`` is an error, a CUDA run a warning."""
    if config.rollout.name != "hf" or "hf_decode" in registry.cards.get("feature", {}):
        return []
    wanted = (config.rollout.engine_kwargs or {}).get("static_decode")
    if wanted is True:
        return [Problem(key="rollout.engine_kwargs.static_decode", what="is true, but no installed package provides the static decoder (it is rl-hf-decode's)",
                        fix=f"{DECODER}, or set rollout.engine_kwargs.static_decode=false")]
    if wanted is None and config.trainer.device == "cuda":
        return [Problem(key="rollout.name", severity="warning", what="is hf on CUDA without rl-hf-decode: the hf rollout decodes with its plain loop",
                        why="rl-hf-decode's static KV cache and CUDA-graph decode step decode Llama-family models several times faster",
                        fix=f"{DECODER}, or set rollout.engine_kwargs.static_decode=false")]
    return []


@hookimpl
def rl_core_register_checks(register) -> None:
    register(CheckCard(name="hf_engine_kwargs", stage="values", order=60, factory=f"{__name__}:check_hf_engine_kwargs",
                       description="the hf rollout's rollout.engine_kwargs: keys it or an installed feature reads, sleep_threshold"))
    register(CheckCard(name="hf_decode", stage="names", order=65, factory=f"{__name__}:decoder_problems",
                       description="the hf rollout's GPU decoder: rl-hf-decode installed where a config wants it"))
