"""The reward manager: response texts in a :class:`~rl_core.batch.Batch` -> one score per sample.

The scorer of a sample is ``reward.custom.path``'s function, else ``reward.name``'s card, else the card whose
``data_sources`` match the sample's ``data_source`` (an exact name, then the longest glob). It is called as
``fn(data_source=, solution_str=, ground_truth=, extra_info=, **reward.kwargs)`` (plus ``response_length`` when it
accepts it) and returns a number or a dict with ``"score"`` (its other numbers become ``reward/<key>_mean``).
A scorer that runs past ``reward.timeout_s`` scores 0 (``reward/timeouts``); one that raises stops the batch with
:class:`RewardError`, or with ``reward.on_error=skip`` scores 0 (``reward/errors``). ``reward.num_workers > 0`` runs
per-sample scorers in a process pool, the ``reward_pool`` feature's (rl-reward-pool); batched cards run in-process,
once per batch.
"""

from __future__ import annotations

import fnmatch
import os
from typing import Any, Callable, Mapping, Sequence

import torch

from rl_core.batch import Batch
from rl_core.cards import RewardCard, load_object
from rl_core.plugins import UnknownCardError
from rl_core.problems import UserError
from rl_core.rewards.outcome import ERROR, OK, TIMEOUT, Outcome
from rl_core.rewards.scoring import (RewardConfigError, Sample, ScorerSpec, ScorerTimeout, call_contained, call_scorer,
                                     call_with_timeout, load_custom_function, load_scorer, normalize_result, numeric)

__all__ = ["RewardManager", "RewardConfigError", "RewardError", "scores_to_token_level", "match_data_source"]

#: the parts and weights of every sample without rl-reward-model's ``mixing``: the rule's score alone
RULE_ONLY = {"rule": 1.0}

#: ``model(rows) -> {row: Outcome}``: the reward model's part for rows of the batch (rl-reward-model)
ModelPart = Callable[[Sequence[int]], Mapping[int, Outcome]]


class RewardError(UserError, RuntimeError):
    """A scorer failed on a sample while ``reward.on_error == "raise"`` (the user's scorer or data: no traceback of ours)."""

    def __init__(self, message: str, *, index: int, data_source: Any, reward: str, detail: str = "") -> None:
        super().__init__(message)
        self.index = index
        self.data_source = data_source
        self.reward = reward
        self.detail = detail  # the worker's traceback, when the scorer ran in the pool


def match_data_source(cards: Sequence[RewardCard], data_source: str) -> RewardCard | None:
    """The card that claims ``data_source``: exact names first, then the longest matching glob."""
    exact = [c for c in cards if data_source in c.data_sources]
    if len(exact) > 1:
        raise RewardConfigError(f"data_source {data_source!r} is claimed by several rewards: "
                                f"{', '.join(sorted(c.name for c in exact))}; set reward.name to choose one")
    if exact:
        return exact[0]
    best: dict[str, tuple[int, RewardCard]] = {}
    for card in cards:
        for pattern in card.data_sources:
            if any(ch in pattern for ch in "*?[") and fnmatch.fnmatchcase(data_source, pattern):
                if card.name not in best or len(pattern) > best[card.name][0]:
                    best[card.name] = (len(pattern), card)
    ranked = sorted(best.values(), key=lambda t: -t[0])
    if len(ranked) > 1 and ranked[0][0] == ranked[1][0]:
        tied = ", ".join(sorted(c.name for length, c in ranked if length == ranked[0][0]))
        raise RewardConfigError(f"data_source {data_source!r} matches patterns of several rewards: {tied}; set reward.name to choose one")
    return ranked[0][1] if ranked else None


def _spec_from_card(card: RewardCard) -> ScorerSpec:
    return ScorerSpec(label=card.name, ref=card.factory, batched=card.batched)


class RewardManager:
    """Scores batches; owns the scorer pool (use as a context manager, or call :meth:`close`).

    A run builds it from its plan (:meth:`for_stack`: no registry is read); code without a plan passes a ``registry``
    (any value with ``reward.custom.path``, which reads no card). ``mixing``: rl-reward-model's weights of the rule
    and model parts per data source (``for_source``, ``model_name``, ``metrics``); None: the rule's score alone.
    ``start_method``: the pool's multiprocessing start method (never ``fork`` with torch loaded). ``scorer_pool``:
    ``(num_workers, timeout_s, start_method=) -> pool`` for ``reward.num_workers > 0``, the object of the installed
    ``reward_pool`` feature card (rl-reward-pool's ``ScorerPool``; from the plan, else from ``registry``).
    """

    def __init__(self, cfg: Any, registry: Any, *, start_method: str | None = None, mixing: Any = None, scorer_pool: Any = None,
                 _resolved: Any = None) -> None:
        self.cfg = cfg
        if mixing is None and getattr(cfg, "weights", None):
            raise RewardConfigError("reward.weights is rl-reward-model's setting and it is not installed: pip install rl-reward-model")
        self.mixing = mixing
        if cfg.num_workers < 0:
            raise RewardConfigError(f"reward.num_workers must be >= 0, got {cfg.num_workers}")
        if not cfg.timeout_s > 0:
            raise RewardConfigError(f"reward.timeout_s must be > 0, got {cfg.timeout_s}")
        if cfg.on_error not in ("raise", "skip"):
            raise RewardConfigError(f"reward.on_error must be 'raise' or 'skip', got {cfg.on_error!r}")
        if start_method == "fork":
            raise RewardConfigError("the reward pool does not use 'fork' (unsafe with torch); use 'forkserver' or 'spawn'")
        self.kwargs = dict(cfg.kwargs or {})
        self._start_method = start_method
        if scorer_pool is None and cfg.num_workers > 0 and registry is not None:
            card = registry.cards.get("feature", {}).get("reward_pool")
            scorer_pool = load_object(card.provides) if card is not None and card.provides else None
        if scorer_pool is None and cfg.num_workers > 0:
            raise RewardConfigError(f"reward.num_workers={cfg.num_workers} scores in worker processes, rl-reward-pool's feature, and it is not "
                                    "installed: pip install rl-reward-pool, or set reward.num_workers=0 (scores in-process)")
        self._scorer_pool = scorer_pool
        self._pool: Any = None
        self._by_source: dict[Any, tuple[ScorerSpec, RewardCard | None]] = {}
        self._cards: dict[str, RewardCard] = {}  # the reward cards data sources are matched against
        self._broken: tuple[str, ...] = ()  # distributions whose plugins failed to load (named when nothing matches)
        self._fns: dict[ScorerSpec, Callable] = {}  # functions already loaded (the Stack's), by scorer
        self._fixed: tuple[ScorerSpec, RewardCard | None] | None = None  # the scorer of every sample, if one is set
        custom = cfg.custom
        if custom is not None and custom.path:
            if cfg.name:
                raise RewardConfigError(f"reward.name={cfg.name!r} and reward.custom.path={custom.path!r} are both set; "
                                        "set one: a registered reward, or your own function")
            func_name = custom.name or "compute_score"
            load_custom_function(custom.path, func_name)  # fail now, with a clear message
            path = os.path.abspath(os.path.expanduser(custom.path))
            self._fixed = (ScorerSpec(label=f"{func_name} from {custom.path}", path=path, func_name=func_name), None)
        elif _resolved is not None:  # for_stack: the resolver's cards and loaded function
            cards, named, named_fn, self._broken = _resolved
            self._cards = {c.name: c for c in cards}
            if cfg.name:
                if named is None or named_fn is None:
                    raise RewardConfigError(f"reward.name={cfg.name!r}: the resolved stack has no loaded reward; resolve the config again")
                self._fixed = (_spec_from_card(named), named)
                self._fns[self._fixed[0]] = named_fn
        elif registry is None:
            raise TypeError("RewardManager needs the reward cards: RewardManager.for_stack(plan) in a run, or a registry "
                            "(rl_core.plugins.get_registry()) in code that has no plan")
        else:
            self._cards = dict(registry.cards["reward"])
            self._broken = tuple(sorted({e.distribution for e in registry.errors}))
            if cfg.name:
                try:
                    card = registry.get("reward", cfg.name)
                except UnknownCardError as exc:
                    raise RewardConfigError(f"reward.name: {exc}") from None
                self._fixed = (_spec_from_card(card), card)

    @classmethod
    def for_stack(cls, stack: Any, *, start_method: str | None = None) -> RewardManager:
        """The manager of a resolved run: the Stack's reward function and reward cards, no registry lookup."""
        features = getattr(stack, "features", None)
        feature = features.get("reward_model") if features is not None else None
        return cls(stack.config.reward, None, start_method=start_method, mixing=feature.mixing(stack.config) if feature is not None else None,
                   scorer_pool=features.get("reward_pool") if features is not None else None, _resolved=(stack.reward_cards, stack.reward, stack.reward_fn, stack.plugin_errors))

    def scorer_for(self, data_source: Any) -> tuple[ScorerSpec, RewardCard | None]:
        """The scorer (and its card, None for a custom file) for a sample of ``data_source``."""
        if self._fixed is not None:
            return self._fixed
        try:
            return self._by_source[data_source]
        except (KeyError, TypeError):
            pass
        card = match_data_source(list(self._cards.values()), data_source) if isinstance(data_source, str) and data_source else None
        if card is None:
            installed = sorted(f"{c.name} ({', '.join(sorted(c.data_sources)) or 'no default data sources'})" for c in self._cards.values())
            msg = (f"no installed reward scores data_source {data_source!r}; installed rewards (and their data sources): "
                   f"{'; '.join(installed) or 'none'}. Set reward.name to score every sample with one of them, "
                   "or reward.custom.path / reward.custom.name to use your own function")
            if self._broken:
                msg += f" (plugins that failed to load and may provide it: {', '.join(self._broken)})"
            raise RewardConfigError(msg)
        self._by_source[data_source] = (_spec_from_card(card), card)
        return self._by_source[data_source]

    @property
    def pool(self) -> Any:
        if self.cfg.num_workers > 0 and self._pool is None:
            self._pool = self._scorer_pool(self.cfg.num_workers, self.cfg.timeout_s, start_method=self._start_method)
        return self._pool

    def score(self, batch: Batch, model: ModelPart | None = None) -> tuple[torch.Tensor, dict[str, float], list[dict[str, Any]]]:
        """``(scores[B] float32, metrics, extras)`` for the responses in ``batch`` (non-tensor ``response_text``, and
        ``data_source`` unless a reward is named); ``model(rows) -> {row: Outcome}`` scores the rows whose weights
        have a model part (the trainer's dispatch to the workers that hold the reward model)."""
        n, non = len(batch), batch.non_tensors
        if "response_text" not in non:
            raise KeyError(f"the reward manager needs the non-tensor field 'response_text'; the batch has {sorted(batch.keys())}")
        column = lambda key: non[key] if key in non else [None] * n  # noqa: E731
        texts, sources, truths, infos = non["response_text"], column("data_source"), column("ground_truth"), column("extra_info")
        has_sources = "data_source" in non
        weights = [self.mixing.for_source(sources[i]) if self.mixing else RULE_ONLY for i in range(n)]
        rule_rows = [i for i in range(n) if "rule" in weights[i]]
        model_rows = [i for i in range(n) if "model" in weights[i]]
        if model_rows and model is None:
            raise RewardConfigError(f"reward.weights give {len(model_rows)} samples a model score but no reward model runs; "
                                    "set reward_model.enable=true and reward_model.model.path, or weight only the rule part")
        if rule_rows and not has_sources and self._fixed is None:
            raise KeyError("the batch has no 'data_source' field to choose a reward by; add it to the data rows or set reward.name")
        lengths = batch["response_mask"].sum(-1).tolist() if "response_mask" in batch.tensors.keys() else [None] * n

        groups: dict[ScorerSpec, list[Sample]] = {}
        cards: dict[ScorerSpec, RewardCard | None] = {}
        for i in rule_rows:
            spec, cards[spec] = self.scorer_for(sources[i])
            text = str(texts[i]) if texts[i] is not None else ""
            groups.setdefault(spec, []).append(Sample(i, sources[i], text, truths[i], infos[i], int(lengths[i]) if lengths[i] is not None else None))
        for spec, card in cards.items():
            missing = [f for f in sorted(card.fields if card is not None else ()) if f not in non]
            if missing:
                raise KeyError(f"reward {spec.label!r} needs the batch field(s) {missing}; the batch has {sorted(batch.keys())}")

        raise_now = self.cfg.on_error == "raise"
        outcomes: dict[int, Outcome] = {}
        pooled = [(spec, self.kwargs, samples) for spec, samples in groups.items() if not spec.batched]
        for spec, samples in groups.items():
            if spec.batched:
                outcomes.update(self._score_batched(spec, samples, raise_now))
        if pooled and self.pool is not None:
            outcomes.update(self.pool.run(pooled, stop_on_error=raise_now))
        else:
            for spec, kwargs, samples in pooled:
                outcomes.update(self._score_in_process(spec, kwargs, samples, raise_now))
        model_outcomes = model(model_rows) if model_rows else {}
        return self._collect(n, outcomes, model_outcomes, weights, groups, sources if has_sources else None)

    def _load(self, spec: ScorerSpec) -> Callable:
        """The scorer's function: the one the Stack loaded, else imported once (``load_scorer``)."""
        fn = self._fns.get(spec)
        if fn is None:
            fn = self._fns[spec] = load_scorer(spec)
        return fn

    def _score_in_process(self, spec: ScorerSpec, kwargs: dict, samples: list[Sample], raise_now: bool) -> dict[int, Outcome]:
        fn = self._load(spec)
        timeout = self.cfg.timeout_s
        calls = (lambda s=s: call_with_timeout(lambda: call_contained(lambda: call_scorer(fn, s, kwargs)), timeout) for s in samples)
        return self._outcomes(spec, samples, calls, raise_now)

    def _score_batched(self, spec: ScorerSpec, samples: list[Sample], raise_now: bool) -> dict[int, Outcome]:
        fn = self._load(spec)
        try:
            results = list(call_contained(lambda: fn(
                data_sources=[s.data_source for s in samples], solution_strs=[s.solution_str for s in samples],
                ground_truths=[s.ground_truth for s in samples], extra_infos=[s.extra_info for s in samples], **self.kwargs)))
            if len(results) != len(samples):
                raise ValueError(f"the batched reward returned {len(results)} results for {len(samples)} samples")
        except Exception as exc:  # noqa: BLE001
            err = f"{type(exc).__name__}: {exc} (scoring {len(samples)} samples as one batch)"
            if raise_now:
                raise self._error(spec, samples[0].index, samples[0].data_source, err) from exc
            return {s.index: Outcome(ERROR, error=err) for s in samples}
        return self._outcomes(spec, samples, (lambda r=r: r for r in results), raise_now)

    def _outcomes(self, spec: ScorerSpec, samples: list[Sample], results, raise_now: bool) -> dict[int, Outcome]:
        """One Outcome per sample; ``results`` yields a thunk per sample that returns its raw result or raises."""
        out: dict[int, Outcome] = {}
        for s, result in zip(samples, results):
            try:
                out[s.index] = Outcome(OK, *normalize_result(result()))
            except ScorerTimeout as exc:  # scores 0 and counts in reward/timeouts, like the pool's
                out[s.index] = Outcome(TIMEOUT, error=str(exc))
            except Exception as exc:  # noqa: BLE001
                if raise_now:
                    raise self._error(spec, s.index, s.data_source, f"{type(exc).__name__}: {exc}") from exc
                out[s.index] = Outcome(ERROR, error=f"{type(exc).__name__}: {exc}")
        return out

    def _error(self, spec: ScorerSpec, index: int, data_source: Any, err: str, detail: str = "") -> RewardError:
        message = (f"reward {spec.label!r} failed on sample {index} (data_source={data_source!r}): {err}. "
                   "Set reward.on_error=skip to score such samples 0 and count them in reward/errors")
        if detail:
            message += "\nthe scorer's traceback (in the reward worker):\n" + detail.rstrip()
        return RewardError(message, index=index, data_source=data_source, reward=spec.label, detail=detail)

    def _collect(self, n: int, rule: dict[int, Outcome], model: dict[int, Outcome], weights, groups, sources) -> tuple[torch.Tensor, dict, list[dict]]:
        """The weighted sum of each sample's parts (0 when one failed: a timeout named first), with the metrics."""
        if self.cfg.on_error == "raise":
            for part, got in (("rule", rule), ("model", model)):
                failed = sorted(i for i, o in got.items() if o.status == ERROR)
                if failed:
                    i = failed[0]
                    spec = next(spec for spec, samples in groups.items() if any(s.index == i for s in samples)) if part == "rule" \
                        else ScorerSpec(label=f"reward_model {self.mixing.model_name}")
                    raise self._error(spec, i, sources[i] if sources is not None else None, got[i].error, got[i].detail)
        values, extras, failed_rows = [0.0] * n, [{} for _ in range(n)], [False] * n
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}
        parts: dict[str, dict[int, float]] = {"rule": {}, "model": {}}
        timeouts = errors = 0
        for i in range(n):
            got = {"rule": rule.get(i), "model": model.get(i)}
            total, bad = 0.0, None
            for part, w in weights[i].items():
                o = got[part]
                if o is None:  # pragma: no cover - every weighted part gets an outcome
                    o = Outcome(ERROR, error=f"the {part} part was not scored")
                if o.status != OK:
                    if bad is None or (o.status == TIMEOUT and bad.status != TIMEOUT):
                        bad = o
                    continue
                parts[part][i] = o.score
                total += w * o.score
                if part == "rule":
                    extras[i].update(o.extras or {})
                    for key, value in (o.extras or {}).items():
                        v = numeric(value)
                        if v is not None:
                            sums[key] = sums.get(key, 0.0) + v
                            counts[key] = counts.get(key, 0) + 1
                elif len(weights[i]) > 1 or o.extras:
                    extras[i]["model_score"] = o.score
            if bad is None:
                values[i] = total
            elif bad.status == TIMEOUT:
                failed_rows[i], timeouts, extras[i] = True, timeouts + 1, {"reward_timeout": True, "reward_error": bad.error}
            else:
                failed_rows[i], errors, extras[i] = True, errors + 1, {"reward_error": bad.error}
        metrics = {"reward/timeouts": float(timeouts), "reward/errors": float(errors)}
        metrics.update({f"reward/{k}_mean": sums[k] / counts[k] for k in sorted(sums)})
        if model:
            metrics.update(self.mixing.metrics(model, parts))
        metrics.update(source_metrics(sources, values, {k: v for k, v in parts.items() if v}, failed_rows))
        return torch.tensor(values, dtype=torch.float32), metrics, extras

    def close(self) -> None:
        """Stop the scorer pool (a later :meth:`score` starts a new one)."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def __enter__(self) -> "RewardManager":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def source_metrics(sources: Sequence[Any] | None, totals: Sequence[float], parts: Mapping[str, Mapping[int, float]], failed: Sequence[bool]) -> dict[str, float]:
    """``reward/<source>/mean`` (the mixed reward), ``reward/<source>/<part>_mean`` and ``reward/<source>/failed``."""
    if sources is None:
        return {}
    rows: dict[str, list[int]] = {}
    for i, s in enumerate(sources):
        rows.setdefault(str(s), []).append(i)
    out: dict[str, float] = {}
    for source, idx in sorted(rows.items()):
        out[f"reward/{source}/mean"] = sum(totals[i] for i in idx) / len(idx)
        out[f"reward/{source}/failed"] = float(sum(failed[i] for i in idx))
        for part, scores in parts.items():
            got = [scores[i] for i in idx if i in scores]
            if got:
                out[f"reward/{source}/{part}_mean"] = sum(got) / len(got)
    return out


def scores_to_token_level(scores: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """``[B, R]``: each row's score on its last response token where ``response_mask`` is 1 (masks with holes work),
    zero elsewhere; a row whose mask is all zero gets no score (verl would credit the final position)."""
    if scores.dim() != 1 or response_mask.dim() != 2 or scores.shape[0] != response_mask.shape[0]:
        raise ValueError(f"scores_to_token_level needs scores [B] and response_mask [B, R]; "
                         f"got {tuple(scores.shape)} and {tuple(response_mask.shape)}")
    mask = response_mask.bool()
    b, r = mask.shape
    positions = torch.arange(r, device=mask.device).expand(b, r)
    last = torch.where(mask, positions, torch.full_like(positions, -1)).max(dim=1).values if r else torch.full((b,), -1, device=mask.device)
    dtype = scores.dtype if scores.is_floating_point() else torch.float32
    out = torch.zeros(b, r, dtype=dtype, device=mask.device)
    rows = (last >= 0).nonzero(as_tuple=True)[0]
    out[rows, last[rows]] = scores.to(device=mask.device, dtype=dtype)[rows]
    return out
