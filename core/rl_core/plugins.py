"""Plugin manager: loads the ``rl_core`` entry-point group and fills the card registry.

A plugin that fails to import (or whose hooks raise) is a :class:`PluginError` naming its distribution, version and
exception; the others stay usable. ``check_pending()`` makes a misspelt hook name an error. ``RL_CORE_PLUGINS`` /
``RL_CORE_BLOCK_PLUGINS`` allow / block entry-point or distribution names (built-ins load unless blocked); a name a
skipped plugin would provide is reported as blocked. Two providers of one (kind, name) is an error naming both.
"""

from __future__ import annotations

import importlib.metadata as md
import logging
import os
import traceback
from types import ModuleType
from typing import Any, Iterable

import attrs
import pluggy

from rl_core import hookspecs
from rl_core.cards import CARD_TYPES, CardBase, Provider
from rl_core.problems import did_you_mean

ENTRY_POINT_GROUP = "rl_core"
CORE_DISTRIBUTION = "rl-core"
ALLOW_ENV = "RL_CORE_PLUGINS"
BLOCK_ENV = "RL_CORE_BLOCK_PLUGINS"

logger = logging.getLogger(__name__)

# hook name -> card kind it registers
HOOK_KINDS = {
    "rl_core_register_rollout_backends": "rollout",
    "rl_core_register_train_backends": "train",
    "rl_core_register_rewards": "reward",
    "rl_core_register_reward_models": "reward_model",
    "rl_core_register_advantage_estimators": "estimator",
    "rl_core_register_policy_losses": "policy_loss",
    "rl_core_register_weight_converters": "converter",
    "rl_core_register_tools": "tool",
    "rl_core_register_agent_loops": "agent_loop",
    "rl_core_register_tool_parsers": "tool_parser",
    "rl_core_register_checks": "check",
    "rl_core_register_dialects": "dialect",
    "rl_core_register_commands": "command",
    "rl_core_register_observers": "observer",
    "rl_core_register_run_kinds": "run_kind",
    "rl_core_register_log_prob_roles": "log_prob_role",
    "rl_core_register_config_sections": "config_section",
    "rl_core_register_placements": "placement",
    "rl_core_register_features": "feature",
    "rl_core_register_rollout_pools": "rollout_pool",
    "rl_core_register_reward_shapers": "reward_shaping",
    "rl_core_register_batch_samplers": "batch_sampler",
    "rl_core_register_log_prob_forwards": "log_prob_forward",
    "rl_core_register_trackers": "tracker",
    "rl_core_register_builtin_models": "builtin_model",
}

#: kind -> name -> the distribution that usually provides it (hints for messages only; nothing here changes
#: behaviour). Card kinds name cards; "section" names config sections (rl_core.config.sections), "step_hook" the
#: boolean key that turns on a RewardShapingCard / BatchSamplerCard (rl_core.plan.step_hooks), "dialect_key" what
#: only another framework's launch writes (a top-level key, a command-line option, its override grammar).
KNOWN_DISTRIBUTIONS: dict[str, dict[str, str]] = {
    "rollout": {"vllm": "rl-rollout-vllm", "sglang": "rl-rollout-sglang"},
    "train": {"fsdp": "rl-train-fsdp", "megatron": "rl-train-megatron"},
    "run_kind": {"sft": "rl-sft"},
    "placement": {"ray": "rl-placement-ray"},
    "estimator": dict.fromkeys(("rloo", "rloo_vectorized", "grpo_vectorized", "reinforce_plus_plus", "reinforce_plus_plus_baseline",
                                "remax", "opo", "grpo_passk", "gpg"), "rl-algorithms"),
    "policy_loss": dict.fromkeys(("gspo", "gpg", "dro", "cispo", "sapo", "geo_mean", "dppo_tv", "dppo_kl", "clip_cov", "kl_cov"),
                                 "rl-algorithms"),
    "log_prob_forward": {"exact": "rl-exact"},
    "feature": {"lora": "rl-lora", "multimodal": "rl-multimodal", "routing_replay": "rl-routing-replay", "profiling": "rl-profiling",
                "rollout_correction": "rl-rollout-correction"},
    "reward": {
        "gsm8k": "rl-reward-rule",
        "math": "rl-reward-rule",
        "format": "rl-reward-rule",
        "reasoning_gym": "rl-reward-rule",
    },
    "tracker": {"tensorboard": "rl-tracking", "wandb": "rl-tracking"},
    "target_part": {"ram": "rl-memory-estimate"},  # `rlcore check --target gpu:1x80GB,ram=128GB`: a FeatureCard's target_part hook
    "builtin_model": {"smollm2": "rl-model-smollm2"},
    # `rlcore <command>` of a first-party package (rl_core.cli.main names the install when it is missing)
    "command": {"data": "rl-data", "traces": "rl-traces", "import-verl": "rl-verl", "plot": "rl-tracking", "doctor": "rl-doctor",
                "eval": "rl-eval", "clean": "rl-clean", "model": "rl-model-smollm2"},
    "step_hook": {
        "reward.overlong_penalty.enable": "rl-algorithms",
        "algorithm.filter_groups.enable": "rl-algorithms",
    },
    "section": {"reward_model": "rl-reward-model", "actor.fsdp_config": "rl-train-fsdp", "critic.fsdp_config": "rl-train-fsdp", "data.custom_cls": "rl-data", "data.train_generator": "rl-data", "data.val_generator": "rl-data", "ray": "rl-placement-ray", "async": "rl-async",
                "algorithm.filter_groups": "rl-algorithms", "reward.overlong_penalty": "rl-algorithms",
                "rollout.multi_turn": "rl-agent", "profiler": "rl-profiling",
                "algorithm.rollout_correction": "rl-rollout-correction", "rollout.mismatch": "rl-rollout-correction"},
    "dialect_key": dict.fromkeys(("actor_rollout_ref", "custom_reward_function", "ray_kwargs", "ray_init", "model_engine",
                                  "global_profiler", "distillation", "--config-path", "--config-name", "--profile",
                                  "+key / ~key / group@package"), "rl-verl"),
}


def known_distribution(kind: str, name: str) -> tuple[str, str] | None:
    """``(known name, distribution)`` for ``name`` of ``kind``: the name itself or, for a dotted key, its longest
    known prefix (a key inside a section); None when no package is known to bring it."""
    table = KNOWN_DISTRIBUTIONS.get(kind, {})
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in table:
            return prefix, table[prefix]
    return None


def section_hint(key: str) -> str:
    """``": the section ... of <distribution>; pip install <distribution>"`` for a key inside a known section, else ``""``."""
    known = known_distribution("section", key)
    return f": {known[0]!r} is the config section of {known[1]}, which is not installed; pip install {known[1]}" if known else ""


def dialect_hint(what: str) -> str:
    """``"; pip install <distribution> (its dialect reads it)"`` for a key, option or grammar of a known dialect, else ``""``."""
    known = known_distribution("dialect_key", what) or known_distribution("dialect_key", what.lstrip("+~"))
    return f"; pip install {known[1]} (its dialect reads it)" if known else ""


@attrs.frozen
class PluginError:
    """A plugin that could not be loaded (or whose hooks failed)."""

    distribution: str
    version: str
    entry_point: str
    error: str
    traceback: str = attrs.field(default="", repr=False)

    def describe(self) -> str:
        return (
            f"plugin {self.entry_point!r} from distribution {self.distribution} {self.version} "
            f"failed to load: {self.error}"
        )


@attrs.frozen
class Conflict:
    kind: str
    name: str
    providers: tuple[Provider, ...]

    def describe(self) -> str:
        who = " and ".join(f"{p} (entry point {p.entry_point!r})" for p in self.providers)
        return (
            f"{self.kind} {self.name!r} is registered twice: by {who}; "
            f"uninstall one, or block one with {BLOCK_ENV}=<entry point or distribution>"
        )


class UnknownCardError(LookupError):
    """Raised by :meth:`Registry.get` for a name nobody registered."""


@attrs.define
class Registry:
    """Name -> card tables, one per kind, plus everything that went wrong loading them."""

    cards: dict[str, dict[str, CardBase]] = attrs.field(factory=lambda: {k: {} for k in CARD_TYPES})
    errors: list[PluginError] = attrs.field(factory=list)
    conflicts: list[Conflict] = attrs.field(factory=list)
    plugins: list[dict[str, Any]] = attrs.field(factory=list)
    # entry points installed but not loaded: (distribution, entry point, why), e.g. blocked by RL_CORE_BLOCK_PLUGINS
    skipped: list[tuple[str, str, str]] = attrs.field(factory=list)
    warnings: list[str] = attrs.field(factory=list)

    def names(self, kind: str) -> list[str]:
        return sorted(self.cards[kind])

    def conflict(self, kind: str, name: str) -> Conflict | None:
        return next((c for c in self.conflicts if c.kind == kind and c.name == name), None)

    def get(self, kind: str, name: str) -> CardBase:
        conflict = self.conflict(kind, name)
        if conflict is not None:
            raise UnknownCardError(conflict.describe())
        try:
            return self.cards[kind][name]
        except KeyError:
            raise UnknownCardError(self.missing_message(kind, name)) from None

    def missing_message(self, kind: str, name: str) -> str:
        known = ", ".join(self.names(kind)) or "none"
        msg = f"no {kind} named {name!r} is installed{did_you_mean(str(name), self.names(kind))} (installed: {known})"
        dist = (known_distribution(kind, name) or ("", ""))[1]
        skipped = {d: why for d, _, why in self.skipped}
        if dist and dist in skipped:
            return (
                f"{kind} {name!r} is provided by the distribution {dist}, which is installed but was not loaded: {skipped[dist]}"
            )
        if dist:
            msg += f"; it is provided by the distribution {dist}: pip install {dist}"
        if self.skipped:
            msg += "; installed but not loaded: " + ", ".join(f"{d} ({why})" for d, _, why in self.skipped)
        if self.errors:
            broken = ", ".join(sorted({e.distribution for e in self.errors}))
            msg += f" (note: these plugins failed to load and may provide it: {broken})"
        return msg

    def add(self, card: CardBase, provider: Provider) -> None:
        if not isinstance(card, CardBase):
            raise TypeError(f"register() expects a card from rl_core.cards, got {type(card).__name__}")
        card = attrs.evolve(card, provider=provider)
        table = self.cards[card.kind]
        existing = self.conflict(card.kind, card.name)
        if existing is not None:
            self.conflicts[self.conflicts.index(existing)] = attrs.evolve(
                existing, providers=existing.providers + (provider,)
            )
            return
        if card.name in table:
            self.conflicts.append(Conflict(card.kind, card.name, (table.pop(card.name).provider, provider)))
            return
        table[card.name] = card


def _split_env(name: str) -> set[str]:
    return {part.strip() for part in os.environ.get(name, "").split(",") if part.strip()}


def _skip_reason(ep_name: str, dist_name: str) -> str | None:
    """Why the allow / block lists skip this entry point, or None when it loads."""
    block = _split_env(BLOCK_ENV)
    if ep_name in block or dist_name in block:
        return f"blocked by {BLOCK_ENV}={os.environ.get(BLOCK_ENV, '')}"
    if dist_name == CORE_DISTRIBUTION:
        return None
    allow = _split_env(ALLOW_ENV)
    if not allow or ep_name in allow or dist_name in allow:
        return None
    return f"not in the allow list {ALLOW_ENV}={os.environ.get(ALLOW_ENV, '')}"


class PluginManager:
    """A typed wrapper over ``pluggy.PluginManager`` that builds a :class:`Registry`."""

    def __init__(self) -> None:
        self._pm = pluggy.PluginManager(hookspecs.PROJECT)
        self._pm.add_hookspecs(hookspecs)
        self._providers: dict[str, Provider] = {}
        self.errors: list[PluginError] = []
        self.skipped: list[tuple[str, str, str]] = []
        self.warnings: list[str] = []

    def register_module(self, module: ModuleType | object, provider: Provider) -> None:
        """Register a plugin object (module or instance) under ``provider``."""
        name = provider.entry_point or getattr(module, "__name__", repr(module))
        try:
            self._pm.register(module, name=name)
            self._pm.check_pending()
        except Exception as exc:  # pluggy.PluginValidationError and friends
            if self._pm.is_registered(module):
                self._pm.unregister(module)
            self.errors.append(_error(provider, exc))
            return
        self._providers[name] = provider

    def load_entrypoints(self, group: str = ENTRY_POINT_GROUP) -> None:
        seen: set[tuple[str, str]] = set()
        known: set[str] = set()
        for ep in md.entry_points(group=group):
            dist = ep.dist
            dist_name = dist.metadata["Name"] if dist is not None else "<unknown>"
            version = dist.version if dist is not None else ""
            key = (dist_name, ep.name)
            if key in seen:  # the same distribution found twice on sys.path
                continue
            seen.add(key)
            known.update(key)
            why = _skip_reason(ep.name, dist_name)
            if why is not None:
                self.skipped.append((dist_name, ep.name, why))
                continue
            provider = Provider(distribution=dist_name, version=version, entry_point=ep.name)
            try:
                module = ep.load()
            except BaseException as exc:  # noqa: BLE001 - a plugin may raise anything, even SystemExit
                if isinstance(exc, KeyboardInterrupt):
                    raise
                self.errors.append(_error(provider, exc))
                continue
            self.register_module(module, provider)
        for env in (ALLOW_ENV, BLOCK_ENV):
            for name in sorted(_split_env(env) - known):
                msg = f"{env} names {name!r}, which is no installed rl_core plugin (entry point or distribution); installed: {', '.join(sorted(known)) or 'none'}"
                self.warnings.append(msg)
                logger.warning(msg)

    def build_registry(self) -> Registry:
        registry = Registry(errors=list(self.errors), skipped=list(self.skipped), warnings=list(self.warnings))
        for name, provider in self._providers.items():
            hooks = sorted(h for h in HOOK_KINDS if any(i.plugin_name == name for i in getattr(self._pm.hook, h).get_hookimpls()))
            registry.plugins.append({"entry_point": name, "distribution": provider.distribution, "version": provider.version,
                                     "hooks": hooks})
        for hook_name in HOOK_KINDS:
            for impl in getattr(self._pm.hook, hook_name).get_hookimpls():
                provider = self._providers.get(impl.plugin_name, Provider(distribution="<unknown>"))
                try:
                    impl.function(register=lambda card, _p=provider: registry.add(card, _p))
                except Exception as exc:  # noqa: BLE001
                    registry.errors.append(_error(provider, exc, hook=hook_name))
        return registry


def _error(provider: Provider, exc: BaseException, hook: str = "") -> PluginError:
    what = f"{type(exc).__name__}: {exc}"
    if hook:
        what = f"{hook} raised {what}"
    return PluginError(distribution=provider.distribution, version=provider.version, entry_point=provider.entry_point, error=what,
                       traceback="".join(traceback.format_exception(exc)))


_REGISTRY: Registry | None = None


def get_registry(*, reload: bool = False, extra: Iterable[tuple[object, Provider]] = ()) -> Registry:
    """The process-wide registry, loaded from entry points on first use."""
    global _REGISTRY
    if _REGISTRY is None or reload or extra:
        pm = PluginManager()
        pm.load_entrypoints()
        for module, provider in extra:
            pm.register_module(module, provider)
        _REGISTRY = pm.build_registry()
    return _REGISTRY
