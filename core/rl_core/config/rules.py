"""Declarative value rules for config fields, checked once at load time.

A schema field carries its rule in its attrs metadata (``metadata={RULE: ...}``, via :mod:`rl_core.config.schema`'s
:func:`num`, :func:`choice`, ...); :func:`check_values` gives one Problem per key that breaks it (every float must be
finite). Rules that tie keys together are :data:`CROSS_RULES`.
"""

from __future__ import annotations

import math
import types
import typing
from typing import Any, Callable, Iterable, Sequence

import attrs

from rl_core.problems import Problem, did_you_mean
from rl_core.util.type_hints import type_hints

RULE = "rl_core_rule"


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    return repr(v) if isinstance(v, str) else str(v)


@attrs.frozen
class Range:
    """A number within bounds; ``also`` lists extra allowed values (e.g. -1 meaning "off")."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    also: tuple = ()
    hint: str = ""  # what the value means, appended to the fix

    def allowed(self) -> str:
        parts = []
        if self.gt is not None:
            parts.append(f"> {_fmt(self.gt)}")
        if self.ge is not None:
            parts.append(f">= {_fmt(self.ge)}")
        if self.lt is not None:
            parts.append(f"< {_fmt(self.lt)}")
        if self.le is not None:
            parts.append(f"<= {_fmt(self.le)}")
        text = " and ".join(parts) or "any number"
        if (self.gt == 0 or self.ge == 1) and self.le is None and self.lt is None:
            text = f"a positive number ({text})"
        if self.also:
            text += " or " + " or ".join(_fmt(a) for a in self.also)
        return text

    def ok(self, v: float) -> bool:
        if v in self.also:
            return True
        return not (
            (self.ge is not None and v < self.ge)
            or (self.gt is not None and v <= self.gt)
            or (self.le is not None and v > self.le)
            or (self.lt is not None and v >= self.lt)
        )

    def nearest(self, v: float, is_int: bool) -> Any:
        if self.gt is not None and v <= self.gt:
            return self.gt + 1 if is_int else None  # no nearest for an open float bound; the hint says
        if self.ge is not None and v < self.ge:
            return int(self.ge) if is_int else self.ge
        if self.le is not None and v > self.le:
            return int(self.le) if is_int else self.le
        if self.lt is not None and v >= self.lt:
            return self.lt - 1 if is_int else None
        return None

    def check(self, key: str, value: Any) -> Problem | None:
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        if self.ok(value):
            return None
        near = self.nearest(value, isinstance(value, int))
        fix = f"set {key} to {self.allowed()}"
        if near is not None:
            fix += f"; nearest valid value: {_fmt(near)}"
        if self.hint:
            fix += f" ({self.hint})"
        return Problem(key=key, what=f"{_fmt(value)} is out of range: must be {self.allowed()}", fix=fix)


@attrs.frozen
class OneOf:
    """A value from a fixed set; ``options`` may be a callable (read lazily, e.g. from an algorithms table)."""

    options: Any
    hint: str = ""

    def values(self) -> tuple:
        opts = self.options() if callable(self.options) else self.options
        return tuple(opts)

    def check(self, key: str, value: Any) -> Problem | None:
        if value is None:
            return None
        opts = self.values()
        if value in opts:
            return None
        fix = f"use one of: {', '.join(map(str, opts))}"
        if self.hint:
            fix += f" ({self.hint})"
        return Problem(key=key, what=f"{value!r} is not allowed{did_you_mean(str(value), [str(o) for o in opts])}", fix=fix)


@attrs.frozen
class NonEmpty:
    """A string (or list) that must not be empty / blank."""

    hint: str = ""

    def check(self, key: str, value: Any) -> Problem | None:
        if value is None or (isinstance(value, str) and value.strip()) or (isinstance(value, (list, tuple)) and value):
            return None
        return Problem(key=key, what=f"must not be empty, got {value!r}", fix=f"set {key}" + (f" ({self.hint})" if self.hint else ""))


@attrs.frozen
class Length:
    """A list of exactly ``n`` items, each checked with ``item`` (a rule, optional; the first failure, as ``key[i]``)."""

    n: int
    item: Any = None
    example: str = ""

    def check(self, key: str, value: Any) -> Problem | None:
        if value is None:
            return None
        if len(value) != self.n:
            fix = f"give {key} exactly {self.n} values" + (f", e.g. {self.example}" if self.example else "")
            return Problem(key=key, what=f"must have {self.n} values, got {len(value)}: {value!r}", fix=fix)
        problems = (self.item.check(f"{key}[{i}]", v) for i, v in enumerate(value)) if self.item is not None else ()
        return next((p for p in problems if p is not None), None)


# ------------------------------------------------------------------- walking
def _floats(value: Any) -> Iterable[tuple[str, float]]:
    if isinstance(value, float):
        yield "", value
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            for sub, f in _floats(v):
                yield f"[{i}]{sub}", f


def _is_float_typed(tp: Any) -> bool:
    if tp is float:
        return True
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType, list):
        return any(_is_float_typed(a) for a in typing.get_args(tp))
    return False


def check_values(obj: Any, prefix: str = "") -> list[Problem]:
    """One problem per field of ``obj`` (an attrs config, walked recursively) that breaks its rule."""
    problems: list[Problem] = []
    hints = type_hints(type(obj))
    for f in attrs.fields(type(obj)):
        key = f"{prefix}.{f.name}" if prefix else f.name
        value = getattr(obj, f.name)
        if attrs.has(type(value)):
            problems.extend(check_values(value, key))
            continue
        if f.name == "sections":  # packages' sections (rl_core.config.sections), keyed as the config writes them
            for name, section in value.items():
                problems.extend(check_values(section, f"{prefix}.{name}" if prefix else name))
            continue
        rule = f.metadata.get(RULE)
        if _is_float_typed(hints.get(f.name)):
            bad = [(sub, v) for sub, v in _floats(value) if not math.isfinite(v)]
            if bad:
                sub, v = bad[0]
                allowed = f"; allowed: {rule.allowed()}" if isinstance(rule, Range) else ""
                problems.append(Problem(key=key + sub, what=f"{v} is not a finite number", fix=f"set {key + sub} to a finite number{allowed}"))
                continue
        p = rule.check(key, value) if rule is not None else None
        if p is not None:
            problems.append(p)
    return problems


# --------------------------------------------------------------- cross-field
def _greedy_sampling(cfg: Any) -> Problem | None:
    r = cfg.rollout
    if r.do_sample and r.temperature == 0:
        return Problem(key="rollout.temperature", what="0 with rollout.do_sample=true samples greedily: every response to a prompt is the same",
                       why="GRPO-style estimators compare the n samples of a prompt; identical samples have zero advantage and nothing is learned",
                       fix="set rollout.temperature to 1.0 (nearest valid: any value > 0), or rollout.do_sample=false if greedy decoding is what you want")
    return None


def _clip_low(cfg: Any) -> Problem | None:
    low, loss = cfg.actor.clip_ratio_low, cfg.actor.policy_loss
    if low is not None and low >= 1 and loss != "cispo":
        return Problem(key="actor.clip_ratio_low", what=f"{_fmt(low)} makes the lower clip bound 1 - {_fmt(low)} <= 0 for actor.policy_loss={loss!r}",
                       fix="set actor.clip_ratio_low below 1 (0.2 is usual); only cispo reads a larger value (verl's example uses 10)")
    return None


def _min_lr(cfg: Any) -> list[Problem]:
    """``optim.min_lr`` (absolute) is at most ``optim.lr`` and not given together with ``min_lr_ratio``."""
    problems = []
    for section in ("actor", "critic"):
        o = getattr(cfg, section).optim
        if o.min_lr is None:
            continue
        if o.min_lr > o.lr:
            problems.append(Problem(key=f"{section}.optim.min_lr", what=f"{_fmt(o.min_lr)} is above {section}.optim.lr={_fmt(o.lr)}: the decay would raise the learning rate",
                                    fix=f"set {section}.optim.min_lr to at most {_fmt(o.lr)}"))
        elif o.min_lr_ratio:
            problems.append(Problem(key=f"{section}.optim.min_lr", what=f"and {section}.optim.min_lr_ratio={_fmt(o.min_lr_ratio)} both set the end of the decay",
                                    fix=f"keep one: {section}.optim.min_lr (absolute) or {section}.optim.min_lr_ratio (a fraction of lr)"))
    return problems


def _pad_to_length(cfg: Any) -> Problem | None:
    a = cfg.actor
    if a.pad_to_length and a.use_remove_padding is False:
        return Problem(key="actor.pad_to_length", what="is true with actor.use_remove_padding=false: it pads the packed rows, and nothing is packed",
                       fix="set actor.use_remove_padding=true (or leave it unset), or actor.pad_to_length=false")
    return None


CHECKPOINT_PARTS = ("model", "optimizer", "extra", "hf_model")


def _checkpoint_contents(cfg: Any) -> list[Problem]:
    t, out = cfg.trainer, []
    for key, given in (("trainer.save_contents", t.save_contents), ("trainer.load_contents", t.load_contents)):
        if given is None:
            continue
        bad = [str(x) for x in given if x not in CHECKPOINT_PARTS]
        if bad:
            out.append(Problem(key=key, what=f"{given}: {', '.join(bad)} is not a part of a checkpoint", fix=f"choose among {', '.join(CHECKPOINT_PARTS)}"))
        elif "model" not in given:
            out.append(Problem(key=key, what=f"{given} leaves the model out: an rl-core checkpoint is for resuming training, which needs the model",
                               fix=f"add model, e.g. {key}=[model,optimizer,extra]; for weights only, the HF folder (hf_final / hf_model) is the export"))
    return out


def _gen_batch_size(cfg: Any) -> Problem | None:
    """data.gen_batch_size is read by dynamic sampling only (rl-algorithms' algorithm.filter_groups; its checks come with it)."""
    data = cfg.data
    sampling = getattr(getattr(cfg.algorithm, "filter_groups", None), "enable", False)  # rl-algorithms' section
    if not sampling and data.gen_batch_size is not None and data.gen_batch_size != data.train_batch_size:
        return Problem(key="data.gen_batch_size", what=f"is {data.gen_batch_size} but only dynamic sampling generates more prompts than a step trains on",
                       fix="set algorithm.filter_groups.enable=true (with algorithm.filter_groups.metric), or unset data.gen_batch_size")
    return None


CROSS_RULES: Sequence[Callable[[Any], Problem | list[Problem] | None]] = (_greedy_sampling, _clip_low, _gen_batch_size, _min_lr, _pad_to_length, _checkpoint_contents)


def check_config(cfg: Any, *, rule_keys: set[str] | None = None) -> list[Problem]:
    """Every value and cross-key rule of a RunConfig, at most one problem per key; ``rule_keys`` collects the keys a
    cross-key rule reported."""
    problems = check_values(cfg)
    seen = {p.key for p in problems}
    for rule in CROSS_RULES:
        found = rule(cfg)
        for p in found if isinstance(found, list) else [found] if found is not None else []:
            if rule_keys is not None:
                rule_keys.add(p.key)
            if p.key not in seen:
                seen.add(p.key)
                problems.append(p)
    return problems
