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
    assert cfg.train.options["transformer_config"] == {"context_parallel_size": 2, "sequence_parallel": True}  # CP checked against the train key by the plugin; SP: the verl profile
    assert load_config(None, [*MEG, f"{V}.actor.megatron.context_parallel_size=1"]).train.context_parallel_size == 1


def test_a_reference_layout_other_than_the_actors_is_refused_by_its_key():
    problems = [p for p in load_report(None, [*MEG, f"{V}.actor.megatron.context_parallel_size=2", f"{V}.ref.megatron.context_parallel_size=4"]).problems
                if p.severity == "error"]
    assert [p.key for p in problems] == [f"{V}.ref.megatron.context_parallel_size"], [p.render() for p in problems]


def test_the_token_budget_stays_per_device_under_context_parallelism():
    """verl's engines group sequences by max_token_len_per_gpu x CP (each CP rank holds 1 / CP of a micro-batch)."""
    import types

    import torch
    from rl_core.batch import Batch
    from rl_core.train_engine.update import token_budget_parts

    lengths = [30, 30, 30, 30]
    batch = Batch({"attention_mask": torch.tensor([[1] * n + [0] * (32 - n) for n in lengths])}, {})
    for cp, micro_batches in ((1, 4), (2, 2), (4, 1)):
        cfg = load_config(None, ["actor.use_dynamic_bsz=true", "actor.ppo_max_token_len_per_gpu=32", f"train.context_parallel_size={cp}"])
        backend = types.SimpleNamespace(config=cfg, role="actor", sharded=False)
        assert len(token_budget_parts(backend, batch)) == micro_batches, cp


def test_mindspeed_context_parallel_algo_and_naive_l2norm_as_verls_ascend_scripts_write_them():
    """run_qwen3_5_122b_a10b_32k_megatron (Ascend) passes MindSpeed's context_parallel_algo=kvallgather_cp_algo (what rl-core's CP
    does: keys / values all-gathered) and use_naive_l2norm (a kernel choice): accepted; another CP algorithm is refused by feature."""
    tc = f"+{V}.actor.megatron.override_transformer_config"
    ok = load_report(None, [*MEG, f"{V}.actor.megatron.context_parallel_size=2", f"{tc}.context_parallel_algo=kvallgather_cp_algo",
                            f"+{V}.ref.megatron.override_transformer_config.context_parallel_algo=kvallgather_cp_algo", f"{tc}.use_naive_l2norm=True"])
    assert ok.config is not None and "context_parallel_algo" not in ok.config.train.options["transformer_config"]
    assert [(p.key, p.severity) for p in ok.problems] == [(f"{tc}.use_naive_l2norm", "warning")], [p.render() for p in ok.problems]
    ring = load_report(None, [*MEG, f"{V}.actor.megatron.context_parallel_size=2", f"{tc}.context_parallel_algo=megatron_cp_algo"])
    (p,) = ring.problems
    assert p.key == f"{tc}.context_parallel_algo" and "ring attention" in p.what and "kvallgather_cp_algo" in p.render()
