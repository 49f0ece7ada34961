"""Typed card options (rl_core.card_options): algorithm.options / actor.policy_loss_options are checked against the
options class the chosen card declares, once, when the config is resolved."""

from __future__ import annotations

import attrs
import pytest
import torch
from rl_core.card_options import Options, options_problems
from rl_core.cards import EstimatorCard, PolicyLossCard, Provider
from rl_core.config.load import load_config
from rl_core.plan.resolver import _check_options
from rl_core.plugins import get_registry


def _problems(*overrides):
    cfg = load_config(None, ["model.path=x", *overrides])
    reg = get_registry()
    problems = []
    _check_options(cfg, reg.get("estimator", cfg.algorithm.adv_estimator), reg.get("policy_loss", cfg.actor.policy_loss), problems)
    return problems


def test_declared_options_pass():
    assert _problems("algorithm.adv_estimator=grpo", "algorithm.options={norm_adv_by_std: false, zero_singleton_groups: true, epsilon: 1}") == []
    assert _problems("algorithm.adv_estimator=gae", "algorithm.options.whiten=false") == []


def test_a_typo_is_named_with_the_closest_option_and_the_card():
    (p,) = _problems("algorithm.adv_estimator=grpo", "algorithm.options.norm_adv_by_sd=false")
    assert p.key == "algorithm.options.norm_adv_by_sd" and p.severity == "error"
    assert p.what == "is not an option of the estimator 'grpo' (from rl-core) (did you mean 'norm_adv_by_std'?)"


def test_an_option_of_another_estimator_lists_the_cards_options():
    (p,) = _problems("algorithm.adv_estimator=gae", "algorithm.options.norm_adv_by_std=false")
    assert p.key == "algorithm.options.norm_adv_by_std" and "the estimator 'gae'" in p.what and "its options: whiten: bool = True" in p.fix


def test_wrong_types_and_values_are_named():
    (p,) = _problems("algorithm.adv_estimator=grpo", "algorithm.options.norm_adv_by_std=maybe")
    assert p.key == "algorithm.options.norm_adv_by_std" and "expects bool, got 'maybe' (str)" in p.what
    (p,) = _problems("algorithm.adv_estimator=grpo", "algorithm.options.returns=bad")
    assert p.key == "algorithm.options.returns" and "'advantages' | 'reward_to_go'" in p.what
    (p,) = _problems("actor.policy_loss=ppo_clip", "actor.policy_loss_options.dro_beta=0.1")
    assert p.key == "actor.policy_loss_options.dro_beta" and "the policy loss 'ppo_clip'" in p.what


def test_a_card_without_options_gets_a_warning_and_a_bad_declaration_an_error():
    card = EstimatorCard(name="theirs", factory="x:y", provider=Provider(distribution="their-dist"))
    assert options_problems(card, {}, "algorithm.options") == []
    (p,) = options_problems(card, {"k": 1}, "algorithm.options")
    assert p.severity == "warning" and "declares no options class" in p.what
    bad = PolicyLossCard(name="theirs", factory="x:y", options="rl_core.card_options:no_such_class", provider=Provider(distribution="their-dist"))
    (p,) = options_problems(bad, {}, "actor.policy_loss_options")
    assert p.severity == "error" and "do not load" in p.what and "their-dist" in p.fix


def _estimator_inputs():
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 0], [1, 0, 0, 0]], dtype=torch.float32)
    rewards = torch.zeros_like(mask)
    rewards[torch.arange(6), mask.sum(-1).long() - 1] = torch.tensor([1.0, 0.0, 0.5, 1.0, 0.0, 1.0])
    return dict(token_level_rewards=rewards, response_mask=mask, index=torch.tensor([0, 0, 0, 1, 1, 2]), values=torch.rand(mask.shape),
                gamma=1.0, lam=1.0, baseline_rewards=torch.tensor([0.5, 0.5, 0.5, 0.0, 0.0, 1.0]))


def _loss_inputs():
    g = torch.Generator().manual_seed(0)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]], dtype=torch.float32)
    old = -torch.rand(mask.shape, generator=g) * 2
    return dict(old_log_prob=old, log_prob=old + 0.3 * torch.randn(mask.shape, generator=g),
                advantages=torch.tensor([[1.0], [-1.0], [0.5], [-0.5]]).expand_as(mask).clone(), response_mask=mask)


@pytest.mark.parametrize("kind", ["estimator", "policy_loss"])
def test_every_builtin_card_declares_options_whose_defaults_are_the_functions(kind, distribution="rl-core"):
    """Each built-in declares its options, and giving every option its declared default changes nothing."""
    for name, card in get_registry().cards[kind].items():
        if card.provider is None or card.provider.distribution != distribution:
            continue
        from rl_core.card_options import options_class

        cls = options_class(card)
        assert cls is not None and issubclass(cls, Options), f"{kind} {name} declares no options"
        required = {f.name: 0.1 for f in attrs.fields(cls) if f.default is attrs.NOTHING}
        defaults = {**{f.name: f.default for f in attrs.fields(cls) if f.default is not attrs.NOTHING}, **required}
        inputs = _estimator_inputs() if kind == "estimator" else _loss_inputs()
        if name == "grpo_passk":  # groups of two at least
            inputs["index"] = torch.tensor([0, 0, 0, 1, 1, 1])
        fn = card.load()
        a, b = fn(**inputs, options=required), fn(**inputs, options=defaults)
        for x, y in zip(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,)):
            if isinstance(x, dict):
                assert x.keys() == y.keys()
                x, y = list(x.values()), list(y.values())
                for u, v in zip(x, y):
                    torch.testing.assert_close(torch.as_tensor(u), torch.as_tensor(v), msg=lambda m: f"{kind} {name}: {m}")
            else:
                torch.testing.assert_close(x, y, msg=lambda m: f"{kind} {name}: {m}")


def test_rlcore_check_reports_it(capsys):
    from pathlib import Path

    from rl_core.cli.main import main

    data = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "tiny_gsm8k.jsonl"
    code = main(["check", "--quiet", "model.path=Qwen/Qwen2.5-0.5B", f"data.train_files={data}", "trainer.device=cpu", "data.train_batch_size=8",
                 "rollout.n=4", "actor.ppo_mini_batch_size=4", "actor.ppo_micro_batch_size_per_gpu=4", "algorithm.options.norm_adv_by_sd=false"])
    assert code == 1 and "algorithm.options.norm_adv_by_sd: is not an option of the estimator 'grpo'" in capsys.readouterr().err
