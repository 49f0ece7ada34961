"""rl-lora through the kernel's feature contract (rl_core.plan.features): the plan loads the ``lora`` FeatureCard once
and pickles with it; the hf rollout gets LoRA's in-place merge from the plan's hook (without it, a clear error at its first adapter sync);
``model.lora_rank > 0`` with no package providing LoRA is an `rlcore check` problem naming ``pip install rl-lora``."""

from __future__ import annotations

import pickle

import attrs
import pytest
from rl_core.backends import WorkerContext
from rl_core.cli.main import main
from rl_core.config.load import load_config
from rl_core.plan.checks import plan_for
from rl_core.plan.features import Features, MemoryTerms
from rl_core.plan.memory import ModelShape
from rl_core.plugins import get_registry
from rl_core_testing.tiny_run import write_tiny_run
from rl_lora.memory import adapter_params
from rl_lora.merge import InPlaceLora


def _without_lora():
    """The installed registry without rl-lora's cards (what `pip install rl-core` plus the backends would see)."""
    base = get_registry()
    cards = {kind: {n: c for n, c in table.items() if getattr(c.provider, "distribution", None) != "rl-lora"} for kind, table in base.cards.items()}
    return attrs.evolve(base, cards=cards)


def test_the_plan_carries_the_lora_feature_loaded_once_and_pickles(tmp_path):
    plan, problems = plan_for(load_config(write_tiny_run(tmp_path, **{"model.lora_rank": 4, "model.lora_alpha": 8.0})), devices=False)
    assert plan is not None, [p.render() for p in problems]
    (lora,) = [f for f in plan.features.loaded if f.card.name == "lora"]
    assert lora.card.provider.distribution == "rl-lora" and lora.card.keys == ("model.lora_rank",)
    assert plan.features.hook(plan.config, "rollout_adapters") is InPlaceLora
    off = attrs.evolve(plan.config, model=attrs.evolve(plan.config.model, lora_rank=0))
    assert plan.features.hook(off, "rollout_adapters") is None
    assert "lora" not in [f.card.name for f in plan.features.on(off)]  # other installed features (hf_decode) may be on
    again = pickle.loads(pickle.dumps(plan))  # sent to worker processes as is
    assert again.features.hook(again.config, "rollout_adapters") is InPlaceLora


def test_memory_terms_are_the_adapters_and_a_frozen_base():
    shape = ModelShape(hidden=4, intermediate=8, layers=1, heads=2, kv_heads=1, head_dim=2, vocab=10, tied=False, qkv_bias=False, source="hand")
    features = plan_features()
    config = load_config(None, ["model.path=unused", "model.lora_rank=2", "model.lora_alpha=4"])
    terms = features.actor_terms(config, shape, 1, 2)
    A = 2 * (8 + 6 + 6 + 8 + 12 + 12 + 12)  # r (in + out) of q, k, v, o, gate, up, down (tests/core/test_memory_host.py's shape)
    assert adapter_params(shape, 2) == A == 128
    assert terms == MemoryTerms(states={"actor base parameters (frozen, 16-bit)": 2 * 236, "LoRA adapters (0.0M) + AdamW state": 12 * A},
                                update={"LoRA adapter gradients (update)": 4 * A}, trainable=A)
    assert features.actor_terms(attrs.evolve(config, model=attrs.evolve(config.model, lora_rank=0)), shape, 1, 2) is None
    assert Features().actor_terms(config, shape, 1, 2) is None  # no feature installed: a full fine-tune's terms


def plan_features() -> Features:
    from rl_core.plan.features import load_features

    problems: list = []
    features = load_features(get_registry(), problems)
    assert problems == []
    return features


def test_hf_rollout_without_the_plan_s_features_says_how_to_get_them(tmp_path):
    from rl_core.rollout.hf import HFRolloutEngine

    cfg = load_config(write_tiny_run(tmp_path, **{"model.lora_rank": 4, "model.lora_alpha": 8.0}))
    engine = HFRolloutEngine(cfg, WorkerContext(features=plan_features()))  # as a plan's worker builds it
    assert isinstance(engine.lora, InPlaceLora)
    for context in (WorkerContext(), WorkerContext(features=Features())):  # built for generation alone / rl-lora missing
        alone = HFRolloutEngine(cfg, context)
        assert alone.lora is None
        with pytest.raises(RuntimeError, match=r"no rollout_adapters hook in its WorkerContext.features .*pip install rl-lora"):
            alone.load_adapter({}, {"r": 4}, 1)
    merged = attrs.evolve(cfg, rollout=attrs.evolve(cfg.rollout, lora_sync="merged"))
    assert HFRolloutEngine(merged, WorkerContext(features=plan_features())).lora is None  # merged sync: no adapter state


def test_lora_rank_without_rl_lora_is_a_check_problem_naming_the_package(tmp_path, monkeypatch, capsys):
    config = load_config(write_tiny_run(tmp_path, **{"model.lora_rank": 4, "model.lora_alpha": 8.0}))
    plan, problems = plan_for(config, _without_lora(), devices=False)
    assert plan is None
    (p,) = [p for p in problems if p.key == "model.lora_rank"]
    assert p.severity == "error" and "no installed package provides it" in p.what and "pip install rl-lora" in p.fix
    # a full fine-tune is unaffected
    plan, problems = plan_for(attrs.evolve(config, model=attrs.evolve(config.model, lora_rank=0)), _without_lora(), devices=False)
    assert plan is not None, [p.render() for p in problems]
    # and `rlcore check` says it the same way
    import rl_core.cli.check_cmd as check_cmd

    monkeypatch.setattr(check_cmd, "get_registry", _without_lora)
    code = main(["check", str(write_tiny_run(tmp_path / "cli", **{"model.lora_rank": 4})), "--skip-device-check"])
    out = capsys.readouterr()
    assert code == 1 and "model.lora_rank" in out.out + out.err and "pip install rl-lora" in out.out + out.err


def test_an_hf_judge_of_a_lora_run_gets_no_adapters(tmp_path):
    """A generative judge's engine is built from the run's config with the judge's model: the policy's LoRA keys are
    not the judge's (it would otherwise ask the hf rollout for adapter state it never gets)."""
    judge = pytest.importorskip("rl_reward_model.judge", reason="needs rl-reward-model (pip install -e plugins/reward_model)")
    cfg = load_config(write_tiny_run(tmp_path, **{"model.lora_rank": 4, "model.lora_alpha": 8.0, "model.lora_adapter_path": "/x"}))
    jconfig = judge.judge_run_config(cfg)
    assert (jconfig.model.lora_rank, jconfig.model.lora_adapter_path) == (0, None) and cfg.model.lora_rank == 4


# ------------------------------------------------------------ --resume-anyway that would drop trained adapters
@pytest.mark.parametrize(
    "change,expected",
    [
        ({"target_modules": ["q_proj"]}, "no longer names v_proj"),
        ({"exclude_modules": ["v_proj"]}, "now leaves out v_proj"),
        ({"lora_rank": 0}, "every adapter"),
    ],
)
def test_resume_anyway_that_drops_adapters_needs_a_second_confirmation(tmp_path, change, expected):
    from rl_core.trainer.outputs import OutputDirError, check_previous_run
    from rl_lora.resume import dropped

    old = {"model": {"lora_rank": 8, "target_modules": ["q_proj", "v_proj"], "exclude_modules": []}, "trainer": {}}
    new = {"model": {**old["model"], **change}, "trainer": {}}
    args = dict(has_checkpoint=True, resume=True, saved_config=old, saved_where=str(tmp_path / "global_step_2"), dropped_by=dropped)
    with pytest.raises(OutputDirError, match=f"drop trained LoRA adapters.*{expected}.*--resume-anyway twice"):
        check_previous_run(str(tmp_path), new, resume_anyway=1, **args)
    assert check_previous_run(str(tmp_path), new, resume_anyway=2, **args)  # confirmed twice: the diff, and on it goes
    widened = {"model": {**old["model"], "target_modules": ["q_proj", "v_proj", "o_proj"]}, "trainer": {}}
    assert check_previous_run(str(tmp_path), widened, resume_anyway=1, **args)  # keeps every adapter: once is enough


def test_the_resume_check_gets_loras_hook_even_with_lora_off_now():
    """The checkpoint's config had LoRA on; the new one may not: the hook is the installed card's, on or not."""
    from rl_core.plan.features import load_features
    from rl_lora.resume import dropped

    problems: list = []
    assert load_features(get_registry(), problems).installed_hook("resume_drops") is dropped and not problems
    assert load_features(_without_lora(), problems).installed_hook("resume_drops") is None
