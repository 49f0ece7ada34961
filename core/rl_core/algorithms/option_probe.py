"""Which ``algorithm.options`` / ``actor.policy_loss_options`` keys an estimator or policy loss reads.

Both dicts are free-form: every key is handed to the chosen estimator /
policy loss, which reads the ones it knows. A misspelt or misplaced key
(``norm_adv_by_sd``, or a GRPO option under ``algorithm.adv_estimator=gae``)
was silently ignored: the run trained with the default the user meant to
change. Cards do not list their options, so :func:`option_problems` asks the
function itself: it runs it once on a small synthetic batch (groups of
several, of equal rewards and of one sample; uneven response lengths) with
an options mapping that records every key read, and reports each given key
that was never read, with the closest read name. A value the function
refuses (its ``ValueError``) is reported too. Third-party functions are
probed alike; one that cannot run on the synthetic batch is not judged.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import torch

from rl_core.problems import Problem, did_you_mean


class RecordingOptions(dict):
    """A dict that remembers every key looked up (``get``, ``[]``, ``in``)."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        super().__init__(data)
        self.read: set[str] = set()

    def get(self, key, default=None):  # noqa: D102
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key):
        self.read.add(key)
        return super().__contains__(key)


def _estimator_inputs(gamma: float, lam: float) -> dict[str, Any]:
    g = torch.Generator().manual_seed(0)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 0], [1, 0, 0, 0]], dtype=torch.float32)
    scores = torch.tensor([1.0, 0.0, 0.5, 1.0, 1.0, 1.0])  # group 0 varied, group 1 equal, group 2 a single sample
    last = mask.sum(-1).long() - 1
    rewards = torch.zeros_like(mask)
    rewards[torch.arange(6), last] = scores
    return dict(
        token_level_rewards=rewards,
        response_mask=mask,
        index=torch.tensor([0, 0, 0, 1, 1, 2]),
        values=torch.randn(mask.shape, generator=g),
        gamma=gamma,
        lam=lam,
        baseline_rewards=torch.tensor([0.5, 0.5, 0.5, 0.0, 0.0, 1.0]),
    )


def _policy_loss_inputs(actor: Any) -> dict[str, Any]:
    g = torch.Generator().manual_seed(0)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]], dtype=torch.float32)
    old = -torch.rand(mask.shape, generator=g) * 2
    return dict(
        old_log_prob=old,
        log_prob=old + 0.3 * torch.randn(mask.shape, generator=g),
        advantages=torch.tensor([[1.0], [-1.0], [0.5], [-0.5]]).expand_as(mask).clone(),
        response_mask=mask,
        loss_agg_mode=actor.loss_agg_mode,
        clip_ratio=actor.clip_ratio,
        clip_ratio_low=actor.clip_ratio_low,
        clip_ratio_high=actor.clip_ratio_high,
        clip_ratio_c=actor.clip_ratio_c,
    )


def _probe(fn: Callable[..., Any], inputs: dict[str, Any], given: Mapping[str, Any], prefix: str, what: str) -> list[Problem]:
    options = RecordingOptions(given)
    try:
        fn(**inputs, options=options)
    except ValueError as exc:  # the function refused a value: say so, naming it
        return [Problem(key=prefix, what=f"{what} refuses these options: {exc}", fix=f"fix the value under {prefix}")]
    except Exception:  # noqa: BLE001 - cannot run on the synthetic batch (a third-party function): not judged
        return []
    return [
        Problem(
            key=f"{prefix}.{key}",
            what=f"is not read by {what}{did_you_mean(key, options.read)}",
            why=f"{prefix} is handed to {what} as is; a key it does not read changes nothing",
            fix=f"fix the name, or remove {prefix}.{key}"
            + (f" (it reads: {', '.join(sorted(options.read))})" if options.read else f" ({what} reads no options)"),
        )
        for key in given
        if key not in options.read
    ]


def option_problems(config: Any, estimator_fn: Callable[..., Any] | None, policy_loss_fn: Callable[..., Any] | None) -> list[Problem]:
    """Unread keys of ``algorithm.options`` (by the estimator) and ``actor.policy_loss_options`` (by the loss)."""
    problems: list[Problem] = []
    algo, actor = config.algorithm, config.actor
    if algo.options and estimator_fn is not None:
        inputs = _estimator_inputs(float(algo.gamma), float(algo.lam))
        problems += _probe(estimator_fn, inputs, algo.options, "algorithm.options", f"the estimator {algo.adv_estimator!r}")
    if actor.policy_loss_options and policy_loss_fn is not None:
        problems += _probe(
            policy_loss_fn, _policy_loss_inputs(actor), actor.policy_loss_options, "actor.policy_loss_options", f"the policy loss {actor.policy_loss!r}"
        )
    return problems
