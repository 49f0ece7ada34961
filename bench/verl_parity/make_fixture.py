"""Produce tests/fixtures/verl/verl_0.9.1.pt: verl 0.9.1's own numbers on fixed inputs.

Run it in a side venv that holds verl 0.9.1 (never in rl-core's dev venv; verl is not a
dependency and none of its code is committed here, only the numbers it computes)::

    python3 -m venv /work/verl-venv
    /work/verl-venv/bin/pip install torch==2.13.0
    /work/verl-venv/bin/pip install --no-deps verl==0.9.1
    /work/verl-venv/bin/pip install numpy tensordict omegaconf packaging ray codetiming orjson transformers
    /work/verl-venv/bin/python bench/verl_parity/make_fixture.py

The fixture holds the inputs (built here from a seeded generator) and verl's outputs:
advantage estimators, policy losses x aggregation modes (value and gradient w.r.t.
``log_prob``), aggregation, KL estimators (value and gradient), value loss, entropy and
log-probs from logits, and rollout correction (importance weights, rejection masks,
metrics). ``tests/algorithms/test_verl_parity.py`` recomputes every entry with rl-core.
"""

from __future__ import annotations

import os
import sys
import types

import numpy as np
import torch
import verl
import verl.utils.torch_functional as verl_F
from verl.trainer.ppo import core_algos as ca
from verl.trainer.ppo import rollout_corr_helper as rc
from verl.workers.config import ActorConfig
from verl.workers.config.actor import PolicyLossConfig

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "verl", "verl_0.9.1.pt")
MODES = ["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
KL_KINDS = ["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "k1+", "abs+", "k2+", "mse+", "low_var_kl+", "k3+"]
POLICY_LOSSES = ["vanilla", "gspo", "sapo", "gpg", "clip_cov", "kl_cov", "geo_mean", "dro", "cispo", "dppo_tv", "dppo_kl"]
CLIP_COV_SEED = 7


def t(x):
    return x.detach().clone().float()


def inputs() -> dict:
    g = torch.Generator().manual_seed(20261123)
    B, T = 12, 7
    lengths = [7, 5, 3, 6, 7, 2, 4, 7, 1, 5, 6, 3]
    mask = torch.zeros(B, T)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1.0
    mask[3, 2] = 0.0  # a gap inside a response (e.g. tool output in a multi-turn rollout)
    mask[7, 4] = 0.0
    # groups: 0 -> 4 samples, 1 -> 3, 2 -> 1 (a group of one), 3 -> 2 equal scores, 4 -> 2
    index = [0, 0, 0, 0, 1, 1, 1, 2, 3, 3, 4, 4]
    outcome = torch.tensor([1.0, 0.0, 1.0, 0.5, 0.0, 1.0, 0.25, 0.75, 0.6, 0.6, 1.0, -0.5])
    rewards = torch.zeros(B, T)
    last = [max(j for j in range(T) if mask[i, j] > 0) for i in range(B)]
    for i in range(B):
        rewards[i, last[i]] = outcome[i]
    # per-token rewards too (KL-in-reward style), only on valid tokens
    token_rewards = rewards + 0.05 * torch.randn(B, T, generator=g) * mask
    values = torch.randn(B, T, generator=g) * 0.5
    baseline = torch.tensor([0.5, 0.5, 0.5, 0.5, 1.0, 1.0, 1.0, 0.0, 0.6, 0.6, 0.25, 0.25])
    old_log_prob = -torch.rand(B, T, generator=g) * 3.0 - 0.05
    log_prob = old_log_prob + torch.randn(B, T, generator=g) * 0.3
    log_prob[0, 1] = old_log_prob[0, 1] + 1.6  # ratio ~5: clipped, dual clip with A < 0
    log_prob[4, 0] = old_log_prob[4, 0] + 2.0
    log_prob[2, 0] = old_log_prob[2, 0] - 1.2
    log_prob = log_prob.clamp(max=-1e-3)
    advantages = torch.randn(B, T, generator=g)
    advantages[0, 1] = -1.5
    advantages[4, 0] = -0.7
    ref_log_prob = log_prob + torch.randn(B, T, generator=g) * 0.5
    ref_log_prob[1, 1] = log_prob[1, 1] + 25.0  # past the clamps
    ref_log_prob[1, 2] = log_prob[1, 2] - 25.0
    rollout_log_prob = old_log_prob + torch.randn(B, T, generator=g) * 0.15
    rollout_log_prob[5, 0] = old_log_prob[5, 0] - 1.5  # a token where the trainer is much more likely
    rollout_log_prob[6, 1] = old_log_prob[6, 1] + 1.0
    vpreds = values + torch.randn(B, T, generator=g) * 0.6
    returns = values + torch.randn(B, T, generator=g)
    logits = torch.randn(B, T, 11, generator=g) * 3.0
    labels = torch.randint(0, 11, (B, T), generator=g)
    loss_mat = torch.randn(B, T, generator=g)
    agg_mask = mask.clone()
    agg_mask[8] = 0.0  # an all-masked row (e.g. padding added to divide the batch)
    return dict(
        response_mask=mask, agg_mask=agg_mask, index=torch.tensor(index), token_level_rewards=rewards,
        token_level_rewards_dense=token_rewards, values=values, reward_baselines=baseline,
        old_log_prob=old_log_prob, log_prob=log_prob, advantages=advantages, ref_log_prob=ref_log_prob,
        rollout_log_prob=rollout_log_prob, vpreds=vpreds, returns=returns, logits=logits, labels=labels,
        loss_mat=loss_mat,
    )


def advantages(x: dict) -> dict:
    out = {}
    m = x["response_mask"]
    idx = x["index"].numpy()
    passk_idx = np.array([0, 0, 0, 0, 1, 1, 1, 3, 3, 3, 4, 4])
    for rname in ("token_level_rewards", "token_level_rewards_dense"):
        r = x[rname]
        tag = "" if rname == "token_level_rewards" else "/dense"
        for gamma, lam in ((1.0, 1.0), (0.99, 0.95)):
            a, ret = ca.compute_gae_advantage_return(r.clone(), x["values"].clone(), m, gamma, lam)
            out[f"gae{tag}/g{gamma}_l{lam}"] = dict(gamma=gamma, lam=lam, advantages=t(a), returns=t(ret))
        for norm in (True, False):
            for name, fn in (("grpo", ca.compute_grpo_outcome_advantage), ("grpo_vectorized", ca.compute_grpo_vectorized_outcome_advantage)):
                a, ret = fn(r.clone(), m, idx, norm_adv_by_std_in_grpo=norm)
                out[f"{name}{tag}/norm{norm}"] = dict(norm_adv_by_std_in_grpo=norm, advantages=t(a), returns=t(ret))
            a, ret = ca.compute_grpo_passk_outcome_advantage(r.clone(), m, passk_idx, config={"norm_adv_by_std_in_grpo": norm})
            out[f"grpo_passk{tag}/norm{norm}"] = dict(norm_adv_by_std_in_grpo=norm, index=torch.tensor(passk_idx), advantages=t(a), returns=t(ret))
        for name, fn in (
            ("rloo", ca.compute_rloo_outcome_advantage),
            ("rloo_vectorized", ca.compute_rloo_vectorized_outcome_advantage),
            ("opo", ca.compute_opo_outcome_advantage),
            ("reinforce_plus_plus_baseline", ca.compute_reinforce_plus_plus_baseline_outcome_advantage),
            ("gpg", ca.compute_gpg_outcome_advantage),
        ):
            a, ret = fn(r.clone(), m, idx)
            out[f"{name}{tag}"] = dict(advantages=t(a), returns=t(ret))
        for gamma in (1.0, 0.9):
            a, ret = ca.compute_reinforce_plus_plus_outcome_advantage(r.clone(), m, config=types.SimpleNamespace(gamma=gamma))
            out[f"reinforce_plus_plus{tag}/g{gamma}"] = dict(gamma=gamma, advantages=t(a), returns=t(ret))
        a, ret = ca.compute_remax_outcome_advantage(r.clone(), x["reward_baselines"], m)
        out[f"remax{tag}"] = dict(advantages=t(a), returns=t(ret))
    return out


def actor_config(**kw) -> ActorConfig:
    pl = {k: kw.pop(k) for k in list(kw) if k in ("clip_cov_ratio", "kl_cov_ratio", "ppo_kl_coef", "dro_beta", "clip_cov_lb", "clip_cov_ub")}
    return ActorConfig(strategy="fsdp", ppo_micro_batch_size_per_gpu=1, rollout_n=4, policy_loss=PolicyLossConfig(**pl), **kw)


def policy_losses(x: dict) -> dict:
    out = {}
    variants = {
        "default": {},
        "dapo_c10": dict(clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=10.0),
    }
    extra = {"dro": dict(dro_beta=0.1), "kl_cov": dict(kl_cov_ratio=0.1), "clip_cov": dict(clip_cov_ratio=0.1, clip_cov_lb=0.05)}
    weights = torch.exp(x["old_log_prob"] - x["rollout_log_prob"]).clamp(max=2.0) * x["agg_mask"]
    for name in POLICY_LOSSES:
        for vname, vkw in variants.items():
            for mode in MODES:
                for with_w in (False, True):
                    if with_w and (vname != "default" or mode != "token-mean"):
                        continue
                    cfg = actor_config(**vkw, **extra.get(name, {}))
                    lp = x["log_prob"].clone().requires_grad_(True)
                    torch.manual_seed(CLIP_COV_SEED)
                    loss, metrics = ca.get_policy_loss_fn(name)(
                        old_log_prob=x["old_log_prob"], log_prob=lp, advantages=x["advantages"], response_mask=x["agg_mask"],
                        loss_agg_mode=mode, config=cfg, rollout_is_weights=weights if with_w else None,
                    )
                    loss.backward()
                    key = f"{name}/{vname}/{mode}" + ("/is_weights" if with_w else "")
                    out[key] = dict(
                        loss_mode=name, loss_agg_mode=mode, config=dict(**vkw, **extra.get(name, {})), is_weights=with_w,
                        loss=t(loss), grad=t(lp.grad), metrics={k: float(v) for k, v in metrics.items()},
                    )
    out["_rollout_is_weights"] = t(weights)
    return out


def aggregation(x: dict) -> dict:
    out = {}
    for mode in MODES:
        for scale in (None, 16):
            if scale is not None and mode != "seq-mean-token-sum-norm":
                continue
            lm = x["loss_mat"].clone().requires_grad_(True)
            loss = ca.agg_loss(lm, x["agg_mask"], mode, loss_scale_factor=scale)
            loss.backward()
            out[f"{mode}/scale{scale}"] = dict(loss_agg_mode=mode, loss_scale_factor=scale, loss=t(loss), grad=t(lm.grad))
    return out


def kl(x: dict) -> dict:
    out = {}
    for kind in KL_KINDS:
        lp = x["log_prob"].clone().requires_grad_(True)
        kld = ca.kl_penalty(lp, x["ref_log_prob"], kind)
        (kld * x["response_mask"]).sum().backward()
        out[kind] = dict(value=t(kld), grad=t(lp.grad))
        for mode in MODES:  # the actor's KL-loss term: agg(kl) with the actor's loss_agg_mode
            lp = x["log_prob"].clone().requires_grad_(True)
            term = ca.agg_loss(ca.kl_penalty(lp, x["ref_log_prob"], kind), x["agg_mask"], mode)
            term.backward()
            out[f"{kind}/{mode}"] = dict(loss=t(term), grad=t(lp.grad))
    return out


def value_loss(x: dict) -> dict:
    out = {}
    for mode in MODES:
        for clip in (0.5, 0.2):
            vp = x["vpreds"].clone().requires_grad_(True)
            loss, clipfrac = ca.compute_value_loss(vp, x["returns"], x["values"], x["agg_mask"], clip, mode)
            loss.backward()
            out[f"{mode}/clip{clip}"] = dict(loss_agg_mode=mode, cliprange_value=clip, loss=t(loss), grad=t(vp.grad), vf_clipfrac=float(clipfrac))
    return out


def entropy(x: dict) -> dict:
    out = {}
    z = x["logits"].clone().requires_grad_(True)
    ent = verl_F.entropy_from_logits(z)
    (ent * x["response_mask"]).sum().backward()
    out["entropy"] = dict(value=t(ent), grad=t(z.grad))
    z = x["logits"].clone().requires_grad_(True)
    lp = verl_F.logprobs_from_logits(z, x["labels"])
    (lp * x["response_mask"]).sum().backward()
    out["logprobs"] = dict(value=t(lp), grad=t(z.grad))
    for mode in MODES:
        z = x["logits"].clone().requires_grad_(True)
        loss = ca.compute_entropy_loss(z, x["agg_mask"], mode)
        loss.backward()
        out[f"entropy_loss/{mode}"] = dict(loss=t(loss), grad=t(z.grad))
    return out


def rollout_correction(x: dict) -> dict:
    out = {}
    cases = {
        "token_tis": dict(rollout_is="token", rollout_is_threshold=2.0),
        "sequence_tis": dict(rollout_is="sequence", rollout_is_threshold=2.0),
        "token_tis_str": dict(rollout_is="token", rollout_is_threshold="1.5"),
        "token_icepop": dict(rollout_is="token", rollout_is_threshold="0.5_1.5"),
        "sequence_icepop": dict(rollout_is="sequence", rollout_is_threshold="0.5_5.0"),
        "token_tis_norm": dict(rollout_is="token", rollout_is_threshold=2.0, rollout_is_batch_normalize=True),
        "sequence_tis_norm": dict(rollout_is="sequence", rollout_is_threshold=2.0, rollout_is_batch_normalize=True),
        "rs_token_k1": dict(rollout_is=None, rollout_rs="token_k1", rollout_rs_threshold="0.5_2.0"),
        "rs_token_k2": dict(rollout_is=None, rollout_rs="token_k2", rollout_rs_threshold=0.1),
        "rs_token_k3": dict(rollout_is=None, rollout_rs="token_k3", rollout_rs_threshold=0.05),
        "rs_seq_sum_k1": dict(rollout_is=None, rollout_rs="seq_sum_k1", rollout_rs_threshold=2.0),
        "rs_seq_sum_k3": dict(rollout_is=None, rollout_rs="seq_sum_k3", rollout_rs_threshold=0.1),
        "rs_seq_mean_k1": dict(rollout_is=None, rollout_rs="seq_mean_k1", rollout_rs_threshold="0.8_1.25"),
        "rs_seq_mean_k2": dict(rollout_is=None, rollout_rs="seq_mean_k2", rollout_rs_threshold=0.02),
        "rs_seq_max_k2": dict(rollout_is=None, rollout_rs="seq_max_k2", rollout_rs_threshold=0.05),
        "rs_seq_max_k3": dict(rollout_is=None, rollout_rs="seq_max_k3", rollout_rs_threshold=0.05),
        "token_tis_rs_two": dict(rollout_is="token", rollout_is_threshold=2.0, rollout_rs="token_k2,seq_mean_k1", rollout_rs_threshold="0.1,0.8_1.25"),
    }
    for name, kw in cases.items():
        w, new_mask, metrics = rc.compute_rollout_correction_and_rejection_mask(
            old_log_prob=x["old_log_prob"], rollout_log_prob=x["rollout_log_prob"], response_mask=x["response_mask"], **kw
        )
        out[name] = dict(
            config={k: v for k, v in kw.items()},
            rollout_is_weights=None if w is None else t(w.batch["rollout_is_weights"]),
            response_mask=t(new_mask), metrics={k: float(v) for k, v in metrics.items()},
        )
    # identical log-probs: every weight is exactly 1
    w, _, metrics = rc.compute_rollout_correction_and_rejection_mask(
        old_log_prob=x["old_log_prob"], rollout_log_prob=x["old_log_prob"].clone(), response_mask=x["response_mask"],
        rollout_is="token", rollout_is_threshold=2.0,
    )
    out["equal_logprobs"] = dict(config=dict(rollout_is="token", rollout_is_threshold=2.0), rollout_is_weights=t(w.batch["rollout_is_weights"]), metrics={k: float(v) for k, v in metrics.items()})
    return out


def main() -> None:
    torch.set_default_dtype(torch.float32)
    x = inputs()
    fixture = {
        "meta": {"verl": verl.__version__, "torch": torch.__version__, "python": sys.version.split()[0], "script": "bench/verl_parity/make_fixture.py", "clip_cov_seed": CLIP_COV_SEED},
        "inputs": {k: t(v) if v.is_floating_point() else v.clone() for k, v in x.items()},
        "advantages": advantages(x),
        "policy_loss": policy_losses(x),
        "aggregation": aggregation(x),
        "kl": kl(x),
        "value_loss": value_loss(x),
        "entropy": entropy(x),
        "rollout_correction": rollout_correction(x),
    }
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    torch.save(fixture, OUT)
    print(f"wrote {os.path.normpath(OUT)} ({os.path.getsize(OUT) / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
