"""algorithm.options / actor.policy_loss_options: keys the chosen function never reads are refused by name."""

from __future__ import annotations

import pytest
from rl_core.algorithms.option_probe import RecordingOptions, option_problems
from rl_core.config.load import load_config
from rl_core.plugins import get_registry


def _problems(*overrides):
    cfg = load_config(None, ["model.path=x", *overrides])
    reg = get_registry()
    est = reg.get("estimator", cfg.algorithm.adv_estimator).load()
    loss = reg.get("policy_loss", cfg.actor.policy_loss).load()
    return option_problems(cfg, est, loss)


def test_recording_options_notes_every_lookup():
    opts = RecordingOptions({"a": 1})
    assert opts.get("a") == 1 and opts["a"] == 1 and "b" not in opts and opts.get("c", 3) == 3
    assert opts.read == {"a", "b", "c"}


def test_read_options_pass():
    assert _problems("algorithm.adv_estimator=grpo", "algorithm.options={norm_adv_by_std: false, zero_singleton_groups: true}") == []
    assert _problems("algorithm.adv_estimator=gae", "algorithm.options.whiten=false") == []
    assert _problems("actor.policy_loss=clip_cov", "actor.policy_loss_options={clip_cov_ratio: 0.001, clip_cov_lb: 1.0}") == []


def test_a_typo_is_named_with_the_closest_read_key():
    (p,) = _problems("algorithm.adv_estimator=grpo", "algorithm.options.norm_adv_by_sd=false")
    assert p.key == "algorithm.options.norm_adv_by_sd" and p.severity == "error"
    assert p.what == "is not read by the estimator 'grpo' (did you mean 'norm_adv_by_std'?)"


def test_an_option_of_another_estimator_is_named():
    (p,) = _problems("algorithm.adv_estimator=gae", "algorithm.options.norm_adv_by_std=false")
    assert p.key == "algorithm.options.norm_adv_by_std" and "the estimator 'gae'" in p.what and "it reads: whiten" in p.fix


def test_policy_loss_options_are_probed_and_values_checked():
    (p,) = _problems("actor.policy_loss=ppo_clip", "actor.policy_loss_options.dro_beta=0.1")
    assert p.key == "actor.policy_loss_options.dro_beta" and "the policy loss 'ppo_clip'" in p.what
    (p,) = _problems("actor.policy_loss=clip_cov", "actor.policy_loss_options.clip_cov_ratio=0")
    assert p.key == "actor.policy_loss_options" and "clip_cov_ratio > 0" in p.what


@pytest.mark.parametrize("value", ["bad"])
def test_a_refused_value_is_reported(value):
    (p,) = _problems("algorithm.adv_estimator=grpo", f"algorithm.options.returns={value}")
    assert p.key == "algorithm.options" and "returns='bad' is not supported" in p.what


def test_rlcore_check_reports_it(capsys):
    from pathlib import Path

    from rl_core.cli.main import main

    data = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "tiny_gsm8k.jsonl"
    code = main(["check", "--quiet", "model.path=Qwen/Qwen2.5-0.5B", f"data.train_files={data}", "trainer.device=cpu", "data.train_batch_size=8",
                 "rollout.n=4", "actor.ppo_mini_batch_size=4", "actor.ppo_micro_batch_size_per_gpu=4", "algorithm.options.norm_adv_by_sd=false"])
    assert code == 1 and "algorithm.options.norm_adv_by_sd: is not read by the estimator 'grpo'" in capsys.readouterr().err
