"""Cross-cutting features (LoRA, ...) resolved once into the Plan: the contract of :class:`rl_core.cards.FeatureCard`.

A feature package registers a ``FeatureCard``; the resolver loads every installed one once into :class:`Features`
(``Plan.features``), which the kernel asks for an enabled feature's memory terms, alternatives and run-time hooks.
A config that switches on a feature no installed card provides is a problem naming the package (:data:`KNOWN_FEATURES`).
"""

from __future__ import annotations

from typing import Any, Callable

import attrs

from rl_core.cards import FeatureCard
from rl_core.problems import Problem
from rl_core.util.objects import load_object
from rl_core.util.user_paths import get_key, section_enabled


@attrs.frozen(kw_only=True)
class MemoryTerms:
    """The actor's train-state terms of a feature, bytes per rank: ``states`` held through every phase, ``update``
    during the update only. ``trainable``: the parameters trained (None: all of them); a number means the base is
    frozen in the compute dtype (no float32 master copy, no reference copy: the reference is the base, no autocast
    weight cache, no optimizer state over it)."""

    states: dict[str, float]
    update: dict[str, float]
    trainable: int | None = None

    @property
    def frozen_base(self) -> bool:
        return self.trainable is not None


@attrs.frozen(kw_only=True)
class LoadedFeature:
    """A feature card with its functions loaded (module-level objects: the Plan pickles them by reference)."""

    card: FeatureCard
    enabled: Callable[[Any], bool]
    memory: Callable[..., MemoryTerms | None] | None = None
    alternatives: Callable[[Any], list] | None = None
    hooks: dict[str, Any] = attrs.field(factory=dict)
    provides: Any = None


@attrs.frozen
class Features:
    """Every installed feature, loaded once (``Plan.features``); empty when none is installed."""

    loaded: tuple[LoadedFeature, ...] = ()

    def on(self, config: Any) -> list[LoadedFeature]:
        return [f for f in self.loaded if f.enabled(config)]

    def actor_terms(self, config: Any, shape: Any, S: int, c: int) -> MemoryTerms | None:
        """The first enabled feature's actor terms (None: a full fine-tune's, the estimate's own)."""
        for f in self.on(config):
            terms = f.memory(config, shape, S, c) if f.memory is not None else None
            if terms is not None:
                return terms
        return None

    def alternatives(self, config: Any) -> list[tuple[str, Any]]:
        return [alt for f in self.loaded if f.alternatives is not None for alt in f.alternatives(config)]

    def get(self, name: str) -> Any:
        """The object the installed feature ``name`` provides (``FeatureCard.provides``; None: not installed)."""
        return next((f.provides for f in self.loaded if f.card.name == name), None)

    def __contains__(self, name: str) -> bool:
        return self.get(name) is not None

    def __getitem__(self, name: str) -> Any:
        obj = self.get(name)
        if obj is None:
            raise KeyError(name)
        return obj

    def hook(self, config: Any, name: str) -> Any:
        """The hook ``name`` of the first enabled feature that has one (None: none)."""
        return next((f.hooks[name] for f in self.on(config) if name in f.hooks), None)

    def installed_hook(self, name: str) -> Any:
        """The hook ``name`` of the first installed feature that has one, on in this config or not (e.g. ``resume_drops``:
        the checkpoint's config may have had it on)."""
        return next((f.hooks[name] for f in self.loaded if name in f.hooks), None)


#: config keys that switch a feature on -> (the distribution that provides it, is it on?): for the message when no
#: installed feature card lists the key (hints only; the cards themselves decide what runs)
KNOWN_FEATURES: dict[str, tuple[str, Callable[[Any], bool], str]] = {
    "model.lora_rank": ("rl-lora", lambda config: config.model.lora_rank > 0, "model.lora_rank=0 (a full fine-tune)"),
    "actor.router_replay": ("rl-routing-replay", lambda config: config.actor.router_replay != "disabled", "actor.router_replay=disabled"),
    "rollout.return_routed_experts": ("rl-routing-replay", lambda config: bool(config.rollout.return_routed_experts), "rollout.return_routed_experts=false"),
    **{f"{role}.fsdp_config.{k}": ("rl-offload", lambda config, role=role, k=k: bool(getattr(getattr(getattr(config, role), "fsdp_config", None), k, False)), f"{role}.fsdp_config.{k}=false")
       for role in ("actor", "critic") for k in ("param_offload", "optimizer_offload", "offload_policy")},
    "reward_model.enable": ("rl-reward-model", lambda config: section_enabled(config, "reward_model"), "reward_model.enable=false"),
    "reward.weights": ("rl-reward-model", lambda config: bool(config.reward.weights), "reward.weights={}"),
    "rollout.precision": ("rl-rollout-correction", lambda config: config.rollout.precision != "auto", "rollout.precision=auto"),
    "reward.num_workers": ("rl-reward-pool", lambda config: config.reward.num_workers > 0, "reward.num_workers=0 (scores in-process)"),
}


def load_features(registry: Any, problems: list[Problem]) -> Features:
    """Every installed feature card, loaded; a card whose functions do not load is a problem naming it."""
    out = []
    for card in sorted(registry.cards.get("feature", {}).values(), key=lambda c: c.name):
        try:
            out.append(LoadedFeature(card=card, enabled=card.load(), memory=_load(card.memory), alternatives=_load(card.alternatives),
                                     hooks={k: load_object(v) for k, v in card.hooks.items()}, provides=_load(card.provides)))
        except Exception as exc:  # noqa: BLE001 - a plugin's broken path is reported by name
            problems.append(Problem(key=f"feature.{card.name}", what=f"the feature {card.name!r} from {card.provider} does not load: {type(exc).__name__}: {exc}",
                                    fix=f"report this to the authors of {card.provider.distribution if card.provider else 'the plugin'}"))
    return Features(tuple(out))


def _load(ref: Any) -> Any:
    return None if ref is None else load_object(ref)


def missing_feature_problems(config: Any, features: Features) -> list[Problem]:
    """A key of :data:`KNOWN_FEATURES` switched on while no installed feature card lists it."""
    listed = {k for f in features.loaded for k in f.card.keys}
    out = []
    named: set[str] = set()
    for key, (dist, on, off) in KNOWN_FEATURES.items():
        if key not in listed and dist not in named and on(config):  # one problem per package to install
            named.add(dist)
            out.append(Problem(key=key, what=f"is {get_key(config, key)}, but no installed package provides it (it is {dist}'s)",
                               why="the run would ignore the setting", fix=f"pip install {dist} (plugins/{dist.removeprefix('rl-').replace('-', '_')} in this repository), or set {off}"))
    return out


def resolve_features(config: Any, registry: Any) -> tuple[Features, list[Problem]]:
    """The installed features, loaded once, and the problems of a config that needs one not installed."""
    problems: list[Problem] = []
    features = load_features(registry, problems)
    return features, problems + missing_feature_problems(config, features)
