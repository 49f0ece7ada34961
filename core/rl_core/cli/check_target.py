"""Checking a config meant for another machine: ``rlcore check --target gpu:8x80GB`` (or ``--skip-device-check``).

The target's device and GPUs per node replace this machine's; engines and loggers that are not installed
here (vLLM, SGLang, wandb on a laptop) become warnings, since the target machine has them; ``trainer.nnodes``
above 1 needs ``trainer.placement=ray`` (local placement starts every worker on this machine).
"""

from __future__ import annotations

import re
from typing import Any

import attrs

from rl_core.problems import Problem
from rl_core.plan.features import load_features
from rl_core.plugins import KNOWN_DISTRIBUTIONS, get_registry

_TARGET = re.compile(r"^(gpu|cuda|cpu)(?::(\d+)(?:x(\d+(?:\.\d+)?)\s*(?:gb|gib)?)?)?$", re.IGNORECASE)
#: what a laptop lacks that the target machine has: these become warnings under a target / --skip-device-check
_ELSEWHERE = ("which is not installed",)


@attrs.frozen
class Target:
    device: str  # "cuda" or "cpu"
    per_node: int | None  # GPUs (processes) per node, None: not said
    memory_gib: float | None
    # ``,name=value`` after the machine, each ``(name, value as parsed, its hook)``: read by the installed feature whose
    # ``target_part`` hook names it (rl-memory-estimate's ``ram=128GB``); a hook None: its package is not installed here
    parts: tuple[tuple[str, Any, Any], ...] = ()

    def describe(self) -> str:
        gpus = f"{self.per_node} x " if self.per_node else ""
        mem = f" {self.memory_gib:g} GiB" if self.memory_gib else ""
        return f"{gpus}{self.device}{mem}" + "".join(f", {hook.describe(value) if hook else f'{name}={value}'}" for name, value, hook in self.parts)


def target_parts(registry: Any) -> dict[str, Any]:
    """``{name: hook}``: the ``--target`` parts the installed features read (a FeatureCard's ``target_part`` hook: ``name``,
    ``parse(text) -> value | None``, ``describe(value)``, ``problems(config, value, registry)``)."""
    return {h.name: h for f in load_features(registry, []).loaded if (h := f.hooks.get("target_part")) is not None}


def parse_target(text: str, registry: Any = None) -> Target | Problem:
    """``gpu:8x80GB`` -> Target("cuda", 8, 80.0); ``gpu`` -> any number of GPUs; ``cpu:4``; ``gpu:1x80GB,ram=128GB``
    adds the node's RAM (a part rl-memory-estimate reads; ``registry``: the installed plugins by default)."""
    main, *extra = text.strip().replace(" ", "").split(",")
    m = _TARGET.match(main)
    hooks = target_parts(registry if registry is not None else get_registry())
    parts = tuple((name, hooks[name].parse(value) if name in hooks else value if name in KNOWN_DISTRIBUTIONS["target_part"] else None, hooks.get(name))
                  for name, _, value in (e.partition("=") for e in extra if e))
    if m is None or any(value in (None, "") for _, value, _ in parts):
        return Problem(key="--target", what=f"{text!r} is not a machine description",
                       fix="write e.g. --target gpu:8x80GB (8 GPUs of 80 GB per node), gpu:1x80GB,ram=128GB (with the node's RAM), gpu:1, or cpu:4")
    kind, n, mem = m.groups()
    return Target("cpu" if kind.lower() == "cpu" else "cuda", int(n) if n else None, float(mem) if mem else None, parts)


def target_overrides(target: Target) -> list[str]:
    """Overrides that make the config's device the target's (``trainer.device=auto`` would read this machine)."""
    return [f"trainer.device={target.device}"]


def target_problems(config, target: Target | None, registry=None) -> list[Problem]:
    """What the target machine cannot run: more GPUs per node than it has; several nodes without Ray; what its
    ``,name=value`` parts say (the installed features' ``target_part`` hooks: rl-memory-estimate's host RAM)."""
    out = []
    t = config.trainer
    if target is not None and target.per_node is not None and t.n_gpus_per_node > target.per_node:
        out.append(Problem(key="trainer.n_gpus_per_node", what=f"is {t.n_gpus_per_node} but the target {target.describe()} has {target.per_node} per node",
                           fix=f"set trainer.n_gpus_per_node to at most {target.per_node}, or use more nodes (trainer.nnodes with trainer.placement=ray)"))
    out.extend(node_problems(config))
    for name, value, hook in target.parts if target is not None else ():  # a part whose package is not installed here: said so
        dist = KNOWN_DISTRIBUTIONS["target_part"].get(name)
        out.extend(hook.problems(config, value, registry) if hook is not None else [Problem(
            key="--target", severity="warning", what=f"its {name}={value} is not checked: {dist} reads it and is not installed", fix=f"pip install {dist}")])
    return out


def node_problems(config) -> list[Problem]:
    t = config.trainer
    if t.nnodes > 1 and t.placement != "ray":
        return [Problem(key="trainer.nnodes", what=f"is {t.nnodes} with trainer.placement={t.placement!r}: local placement starts all {t.nnodes * t.n_gpus_per_node} workers on this one machine",
                        fix="set trainer.placement=ray for a run over several nodes (docs/ray.md), or trainer.nnodes=1")]
    return []


def as_elsewhere(problems: list[Problem]) -> list[Problem]:
    """Missing engines / loggers as warnings: the target machine installs them, this one need not."""
    return [attrs.evolve(p, severity="warning", what=p.what + " here (checked for another machine: install it there)")
            if p.severity == "error" and any(s in p.what for s in _ELSEWHERE) else p for p in problems]
