"""`rlcore check` / `train` checks of what fits the devices' and the node's memory, ``probe(config, registry) ->
list[Problem]``: :func:`memory_problems` refuses a full fine-tune whose train states alone exceed the GPU (naming
the features' alternatives that fit); :func:`host_memory_problems` a GPU run over the node's RAM.
"""

from __future__ import annotations

import re
from typing import Any

from rl_core.cards import CheckCard
from rl_core.config.normalize import normalize
from rl_core.util.user_paths import section_enabled
from rl_core import hookimpl
from rl_core.plan.features import Features, load_features
from rl_core.plan.memory import GB, device_memory, model_shape
from rl_memory_estimate.estimate import actor_terms, estimate
from rl_memory_estimate.host import host_estimate, host_ram
from rl_core.problems import Problem


def _features(registry: Any) -> Features:
    return load_features(registry, []) if registry is not None else Features()


def memory_problems(config: Any, registry: Any = None, *, available: float | None = None) -> list[Problem]:
    """A full fine-tune whose train states alone (float32 weights, AdamW, gradients) exceed the GPU's memory can
    never run, whatever the batch sizes: refused, naming which of the features' alternatives (LoRA) or CPU offload
    would fit. ``available``: the GPU's bytes (default: this machine's GPU; nothing is checked without one)."""
    if config.trainer.device == "cpu":
        return []
    features = _features(registry)
    config, sizes, _ = normalize(config)
    if sizes is None or sizes.device == "cpu":
        return []
    rm_card = registry.cards["reward_model"].get(config.reward_model.name) if registry is not None and section_enabled(config, "reward_model") else None
    est = estimate(config, sizes, available=available, reward_model=rm_card, features=features)
    if est is None or est.available is None or est.fits is not False:
        return []
    terms = actor_terms(config, est.shape, sizes.world_size if sizes.world_size > 1 else 1, 4, features)
    if terms.frozen_base:  # LoRA: its own checks
        return []
    need = sum(terms.states.values()) + sum(terms.update.values())
    if need <= est.available:
        return []
    labels = tuple(label for label, _ in features.alternatives(config))
    fits = [a.split(" (not wired")[0] for a in est.advice if a.startswith(labels)]
    return [Problem(key="model.lora_rank", what=f"is 0 (full fine-tune): {est.shape.params / 1e9:.1f}B parameters need {need / GB:.0f} GiB per GPU for their train states alone "
                    f"(float32 weights, AdamW state, gradients) but the GPU has {est.available / GB:.0f} GiB",
                    why="no batch size makes it fit", fix="; or ".join(fits) + "; or more GPUs (trainer.n_gpus_per_node)")]


def host_memory_problems(config: Any, registry: Any = None, *, available: float | None = None) -> list[Problem]:
    """A GPU run whose host-memory estimate (rl_memory_estimate.host: offloaded state, the model load, the rollout
    asleep) exceeds the node's RAM would be ended by the OOM killer mid-run: refused, naming what to change.
    ``available``: the node's RAM in bytes (default: this machine's, when this machine has a GPU, i.e. the run is
    for here; ``rlcore check --target gpu:1x80GB,ram=128GB`` passes the target's)."""
    if config.trainer.device == "cpu":
        return []
    if available is None:
        if device_memory("cuda") is None:  # no GPU here: the config is for another machine (--target ...,ram= checks it)
            return []
        available = host_ram()
    features = _features(registry)
    config, sizes, _ = normalize(config)
    shape = model_shape(config.model.path, config.model.override_config)
    if sizes is None or sizes.device == "cpu" or shape is None or available is None:
        return []
    est = host_estimate(config, shape, world_size=sizes.world_size, available=available, features=features)
    if est.fits is not False:
        return []
    f = getattr(config.actor, "fsdp_config", None)  # rl-train-fsdp's section
    switches = [f"actor.fsdp_config.{k}" for k in ("optimizer_offload", "param_offload", "offload_policy") if getattr(f, k, False)]
    fixes = []
    for label, alt in features.alternatives(config):  # LoRA (rl-lora): its host peak
        if label.startswith("offload: "):  # rl-offload's alternative puts more on the host, not less
            continue
        name, _, keys = label.partition(": ")
        fixes.append(f"{name} ({keys.split(' (')[0]}: host peak {host_estimate(alt, shape, world_size=sizes.world_size, features=features).peak / GB:.0f} GiB)")
    if switches:
        fixes.append(f"{' / '.join(f'{k}=false' for k in switches)} if the GPU holds the state (see the device estimate)")
    if config.rollout.enable_sleep:
        fixes.append("rollout.enable_sleep=false (the rollout keeps its weights on the GPU)")
    fixes.append(f"a node with at least {est.peak / GB:.0f} GiB of RAM")
    biggest = max(est.terms, key=est.terms.get)
    return [Problem(key=switches[0] if switches else "trainer.n_gpus_per_node",
                    what=f"the run needs about {est.peak / GB:.0f} GiB of host memory per node (largest: {biggest}, {est.terms[biggest] / GB:.0f} GiB) "
                         f"but the node has {available / GB:.0f} GiB of RAM",
                    why="the host's OOM killer would end the run partway (rl_memory_estimate.host)", fix="; or ".join(fixes))]


class TargetRam:
    """The ``ram=`` part of ``rlcore check --target gpu:1x80GB,ram=128GB`` (the feature's ``target_part`` hook,
    rl_core.cli.check_target): the node's RAM in GiB, a GPU run's host-memory estimate checked against it."""

    name = "ram"
    _TEXT = re.compile(r"^(\d+(?:\.\d+)?)(?:gb|gib)?$", re.IGNORECASE)

    def parse(self, text: str) -> float | None:
        m = self._TEXT.match(text)
        return float(m.group(1)) if m else None

    def describe(self, gib: float) -> str:
        return f"{gib:g} GiB RAM"

    def problems(self, config: Any, gib: float, registry: Any) -> list[Problem]:
        return host_memory_problems(config, registry, available=gib * 2**30) if gib and config.trainer.device == "cuda" else []


TARGET_RAM = TargetRam()


def memory_and_host_problems(config: Any, registry: Any = None) -> list[Problem]:
    """The two checks, registered below as one (``memory``)."""
    return memory_problems(config, registry) + host_memory_problems(config, registry)


@hookimpl
def rl_core_register_checks(register) -> None:
    register(CheckCard(name="memory", stage="values", order=40, factory=f"{__name__}:memory_and_host_problems",
                       description="train states and host memory that cannot fit"))
