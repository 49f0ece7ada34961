"""Mixed rewards: the rule score and the model score, weighted per data source.

``reward.weights`` maps data sources (exact names, or glob patterns such as ``"math/*"``; ``"*"`` or ``default``
for the rest; an exact name first, then the longest matching pattern) to the weights of the reward's parts::

    reward:
      weights:
        gsm8k: {rule: 1.0, model: 0.2}
        chat/*: {model: 1.0}

On the command line (Hydra's grammar has no quoted keys): ``reward.weights={gsm8k: {rule: 1, model: 0.2}, default: {model: 1}}``.
A sample's reward is ``sum(weight * part score)``. A part weighted 0 (or left out) is not computed, so a
chat data set needs no rule reward. A source that no entry matches uses the model's score alone when
``reward_model.enable`` (verl: the reward model's score is the reward), else the rule's.
"""

from __future__ import annotations

import fnmatch
import math
from typing import Any, Mapping

from rl_core.problems import Problem
from rl_core.rewards.outcome import OK, TIMEOUT, Outcome
from rl_core.rewards.scoring import RewardConfigError

PARTS = ("rule", "model")
#: the entry for sources nothing else matches, besides "*" (which Hydra's command-line grammar cannot write)
CATCH_ALL = "default"


def weight_problems(weights: Mapping[str, Any], model_enabled: bool) -> list[Problem]:
    """``reward.weights`` entries that cannot be used (unknown parts, bad numbers, a model part with no model)."""
    out: list[Problem] = []
    for source, parts in (weights or {}).items():
        key = f"reward.weights.{source}"
        if not isinstance(parts, Mapping) or not parts:
            out.append(Problem(key=key, what=f"must map parts to weights, got {parts!r}", fix=f"e.g. {key}={{rule: 1.0, model: 0.5}}"))
            continue
        for part, w in parts.items():
            if part not in PARTS:
                out.append(Problem(key=f"{key}.{part}", what=f"is not a part of the reward (parts: {', '.join(PARTS)})", fix=f"use {' or '.join(PARTS)}"))
            elif isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w):
                out.append(Problem(key=f"{key}.{part}", what=f"must be a finite number, got {w!r}", fix="e.g. 1.0 (0 leaves the part out)"))
            elif part == "model" and w != 0 and not model_enabled:
                out.append(Problem(key=f"{key}.model", what="weights a model score, but reward_model.enable is false",
                                   fix="set reward_model.enable=true and reward_model.model.path, or drop the model weight"))
    return out


def mixing_problems(config: Any) -> list[Problem]:
    """``reward.weights`` (:func:`weight_problems`), and a rule reward left unused: with ``reward_model.enable``
    the reward is the model's score alone unless ``reward.weights`` weight the rule part (the resolver's check)."""
    rm_enabled, reward = config.reward_model.enable, config.reward
    out = weight_problems(reward.weights, rm_enabled)
    if rm_enabled and (reward.name or reward.custom.path):
        weights = RewardWeights(reward.weights, model_name="model")
        if not reward.weights or all("rule" not in weights.for_source(s) for s in [*reward.weights, None]):
            key = "reward.custom.path" if reward.custom.path else "reward.name"
            out.append(Problem(key=key, severity="warning",
                               what="is set, but with reward_model.enable the reward is the model's score alone unless reward.weights weight the rule part",
                               fix="mix them, e.g. reward.weights={default: {rule: 1.0, model: 1.0}}, or remove the rule reward"))
    return out


class RewardWeights:
    """Which parts score a data source, and with which weights (the reward manager's ``mixing``).

    ``model_name``: the reward model's card name when ``reward_model.enable`` (None: no model part)."""

    def __init__(self, weights: Mapping[str, Mapping[str, float]] | None, *, model_name: str | None = None) -> None:
        self.model_name = model_name
        model_enabled = model_name is not None
        self.table = {str(k): {p: float(w) for p, w in v.items()} for k, v in (weights or {}).items()}
        self.default = {"model": 1.0} if model_enabled else {"rule": 1.0}
        self._cache: dict[Any, dict[str, float]] = {}

    def for_source(self, data_source: Any) -> dict[str, float]:
        """``{part: weight}`` (parts weighted 0 left out) for samples of ``data_source``."""
        try:
            return self._cache[data_source]
        except (KeyError, TypeError):
            pass
        chosen = self.default
        name = data_source if isinstance(data_source, str) else None
        if name is not None and name in self.table:
            chosen = self.table[name]
        elif name is not None:
            hits = [(len(p), p) for p in self.table if any(c in p for c in "*?[") and fnmatch.fnmatchcase(name, p)]
            if hits:
                chosen = self.table[max(hits)[1]]
            elif CATCH_ALL in self.table:
                chosen = self.table[CATCH_ALL]
        elif "*" in self.table or CATCH_ALL in self.table:
            chosen = self.table.get("*", self.table.get(CATCH_ALL))
        out = {p: w for p, w in chosen.items() if w != 0}
        try:
            self._cache[data_source] = out
        except TypeError:
            pass
        return out

    def metrics(self, model: Mapping[int, Outcome], parts: Mapping[str, Mapping[int, float]]) -> dict[str, float]:
        return model_metrics(model, parts)


def checked_weights(weights: Mapping[str, Any] | None, *, model_name: str | None = None) -> RewardWeights:
    """:class:`RewardWeights` of ``reward.weights``; unusable entries raise :class:`RewardConfigError`."""
    problems = weight_problems(weights or {}, model_name is not None)
    if problems:
        raise RewardConfigError("; ".join(f"{p.key}: {p.what} ({p.fix})" for p in problems))
    return RewardWeights(weights, model_name=model_name)


def model_metrics(model: Mapping[int, Outcome], parts: Mapping[str, Mapping[int, float]]) -> dict[str, float]:
    """``reward/model/*``: the model part's failures and parse failures, and each part's mean score."""
    counts = {"errors": 0, "timeouts": 0, "parse_failures": 0, "truncated": 0}
    for o in model.values():
        counts["parse_failures"] += bool((o.extras or {}).get("parse_failure"))
        counts["truncated"] += bool((o.extras or {}).get("truncated"))
        if o.status != OK:
            counts["timeouts" if o.status == TIMEOUT else "errors"] += 1
    out = {f"reward/model/{k}": float(v) for k, v in counts.items()}
    for part in ("model", "rule"):
        if parts[part]:
            out[f"reward/{part}/score_mean"] = sum(parts[part].values()) / len(parts[part])
    return out
