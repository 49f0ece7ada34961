"""compute_actor_loss / compute_critic_loss composition, metric names, and advantage metrics."""

import math
import types

import attrs
import pytest
import torch
from rl_core import hookimpl
from rl_core.algorithms.actor_loss import compute_actor_loss, compute_critic_loss
from rl_core.algorithms.advantages import compute_advantage
from rl_core.cards import EstimatorCard, PolicyLossCard, Provider
from rl_core.config.schema import ActorConfig, CriticConfig
from rl_core.plugins import PluginManager

from ._helpers import close, t

LN = math.log


def _batch():
    # the ppo_clip example of test_policy_loss: ratios [0.5, 1.5, 0.5, 1.5], A = [1, 1, -1, -1]
    # -> pg_loss (token-mean) 0.15, clipfrac 0.5; plus a masked padding token at the end
    log_prob = t([[LN(0.5), LN(1.5), LN(0.5), LN(1.5), 0.0]]).requires_grad_()
    return dict(
        log_prob=log_prob,
        old_log_prob=torch.zeros(1, 5),
        advantages=t([[1.0, 1.0, -1.0, -1.0, 0.0]]),
        response_mask=t([[1, 1, 1, 1, 0]]),
    )


def test_actor_loss_policy_only():
    loss, m = compute_actor_loss(**_batch(), cfg=ActorConfig(policy_loss="ppo_clip"))
    close(loss, 0.15)
    close(m["actor/pg_loss"], 0.15)
    close(m["actor/pg_clipfrac"], 0.5)
    assert set(m) == {"actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl"}
    # verl's default ("vanilla") adds the dual clip; no ratio here exceeds clip_ratio_c = 3
    loss, m = compute_actor_loss(**_batch(), cfg=ActorConfig())
    close(loss, 0.15)
    assert set(m) == {"actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower"}


def test_actor_loss_with_entropy_and_kl():
    b = _batch()
    entropy = torch.full((1, 5), 2.0)
    ref = b["log_prob"].detach() - 0.1  # k1 = log_prob - ref = 0.1 on every token
    cfg = ActorConfig(entropy_coeff=0.01, use_kl_loss=True, kl_loss_coef=0.5, kl_loss_type="k1")
    loss, m = compute_actor_loss(**b, entropy=entropy, ref_log_prob=ref, cfg=cfg)
    # 0.15 (pg) - 0.01 * 2.0 (entropy bonus) + 0.5 * 0.1 (kl loss) = 0.15 - 0.02 + 0.05 = 0.18
    close(loss, 0.18)
    close(m["actor/entropy"], 2.0)
    close(m["actor/kl_loss"], 0.1)
    close(m["actor/kl_coef"], 0.5)
    loss.backward()  # the composed loss is differentiable
    assert torch.isfinite(b["log_prob"].grad).all()


def test_actor_loss_dual_clip_metric_and_mode():
    cfg = ActorConfig(policy_loss="dual_clip", loss_agg_mode="seq-mean-token-sum")
    loss, m = compute_actor_loss(**_batch(), cfg=cfg)
    close(loss, 0.6)  # one sequence: token sum 0.6 (no token hits the dual-clip cap)
    assert "actor/pg_clipfrac_lower" in m


def test_actor_loss_missing_inputs():
    with pytest.raises(ValueError, match="entropy"):
        compute_actor_loss(**_batch(), cfg=ActorConfig(entropy_coeff=0.01))
    with pytest.raises(ValueError, match="ref_log_prob"):
        compute_actor_loss(**_batch(), cfg=ActorConfig(use_kl_loss=True))


def test_critic_loss_metrics():
    # the value_loss example: 0.5 * 1.73 / 3, clipfrac 2/3; vpred mean (1 + 2 + 0) / 3 = 1
    loss, m = compute_critic_loss(
        vpreds=t([[1.0, 2.0, 0.0]]), values=t([[0.5, 1.0, 0.5]]), returns=t([[1.5, 1.0, 0.0]]),
        response_mask=t([[1, 1, 1]]), cfg=CriticConfig(cliprange_value=0.2),
    )
    close(loss, 0.5 * 1.73 / 3)
    close(m["critic/vf_loss"], 0.5 * 1.73 / 3)
    close(m["critic/vf_clipfrac"], 2 / 3)
    close(m["critic/vpred_mean"], 1.0)


# ----------------------------------------------- third-party code uses the same path
def _negated_reward(*, token_level_rewards, response_mask, options=None, **_):
    adv = -token_level_rewards * response_mask
    return adv, adv


def _constant_loss(*, log_prob, response_mask, **_):
    return (log_prob * 0).sum() + 42.0, {"clipfrac": torch.tensor(0.0)}


def _third_party_registry():
    plugin = types.SimpleNamespace()

    @hookimpl
    def rl_core_register_advantage_estimators(register):
        register(EstimatorCard(name="negated", factory=_negated_reward, needs_groups=True))

    @hookimpl
    def rl_core_register_policy_losses(register):
        register(PolicyLossCard(name="constant", factory=_constant_loss))

    plugin.rl_core_register_advantage_estimators = rl_core_register_advantage_estimators
    plugin.rl_core_register_policy_losses = rl_core_register_policy_losses
    pm = PluginManager()
    pm.load_entrypoints()
    pm.register_module(plugin, Provider(distribution="third-party", entry_point="tp"))
    registry = pm.build_registry()
    assert not registry.errors, registry.errors
    return registry


def test_third_party_estimator_and_loss_go_through_the_same_calls():
    registry = _third_party_registry()
    adv, _ = compute_advantage("negated", card=registry.get("estimator", "negated"), token_level_rewards=t([[1.0, 2.0]]),
                               response_mask=t([[1, 0]]), index=torch.tensor([0]))
    close(adv, [[-1.0, 0.0]])
    with pytest.raises(ValueError, match="index"):  # declared needs are checked for third parties too
        compute_advantage("negated", card=registry.get("estimator", "negated"), token_level_rewards=t([[1.0]]), response_mask=t([[1]]))
    loss, m = compute_actor_loss(**_batch(), cfg=attrs.evolve(ActorConfig(), policy_loss="constant"),
                                 policy_loss=registry.get("policy_loss", "constant").load())
    close(loss, 42.0)
    assert m["actor/pg_clipfrac"] == 0.0
    # built-ins are still there next to the third-party cards
    assert {"grpo", "negated"} <= set(registry.names("estimator"))
