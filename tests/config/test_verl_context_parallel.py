"""verl's Megatron context parallelism keys (issue #37) map onto train.context_parallel_size (the megatron backend's CP,
rl_train_megatron.context_parallel); the reference model and the critic follow the actor's layout."""

from __future__ import annotations

from rl_core.config.load import load_config, load_report

V = "actor_rollout_ref"
MEG = ["model_engine=megatron"]


def test_actor_and_ref_context_parallel_size_map():
    cfg = load_config(None, [*MEG, f"{V}.actor.megatron.context_parallel_size=2", f"{V}.ref.megatron.context_parallel_size=2",
                             f"+{V}.actor.megatron.override_transformer_config.context_parallel_size=2"])
    assert cfg.train.name == "megatron" and cfg.train.context_parallel_size == 2
    assert cfg.train.options["transformer_config"] == {"context_parallel_size": 2}  # checked against the train key by the plugin
    assert load_config(None, [*MEG, f"{V}.actor.megatron.context_parallel_size=1"]).train.context_parallel_size == 1


def test_a_reference_layout_other_than_the_actors_is_refused_by_its_key():
    problems = [p for p in load_report(None, [*MEG, f"{V}.actor.megatron.context_parallel_size=2", f"{V}.ref.megatron.context_parallel_size=4"]).problems
                if p.severity == "error"]
    assert [p.key for p in problems] == [f"{V}.ref.megatron.context_parallel_size"], [p.render() for p in problems]
