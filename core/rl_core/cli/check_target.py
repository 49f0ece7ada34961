"""Checking a config meant for another machine: ``rlcore check --target gpu:8x80GB`` (or ``--skip-device-check``).

The target's device and GPUs per node replace this machine's; engines and loggers that are not installed
here (vLLM, SGLang, wandb on a laptop) become warnings, since the target machine has them; ``trainer.nnodes``
above 1 needs ``trainer.placement=ray`` (local placement starts every worker on this machine).
"""

from __future__ import annotations

import re

import attrs

from rl_core.problems import Problem
from rl_core.plan.features import load_features

_TARGET = re.compile(r"^(gpu|cuda|cpu)(?::(\d+)(?:x(\d+(?:\.\d+)?)\s*(?:gb|gib)?)?)?$", re.IGNORECASE)
#: what a laptop lacks that the target machine has: these become warnings under a target / --skip-device-check
_ELSEWHERE = ("which is not installed",)


@attrs.frozen
class Target:
    device: str  # "cuda" or "cpu"
    per_node: int | None  # GPUs (processes) per node, None: not said
    memory_gib: float | None
    ram_gib: float | None = None  # the node's host memory (``,ram=128GB``): checked against rl-memory-estimate's host estimate

    def describe(self) -> str:
        gpus = f"{self.per_node} x " if self.per_node else ""
        mem = f" {self.memory_gib:g} GiB" if self.memory_gib else ""
        ram = f", {self.ram_gib:g} GiB RAM" if self.ram_gib else ""
        return f"{gpus}{self.device}{mem}{ram}"


_RAM = re.compile(r"^ram=(\d+(?:\.\d+)?)(?:gb|gib)?$", re.IGNORECASE)


def parse_target(text: str) -> Target | Problem:
    """``gpu:8x80GB`` -> Target("cuda", 8, 80.0); ``gpu`` -> any number of GPUs; ``cpu:4``; ``gpu:1x80GB,ram=128GB``
    adds the node's RAM."""
    main, _, extra = text.strip().replace(" ", "").partition(",")
    m = _TARGET.match(main)
    r = _RAM.match(extra) if extra else None
    if m is None or (extra and r is None):
        return Problem(key="--target", what=f"{text!r} is not a machine description",
                       fix="write e.g. --target gpu:8x80GB (8 GPUs of 80 GB per node), gpu:1x80GB,ram=128GB (with the node's RAM), gpu:1, or cpu:4")
    kind, n, mem = m.groups()
    return Target("cpu" if kind.lower() == "cpu" else "cuda", int(n) if n else None, float(mem) if mem else None, float(r.group(1)) if r else None)


def target_overrides(target: Target) -> list[str]:
    """Overrides that make the config's device the target's (``trainer.device=auto`` would read this machine)."""
    return [f"trainer.device={target.device}"]


def target_problems(config, target: Target | None, registry=None) -> list[Problem]:
    """What the target machine cannot run: more GPUs per node than it has; several nodes without Ray; more host memory
    than its RAM (``registry``: the installed features' memory terms, rl_core.plan.features)."""
    out = []
    t = config.trainer
    if target is not None and target.per_node is not None and t.n_gpus_per_node > target.per_node:
        out.append(Problem(key="trainer.n_gpus_per_node", what=f"is {t.n_gpus_per_node} but the target {target.describe()} has {target.per_node} per node",
                           fix=f"set trainer.n_gpus_per_node to at most {target.per_node}, or use more nodes (trainer.nnodes with trainer.placement=ray)"))
    out.extend(node_problems(config))
    if target is not None and target.ram_gib and target.device == "cuda":
        check = load_features(registry, []).installed_hook("host_memory_problems") if registry is not None else None
        if check is not None:  # rl-memory-estimate's host estimate against the node's RAM (without it: not estimated)
            out.extend(check(config, registry, available=target.ram_gib * 2**30))
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
