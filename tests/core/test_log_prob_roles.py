"""Log-prob roles (rl_core.plan.roles, rl_core.trainer.log_prob_roles): a second model's per-token log-probs reach
the batch and the estimator that declares them; estimators that declare none are called as before."""

from __future__ import annotations

import types

import pytest
import torch
from rl_core.batch import Batch
from rl_core.cards import EstimatorCard
from rl_core.trainer.log_prob_roles import LogProbRoles, needs_actor_log_probs


class ShiftRole:
    """A role whose log-probs are the sampled token ids scaled: known values, any shape the test asks for."""

    def __init__(self, config, tokenizer, shape=None):
        self.config, self.tokenizer, self.shape = config, tokenizer, shape

    def log_probs(self, batch, temperature):
        lp = -batch["responses"].float() / (10.0 * temperature)
        return lp if self.shape is None else torch.zeros(self.shape)


def _stack(log_probs=("actor", "teacher"), shape=None):
    card = EstimatorCard(name="est", factory="x:y", log_probs=log_probs)
    roles = tuple((n, None, lambda c, t, s=shape: ShiftRole(c, t, s)) for n in log_probs if n != "actor")
    return types.SimpleNamespace(estimator=card, log_prob_roles=roles, config="CFG")


def _batch(**extra):
    responses = torch.tensor([[3, 4, 5], [6, 7, 0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    return Batch({"responses": responses, "response_mask": mask, **extra})


def test_the_role_fills_the_batch_and_the_estimator_gets_both():
    rollout = -torch.ones(2, 3)
    roles = LogProbRoles(_stack(), tokenizer="TOK")
    assert roles.roles[0][1].config == "CFG" and roles.roles[0][1].tokenizer == "TOK"
    b = _batch(rollout_log_probs=rollout)
    t, metrics = {}, {}
    roles.compute(b, 2.0, t, metrics)
    expected = -b["responses"].float() / 20.0
    torch.testing.assert_close(b["teacher_log_prob"], expected)
    assert "timing_s/teacher" in t
    m = b["response_mask"].float()
    torch.testing.assert_close(torch.tensor(metrics["teacher/reverse_kl"]), ((rollout - expected) * m).sum() / m.sum())
    got = roles.for_estimator(b)["log_probs"]
    assert set(got) == {"actor", "teacher"}
    torch.testing.assert_close(got["actor"], rollout)
    b["old_log_probs"] = torch.full((2, 3), -2.0)  # the old log-prob pass wins over the sampler's
    torch.testing.assert_close(roles.for_estimator(b)["log_probs"]["actor"], b["old_log_probs"])


def test_an_estimator_without_log_probs_is_called_as_before():
    roles = LogProbRoles(_stack(log_probs=()), tokenizer=None)
    b = _batch()
    roles.compute(b, 1.0, {}, {})
    assert roles.for_estimator(b) == {} and "teacher_log_prob" not in b.tensors.keys()


def test_a_role_returning_the_wrong_shape_is_named():
    roles = LogProbRoles(_stack(shape=(2, 5)), tokenizer=None)
    with pytest.raises(ValueError, match="log-prob role 'teacher' returned \\[2, 5\\].*\\[2, 3\\]"):
        roles.compute(_batch(), 1.0, {}, {})


def test_reading_the_actor_asks_for_its_log_probs():
    assert needs_actor_log_probs(_stack()) and not needs_actor_log_probs(_stack(log_probs=("teacher",)))
