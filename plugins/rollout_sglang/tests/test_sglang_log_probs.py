"""Which steps ask SGLang for the sampled tokens' log-probs (issue 48), through the real resolver (no engine): with the
defaults only every ``rl_core.rollout.log_prob_decision.GAP_EVERY``-th step, with a rollout correction every step. The adapter
sends ``return_logprob=params.logprobs`` in process (a server is always asked: its answer carries the token ids there)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from rl_core.rollout import log_prob_decision
from rl_core.trainer.loop import Trainer

from test_sglang_plugin import _resolve, model_path, sglang_version  # noqa: F401  (fixtures)


def _asked(model_path, *overrides):
    stack, problems = _resolve(model_path, *overrides)
    assert stack is not None, [p.render() for p in problems]
    loop = SimpleNamespace(config=stack.config, stack=stack)
    return stack.config.rollout.calculate_log_probs, [s for s in range(1, 2 * log_prob_decision.GAP_EVERY + 2) if Trainer.sampling(loop, step=s).logprobs]


def test_defaults_ask_on_the_sampled_steps_only(model_path, sglang_version):
    assert _asked(model_path) == (None, [1, 1 + log_prob_decision.GAP_EVERY, 1 + 2 * log_prob_decision.GAP_EVERY])


@pytest.mark.parametrize("overrides", [["algorithm.rollout_correction.rollout_is=token"], ["rollout.calculate_log_probs=true"]])
def test_a_correction_or_true_asks_every_step(model_path, sglang_version, overrides):
    assert _asked(model_path, *overrides) == (True, list(range(1, 2 * log_prob_decision.GAP_EVERY + 2)))
