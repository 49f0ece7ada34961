"""The reward manager: response texts in a :class:`~rl_core.batch.Batch` -> one score per sample.

Which function scores a sample:

1. ``reward.custom.path`` + ``reward.custom.name``: a function in the user's
   Python file scores every sample (verl's ``custom_reward_function``);
2. else ``reward.name``: that registered reward scores every sample;
3. else each sample's ``data_source`` is matched against the ``data_sources``
   of the registered :class:`~rl_core.cards.RewardCard` s: an exact name
   first, then glob patterns (``"reasoning_gym/*"``), the longest pattern
   winning.

A scorer is called as ``fn(data_source=, solution_str=, ground_truth=,
extra_info=, **reward.kwargs)`` (plus ``response_length`` in tokens when the
batch has ``response_mask`` and the function accepts it) and returns a number
or a dict with ``"score"``; the dict's other numeric values are averaged into
metrics ``reward/<key>_mean`` and all of it is returned per sample.

With ``reward.num_workers > 0`` per-sample scorers run in a
:class:`~rl_core.rewards.pool.ScorerPool`: a sample whose scorer runs longer
than ``reward.timeout_s`` scores 0 and counts in ``reward/timeouts``, its
worker is killed and replaced, and the batch goes on. In-process scoring
(``num_workers=0``) stops a scorer after ``reward.timeout_s`` too (a timer
signal, see :func:`~rl_core.rewards.scoring.call_with_timeout`), with the
same outcome. A scorer that raises stops the batch with
a :class:`RewardError` naming the sample, or with ``reward.on_error="skip"``
scores 0 and counts in ``reward/errors``. Batched cards (``batched=True``)
are always called in-process, once per batch.
"""

from __future__ import annotations

import fnmatch
import os
from typing import Any, Sequence

import torch

from rl_core.batch import Batch
from rl_core.cards import RewardCard
from rl_core.problems import UserError
from rl_core.rewards.pool import ERROR, OK, TIMEOUT, Outcome, ScorerPool
from rl_core.rewards.scoring import (
    RewardConfigError,
    Sample,
    ScorerSpec,
    ScorerTimeout,
    call_contained,
    call_scorer,
    call_with_timeout,
    load_custom_function,
    load_scorer,
    normalize_result,
    numeric,
)

__all__ = ["RewardManager", "RewardConfigError", "RewardError", "scores_to_token_level", "match_data_source"]


class RewardError(UserError, RuntimeError):
    """A scorer failed on a sample while ``reward.on_error == "raise"`` (the user's scorer or data: no traceback of ours)."""

    def __init__(self, message: str, *, index: int, data_source: Any, reward: str, detail: str = "") -> None:
        super().__init__(message)
        self.index = index
        self.data_source = data_source
        self.reward = reward
        self.detail = detail  # the worker's traceback, when the scorer ran in the pool


def _is_pattern(source: str) -> bool:
    return any(ch in source for ch in "*?[")


def match_data_source(cards: Sequence[RewardCard], data_source: str) -> RewardCard | None:
    """The card that claims ``data_source``: exact names first, then the longest matching glob."""
    exact = [c for c in cards if data_source in c.data_sources]
    if len(exact) > 1:
        raise RewardConfigError(
            f"data_source {data_source!r} is claimed by several rewards: {', '.join(sorted(c.name for c in exact))}; "
            "set reward.name to choose one"
        )
    if exact:
        return exact[0]
    best: dict[str, tuple[int, RewardCard]] = {}
    for card in cards:
        for pattern in card.data_sources:
            if _is_pattern(pattern) and fnmatch.fnmatchcase(data_source, pattern):
                if card.name not in best or len(pattern) > best[card.name][0]:
                    best[card.name] = (len(pattern), card)
    if not best:
        return None
    ranked = sorted(best.values(), key=lambda t: -t[0])
    if len(ranked) > 1 and ranked[0][0] == ranked[1][0]:
        raise RewardConfigError(
            f"data_source {data_source!r} matches patterns of several rewards: "
            f"{', '.join(sorted(c.name for _, c in ranked if _ == ranked[0][0]))}; set reward.name to choose one"
        )
    return ranked[0][1]


def _spec_from_card(card: RewardCard) -> ScorerSpec:
    return ScorerSpec(label=card.name, ref=card.factory, batched=card.batched)


class RewardManager:
    """Scores batches; owns the scorer pool (use as a context manager, or call :meth:`close`).

    ``registry`` defaults to :func:`rl_core.plugins.get_registry`; pass one to
    control exactly which rewards exist (tests). ``start_method`` is the
    multiprocessing start method of the pool (default ``forkserver`` where
    available, else ``spawn``; never ``fork`` with torch loaded).
    """

    def __init__(self, cfg: Any, registry: Any = None, *, start_method: str | None = None) -> None:
        self.cfg = cfg
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
        self._pool: ScorerPool | None = None
        self._by_source: dict[Any, tuple[ScorerSpec, RewardCard | None]] = {}
        self._registry = None
        self._fixed: tuple[ScorerSpec, RewardCard | None] | None = None
        custom = cfg.custom
        if custom is not None and custom.path:
            if cfg.name:
                raise RewardConfigError(
                    f"reward.name={cfg.name!r} and reward.custom.path={custom.path!r} are both set; "
                    "set one: a registered reward, or your own function"
                )
            func_name = custom.name or "compute_score"
            load_custom_function(custom.path, func_name)  # fail now, with a clear message
            path = os.path.abspath(os.path.expanduser(custom.path))
            self._fixed = (ScorerSpec(label=f"{func_name} from {custom.path}", path=path, func_name=func_name), None)
            return
        if registry is None:
            from rl_core.plugins import get_registry

            registry = get_registry()
        self._registry = registry
        if cfg.name:
            from rl_core.plugins import UnknownCardError

            try:
                card = registry.get("reward", cfg.name)
            except UnknownCardError as exc:
                raise RewardConfigError(f"reward.name: {exc}") from None
            self._fixed = (_spec_from_card(card), card)

    # ----------------------------------------------------------- choosing
    def _installed(self) -> str:
        cards = self._registry.cards["reward"].values() if self._registry is not None else ()
        parts = [f"{c.name} ({', '.join(sorted(c.data_sources)) or 'no default data sources'})" for c in cards]
        return "; ".join(sorted(parts)) or "none"

    def scorer_for(self, data_source: Any) -> tuple[ScorerSpec, RewardCard | None]:
        """The scorer (and its card, None for a custom file) for a sample of ``data_source``."""
        if self._fixed is not None:
            return self._fixed
        try:
            return self._by_source[data_source]
        except (KeyError, TypeError):
            pass
        card = None
        if isinstance(data_source, str) and data_source:
            card = match_data_source(list(self._registry.cards["reward"].values()), data_source)
        if card is None:
            msg = (
                f"no installed reward scores data_source {data_source!r}; installed rewards (and their data sources): "
                f"{self._installed()}. Set reward.name to score every sample with one of them, "
                "or reward.custom.path / reward.custom.name to use your own function"
            )
            if self._registry is not None and self._registry.errors:
                broken = ", ".join(sorted({e.distribution for e in self._registry.errors}))
                msg += f" (plugins that failed to load and may provide it: {broken})"
            raise RewardConfigError(msg)
        self._by_source[data_source] = (_spec_from_card(card), card)
        return self._by_source[data_source]

    # ------------------------------------------------------------ scoring
    @property
    def pool(self) -> ScorerPool | None:
        if self.cfg.num_workers > 0 and self._pool is None:
            self._pool = ScorerPool(self.cfg.num_workers, self.cfg.timeout_s, start_method=self._start_method)
        return self._pool

    def score(self, batch: Batch) -> tuple[torch.Tensor, dict[str, float], list[dict[str, Any]]]:
        """``(scores[B] float32, metrics, extras)`` for the responses in ``batch``.

        ``batch`` needs the non-tensor field ``response_text`` and, unless a
        reward is named, ``data_source``; ``ground_truth`` and ``extra_info``
        are passed when present (a card may require them in its ``fields``).
        """
        n = len(batch)
        if "response_text" not in batch.non_tensors:
            raise KeyError(f"the reward manager needs the non-tensor field 'response_text'; the batch has {sorted(batch.keys())}")
        texts = batch.non_tensors["response_text"]
        column = lambda key: batch.non_tensors[key] if key in batch.non_tensors else None  # noqa: E731
        sources, truths, infos = column("data_source"), column("ground_truth"), column("extra_info")
        if sources is None and self._fixed is None:
            raise KeyError(
                "the batch has no 'data_source' field to choose a reward by; add it to the data rows "
                "or set reward.name"
            )
        lengths = None
        if "response_mask" in batch.tensors.keys():
            lengths = batch["response_mask"].sum(-1).tolist()

        groups: dict[ScorerSpec, list[Sample]] = {}
        cards: dict[ScorerSpec, RewardCard | None] = {}
        for i in range(n):
            ds = sources[i] if sources is not None else None
            spec, card = self.scorer_for(ds)
            cards[spec] = card
            groups.setdefault(spec, []).append(
                Sample(
                    i,
                    ds,
                    str(texts[i]) if texts[i] is not None else "",
                    truths[i] if truths is not None else None,
                    infos[i] if infos is not None else None,
                    int(lengths[i]) if lengths is not None else None,
                )
            )
        for spec, card in cards.items():
            missing = [f for f in sorted(card.fields if card is not None else ()) if f not in batch.non_tensors]
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
        return self._collect(n, outcomes, groups, sources)

    def _score_in_process(self, spec: ScorerSpec, kwargs: dict, samples: list[Sample], raise_now: bool) -> dict[int, Outcome]:
        fn = load_scorer(spec)
        timeout = self.cfg.timeout_s
        calls = (lambda s=s: call_with_timeout(lambda: call_contained(lambda: call_scorer(fn, s, kwargs)), timeout) for s in samples)
        return self._outcomes(spec, samples, calls, raise_now)

    def _score_batched(self, spec: ScorerSpec, samples: list[Sample], raise_now: bool) -> dict[int, Outcome]:
        fn = load_scorer(spec)
        try:
            results = call_contained(
                lambda: fn(
                    data_sources=[s.data_source for s in samples],
                    solution_strs=[s.solution_str for s in samples],
                    ground_truths=[s.ground_truth for s in samples],
                    extra_infos=[s.extra_info for s in samples],
                    **self.kwargs,
                )
            )
            results = list(results)
            if len(results) != len(samples):
                raise ValueError(f"the batched reward returned {len(results)} results for {len(samples)} samples")
        except Exception as exc:  # noqa: BLE001
            first = samples[0]
            err = f"{type(exc).__name__}: {exc} (scoring {len(samples)} samples as one batch)"
            if raise_now:
                raise self._error(spec, first.index, first.data_source, err) from exc
            return {s.index: Outcome(ERROR, error=err) for s in samples}
        return self._outcomes(spec, samples, (lambda r=r: r for r in results), raise_now)

    def _outcomes(self, spec: ScorerSpec, samples: list[Sample], results, raise_now: bool) -> dict[int, Outcome]:
        """One Outcome per sample; ``results`` yields a thunk per sample that returns its raw result or raises."""
        out: dict[int, Outcome] = {}
        for s, result in zip(samples, results):
            try:
                score, extras = normalize_result(result())
            except ScorerTimeout as exc:  # scores 0 and counts in reward/timeouts, like the pool's
                out[s.index] = Outcome(TIMEOUT, error=str(exc))
                continue
            except Exception as exc:  # noqa: BLE001
                if raise_now:
                    raise self._error(spec, s.index, s.data_source, f"{type(exc).__name__}: {exc}") from exc
                out[s.index] = Outcome(ERROR, error=f"{type(exc).__name__}: {exc}")
                continue
            out[s.index] = Outcome(OK, score, extras)
        return out

    def _error(self, spec: ScorerSpec, index: int, data_source: Any, err: str, detail: str = "") -> RewardError:
        message = (
            f"reward {spec.label!r} failed on sample {index} (data_source={data_source!r}): {err}. "
            "Set reward.on_error=skip to score such samples 0 and count them in reward/errors"
        )
        if detail:
            message += "\nthe scorer's traceback (in the reward worker):\n" + detail.rstrip()
        return RewardError(
            message,
            index=index,
            data_source=data_source,
            reward=spec.label,
            detail=detail,
        )

    def _collect(self, n: int, outcomes: dict[int, Outcome], groups, sources) -> tuple[torch.Tensor, dict, list[dict]]:
        if self.cfg.on_error == "raise":
            failed = sorted(i for i, o in outcomes.items() if o.status == ERROR)
            if failed:
                i = failed[0]
                spec = next(spec for spec, samples in groups.items() if any(s.index == i for s in samples))
                o = outcomes[i]
                raise self._error(spec, i, sources[i] if sources is not None else None, o.error, o.detail)
        values = [0.0] * n
        extras: list[dict[str, Any]] = [{} for _ in range(n)]
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}
        timeouts = errors = 0
        for i in range(n):
            o = outcomes.get(i)
            if o is None:  # pragma: no cover - every sample gets an outcome
                o = Outcome(ERROR, error="not scored")
            if o.status == OK:
                values[i] = o.score
                extras[i] = dict(o.extras or {})
                for key, value in extras[i].items():
                    v = numeric(value)
                    if v is not None:
                        sums[key] = sums.get(key, 0.0) + v
                        counts[key] = counts.get(key, 0) + 1
            elif o.status == TIMEOUT:
                timeouts += 1
                extras[i] = {"reward_timeout": True, "reward_error": o.error}
            else:
                errors += 1
                extras[i] = {"reward_error": o.error}
        scores = torch.tensor(values, dtype=torch.float32)
        metrics = {"reward/timeouts": float(timeouts), "reward/errors": float(errors)}
        metrics.update({f"reward/{k}_mean": sums[k] / counts[k] for k in sorted(sums)})
        return scores, metrics, extras

    # ---------------------------------------------------------- lifecycle
    def close(self) -> None:
        """Stop the scorer pool (a later :meth:`score` starts a new one)."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def __enter__(self) -> "RewardManager":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def scores_to_token_level(scores: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Place each sequence's score on its last valid response token.

    ``scores``: ``[B]``; ``response_mask``: ``[B, R]`` (1 on counted tokens).
    Returns ``[B, R]``, zero everywhere except at the last position where the
    mask is 1 (the last such position, so masks with holes work too). A row
    whose mask is all zero gets no score at all (verl would put it on the
    final position; an empty response has no token to credit).
    """
    if scores.dim() != 1 or response_mask.dim() != 2 or scores.shape[0] != response_mask.shape[0]:
        raise ValueError(
            f"scores_to_token_level needs scores [B] and response_mask [B, R]; "
            f"got {tuple(scores.shape)} and {tuple(response_mask.shape)}"
        )
    mask = response_mask.bool()
    b, r = mask.shape
    positions = torch.arange(r, device=mask.device).expand(b, r)
    last = torch.where(mask, positions, torch.full_like(positions, -1)).max(dim=1).values if r else torch.full((b,), -1, device=mask.device)
    dtype = scores.dtype if scores.is_floating_point() else torch.float32
    out = torch.zeros(b, r, dtype=dtype, device=mask.device)
    rows = (last >= 0).nonzero(as_tuple=True)[0]
    out[rows, last[rows]] = scores.to(device=mask.device, dtype=dtype)[rows]
    return out
