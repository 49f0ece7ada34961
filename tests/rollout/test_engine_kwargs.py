"""rl_core.rollout.engine_kwargs: rollout.engine_kwargs checked against an engine's arguments."""

from __future__ import annotations

from rl_core.rollout.engine_kwargs import engine_kwargs_problems

ACCEPTED = {"max_model_len", "enforce_eager", "seed"}
FROM_CONFIG = {"seed": "trainer.seed"}


def test_each_bad_key_is_one_problem_naming_the_fix():
    given = {"max_modle_len": 64, "enforce_eager": True, "seed": 3, "bucket_mb": 1, "zzz": 0}
    problems = engine_kwargs_problems(given, ACCEPTED, engine="Eng", own={"bucket_mb"}, from_config=FROM_CONFIG)
    by_key = {p.key: p for p in problems}
    assert list(by_key) == ["rollout.engine_kwargs.max_modle_len", "rollout.engine_kwargs.seed", "rollout.engine_kwargs.zzz"]
    assert by_key["rollout.engine_kwargs.max_modle_len"].what == "is not an argument of the installed Eng (did you mean 'max_model_len'?)"
    assert by_key["rollout.engine_kwargs.zzz"].what == "is not an argument of the installed Eng"
    assert by_key["rollout.engine_kwargs.seed"].fix == "set trainer.seed instead and remove rollout.engine_kwargs.seed"
    assert all(p.severity == "error" for p in problems)


def test_unknown_engine_arguments_refuse_only_what_rl_core_sets():
    problems = engine_kwargs_problems({"anything": 1, "seed": 2}, None, engine="Eng", from_config=FROM_CONFIG)
    assert [p.key for p in problems] == ["rollout.engine_kwargs.seed"]
    assert engine_kwargs_problems({}, ACCEPTED, engine="Eng") == []


def test_hf_rollout_refuses_a_typo_in_rlcore_check(capsys):
    from pathlib import Path

    from rl_core.cli.main import main

    data = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "tiny_gsm8k.jsonl"
    base = ["model.path=Qwen/Qwen2.5-0.5B", f"data.train_files={data}", "trainer.device=cpu", "data.train_batch_size=8", "rollout.n=4",
            "actor.ppo_mini_batch_size=4", "actor.ppo_micro_batch_size_per_gpu=4"]
    assert main(["check", "--quiet", *base, "rollout.engine_kwargs.static_decod=true"]) == 1
    err = capsys.readouterr().err
    assert "rollout.engine_kwargs.static_decod: is not an argument of the installed hf rollout (did you mean 'static_decode'?)" in err
    assert main(["check", "--quiet", *base, "rollout.engine_kwargs.static_decode=false", "rollout.engine_kwargs.attn_implementation=sdpa"]) == 0


def test_bucket_size_must_be_a_positive_number():
    from rl_core.rollout.engine_kwargs import bucket_size_problems

    assert bucket_size_problems({}) == [] and bucket_size_problems({"weight_sync_bucket_mb": 0.5}) == []
    for bad in (0, -1, True, "64"):
        (p,) = bucket_size_problems({"weight_sync_bucket_mb": bad})
        assert p.key == "rollout.engine_kwargs.weight_sync_bucket_mb" and f"got {bad!r}" in p.what


def test_hf_rollout_takes_the_engine_kwargs_an_installed_feature_card_lists():
    """Core's hf rollout reads its own keys; a feature card's ``rollout.engine_kwargs.*`` keys are taken too (their
    values are the package's to check). Without rl-hf-decode's card an unknown key's fix names that install."""
    import attrs
    from rl_core.cards import FeatureCard
    from rl_core.config.schema import RolloutConfig, RunConfig
    from rl_core.plugins import get_registry
    from rl_core.rollout.builtin import check_hf_engine_kwargs

    def registry(*cards):
        return attrs.evolve(get_registry(), cards={**get_registry().cards, "feature": {c.name: c for c in cards}})

    card = FeatureCard(name="windowed", factory=lambda config: True, keys=("rollout.engine_kwargs.window", "model.window"))
    config = RunConfig(rollout=RolloutConfig(engine_kwargs={"window": 4, "share_prefill": False}))
    assert check_hf_engine_kwargs(config, registry(card)) == []
    (typo,) = check_hf_engine_kwargs(config, registry())
    assert typo.key == "rollout.engine_kwargs.window" and typo.fix == (
        "fix or remove rollout.engine_kwargs.window; if it is a key of the hf rollout's GPU decoder: pip install rl-hf-decode "
        "(plugins/hf_decode in this repository)")
    (typo,) = check_hf_engine_kwargs(config, registry(attrs.evolve(card, name="hf_decode", keys=())))  # the decoder is there
    assert typo.fix == "fix or remove rollout.engine_kwargs.window"
    assert check_hf_engine_kwargs(attrs.evolve(config, rollout=attrs.evolve(config.rollout, name="vllm")), registry()) == []
