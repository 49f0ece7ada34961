"""rl-core against numbers verl 0.9.1 itself computed (tests/fixtures/verl/verl_0.9.1.pt,
made by bench/verl_parity/make_fixture.py in a side venv): values and gradients agree within
1e-5 in fp32 when configured with verl's names and default values."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from rl_core.algorithms.actor_loss import compute_actor_loss, compute_critic_loss, get_policy_loss
from rl_core.algorithms.advantages import compute_advantage
from rl_core.algorithms.aggregation import agg_loss
from rl_core.algorithms.entropy import entropy_from_logits, logprobs_from_logits
from rl_core.algorithms.kl import kl_penalty
from rl_core.config.schema import ActorConfig, AlgorithmConfig, CriticConfig

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "verl" / "verl_0.9.1.pt"
ATOL = 1e-5


@pytest.fixture(scope="module")
def fx():
    return torch.load(FIXTURE, weights_only=False)


def close(actual, expected, where=None, what=""):
    actual, expected = actual.detach().float(), expected.float()
    if where is not None:
        actual, expected = actual[where], expected[where]
    torch.testing.assert_close(actual, expected, atol=ATOL, rtol=0, msg=lambda m: f"{what}: {m}")


def _cases(fx, section):
    return sorted(k for k in fx[section] if not k.startswith("_"))


def test_fixture_was_made_by_verl_0_9_1(fx):
    assert fx["meta"]["verl"] == "0.9.1"
    assert FIXTURE.stat().st_size < 1_000_000


# ------------------------------------------------------------------ estimators
def _estimator_call(fx, key, registry=None):
    x = fx["inputs"]
    case = fx["advantages"][key]
    name, _, variant = key.partition("/")
    rewards = x["token_level_rewards_dense"] if "dense" in variant else x["token_level_rewards"]
    algo = AlgorithmConfig(
        adv_estimator=name,
        gamma=case.get("gamma", 1.0),
        lam=case.get("lam", 1.0),
        norm_adv_by_std_in_grpo=case.get("norm_adv_by_std_in_grpo", True),
    )
    adv, ret = compute_advantage(
        name,
        card=None if registry is None else registry.get("estimator", name),  # a plugin's estimator: its card
        token_level_rewards=rewards,
        response_mask=x["response_mask"],
        index=case.get("index", x["index"]),
        values=x["values"],
        gamma=algo.gamma,
        lam=algo.lam,
        baseline_rewards=x["reward_baselines"],
        options={"norm_adv_by_std": algo.norm_adv_by_std_in_grpo, **algo.options},
    )
    return case, adv, ret


def test_every_estimator_is_covered(fx):
    names = {k.split("/")[0] for k in fx["advantages"]}
    assert names == {"gae", "grpo", "grpo_vectorized", "grpo_passk", "rloo", "rloo_vectorized", "opo",
                     "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax", "gpg"}


# rl-core's estimators; the others' (rloo, opo, remax, ...): plugins/algorithms/tests/test_algorithms_verl_parity.py
@pytest.mark.parametrize("key", ["gae/g1.0_l1.0", "gae/g0.99_l0.95", "gae/dense/g0.99_l0.95", "grpo/normTrue", "grpo/normFalse", "grpo/dense/normTrue"])
def test_estimators_match_verl(fx, key, registry=None):
    case, adv, ret = _estimator_call(fx, key, registry)
    mask = fx["inputs"]["response_mask"].bool()
    close(adv, case["advantages"], mask, f"{key} advantages")
    close(ret, case["returns"], mask, f"{key} returns")
    assert (adv[~mask] == 0).all() and (ret[~mask] == 0).all()


def test_group_of_one_gets_its_raw_score_and_equal_groups_get_zero(fx):
    x = fx["inputs"]
    _, adv, _ = _estimator_call(fx, "grpo/normTrue")
    # row 7 is alone in its group: verl divides its score by (1 + eps); rows 8, 9 score 0.6 each
    assert adv[7, 0].item() == pytest.approx(0.75 / (1 + 1e-6), abs=1e-6)
    assert (adv[8:10] == 0).all()
    zero, _ = compute_advantage("grpo", token_level_rewards=x["token_level_rewards"], response_mask=x["response_mask"],
                                index=x["index"], options={"zero_singleton_groups": True})
    assert (zero[7] == 0).all()


# -------------------------------------------------------------- policy losses
def _actor_cfg(case) -> ActorConfig:
    c = dict(case["config"])
    pl_opts = {k: c.pop(k) for k in list(c) if k in ("dro_beta", "kl_cov_ratio", "clip_cov_ratio", "clip_cov_lb", "clip_cov_ub")}
    return ActorConfig(policy_loss=case["loss_mode"], loss_agg_mode=case["loss_agg_mode"], policy_loss_options=pl_opts, **c)


def test_verl_default_policy_loss_is_vanilla_with_dual_clip():
    assert ActorConfig().policy_loss == "vanilla"
    assert get_policy_loss("vanilla").__name__ == "dual_clip"


def policy_loss_cases(core: bool) -> list[str]:
    """The fixture's policy-loss cases of rl-core's losses (vanilla), or of the others (rl-algorithms')."""
    cases = torch.load(FIXTURE, weights_only=False)["policy_loss"]
    return sorted(k for k in cases if not k.startswith("_") and (cases[k]["loss_mode"] == "vanilla") == core)


@pytest.mark.parametrize("key", policy_loss_cases(core=True))
def test_policy_losses_match_verl(fx, key, registry=None):
    x = fx["inputs"]
    case = fx["policy_loss"][key]
    cfg = _actor_cfg(case)
    lp = x["log_prob"].clone().requires_grad_(True)
    torch.manual_seed(fx["meta"]["clip_cov_seed"])
    loss, metrics = compute_actor_loss(
        log_prob=lp, old_log_prob=x["old_log_prob"], advantages=x["advantages"], response_mask=x["agg_mask"],
        rollout_is_weights=fx["policy_loss"]["_rollout_is_weights"] if case["is_weights"] else None, cfg=cfg,
        policy_loss=None if registry is None else registry.get("policy_loss", cfg.policy_loss).load(),  # a plugin's loss: loaded from its card
    )
    loss.backward()
    close(loss, case["loss"], what=f"{key} loss")
    close(lp.grad, case["grad"], what=f"{key} grad")
    for name, value in case["metrics"].items():
        if name in metrics:
            assert float(metrics[name]) == pytest.approx(value, abs=ATOL), f"{key} {name}"
        else:  # verl reports a constant 0 placeholder for metrics a loss does not have
            assert value == 0.0, f"{key}: verl reports {name}={value}, rl-core does not compute it"


# ---------------------------------------------------- aggregation, KL, value, entropy
def test_aggregation_matches_verl(fx):
    x = fx["inputs"]
    for key, case in fx["aggregation"].items():
        lm = x["loss_mat"].clone().requires_grad_(True)
        loss = agg_loss(lm, x["agg_mask"], case["loss_agg_mode"], norm_length=case["loss_scale_factor"])
        loss.backward()
        close(loss, case["loss"], what=key)
        close(lm.grad, case["grad"], what=f"{key} grad")


def test_kl_kinds_match_verl(fx):
    x = fx["inputs"]
    mask = x["response_mask"]
    for kind in ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "k1+", "abs+", "k2+", "mse+", "low_var_kl+", "k3+"):
        case = fx["kl"][kind]
        lp = x["log_prob"].clone().requires_grad_(True)
        kld = kl_penalty(lp, x["ref_log_prob"], kind)
        (kld * mask).sum().backward()
        close(kld, case["value"], what=kind)
        close(lp.grad, case["grad"], what=f"{kind} grad")


@pytest.mark.parametrize("kind", ["k1", "low_var_kl", "k3+", "abs+"])
def test_kl_loss_term_matches_verl(fx, kind):
    """The actor's KL term (use_kl_loss) with every aggregation mode, through compute_actor_loss."""
    x = fx["inputs"]
    for mode in ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
        case = fx["kl"][f"{kind}/{mode}"]
        lp = x["log_prob"].clone().requires_grad_(True)
        cfg = ActorConfig(use_kl_loss=True, kl_loss_type=kind, kl_loss_coef=1.0, loss_agg_mode=mode)
        _, metrics = compute_actor_loss(log_prob=lp, old_log_prob=x["old_log_prob"], advantages=x["advantages"],
                                        response_mask=x["agg_mask"], ref_log_prob=x["ref_log_prob"], cfg=cfg)
        close(metrics["actor/kl_loss"], case["loss"], what=f"{kind}/{mode}")
        lp2 = x["log_prob"].clone().requires_grad_(True)
        agg_loss(kl_penalty(lp2, x["ref_log_prob"], kind), x["agg_mask"], mode).backward()
        close(lp2.grad, case["grad"], what=f"{kind}/{mode} grad")


def test_value_loss_matches_verl(fx):
    x = fx["inputs"]
    for key, case in fx["value_loss"].items():
        vp = x["vpreds"].clone().requires_grad_(True)
        cfg = CriticConfig(cliprange_value=case["cliprange_value"], loss_agg_mode=case["loss_agg_mode"])
        loss, metrics = compute_critic_loss(vpreds=vp, values=x["values"], returns=x["returns"], response_mask=x["agg_mask"], cfg=cfg)
        loss.backward()
        close(loss, case["loss"], what=key)
        close(vp.grad, case["grad"], what=f"{key} grad")
        assert float(metrics["critic/vf_clipfrac"]) == pytest.approx(case["vf_clipfrac"], abs=ATOL)


def test_entropy_and_log_probs_match_verl(fx):
    x = fx["inputs"]
    mask = x["response_mask"]
    z = x["logits"].clone().requires_grad_(True)
    ent = entropy_from_logits(z)
    (ent * mask).sum().backward()
    close(ent, fx["entropy"]["entropy"]["value"], what="entropy")
    close(z.grad, fx["entropy"]["entropy"]["grad"], what="entropy grad")
    z = x["logits"].clone().requires_grad_(True)
    lp = logprobs_from_logits(z, x["labels"])
    (lp * mask).sum().backward()
    close(lp, fx["entropy"]["logprobs"]["value"], what="log-probs")
    close(z.grad, fx["entropy"]["logprobs"]["grad"], what="log-probs grad")
    for mode in ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
        case = fx["entropy"][f"entropy_loss/{mode}"]
        z = x["logits"].clone().requires_grad_(True)
        loss = agg_loss(entropy_from_logits(z), x["agg_mask"], mode)
        loss.backward()
        close(loss, case["loss"], what=f"entropy loss {mode}")
        close(z.grad, case["grad"], what=f"entropy loss {mode} grad")
