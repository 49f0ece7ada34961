"""The memory estimate (rl_core.plan.memory): parameter counts, hand-worked terms, and what check prints."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
from rl_core.config.load import load_config
from rl_core.plan.memory import GB, model_shape, shape_from_config
from rl_memory_estimate.estimate import estimate
from rl_core.plan.resolver import resolve
from rl_core_testing.tiny_model import make_tiny_model_dir, tiny_config

TINY_DATA = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "data" / "tiny_gsm8k.jsonl"


def test_parameter_count_of_known_models():
    # published counts: Qwen2.5-0.5B 494,032,768 (qkv biases, tied embeddings); SmolLM2-135M 134,515,008
    assert model_shape("Qwen/Qwen2.5-0.5B-Instruct").params == 494_032_768
    assert model_shape("builtin:smollm2").params == 134_515_008


@pytest.mark.parametrize("arch,tied", [("llama", False), ("qwen2", True), ("llama", True)])
def test_parameter_count_matches_a_real_model(arch, tied):
    from transformers import AutoModelForCausalLM

    cfg = tiny_config(arch, hidden=64, layers=3, heads=4, kv_heads=2, tie_word_embeddings=tied)
    model = AutoModelForCausalLM.from_config(cfg)
    shape = shape_from_config(cfg.to_dict(), "tiny")
    assert shape.params == sum(p.numel() for p in model.parameters())


def _stack(tmp_path, *overrides):
    model = make_tiny_model_dir(tmp_path / "model")
    cfg = load_config(None, [f"model.path={model}", f"data.train_files=[{TINY_DATA}]", "trainer.device=cpu", "data.train_batch_size=4",
                             "rollout.n=2", "actor.ppo_mini_batch_size=4", "data.max_prompt_length=24", "data.max_response_length=8", *overrides])
    stack, problems = resolve(cfg)
    assert stack is not None, problems
    return stack


def test_terms_hand_worked(tmp_path):
    stack = _stack(tmp_path, "actor.ppo_micro_batch_size_per_gpu=4", "model.dtype=float32", "model.share_prompt_forward=false")
    shape = model_shape(stack.config.model.path)
    # the tiny llama: hidden 64, 2 layers, 4 heads (head_dim 16), 2 kv heads, intermediate 128, vocab 264, untied
    # embed + lm head 2 x 264 x 64 = 33792; per layer q 64x64 + k,v 2 x 64x32 + o 64x64 + mlp 3 x 64x128 + norms 128
    # = 4096 + 4096 + 4096 + 24576 + 128 = 36992; 2 layers + final norm 64 -> 33792 + 73984 + 64 = 107840
    assert shape.params == 107_840
    est = estimate(stack.config, stack.sizes, available=64 * GB)
    P = 107_840
    assert est.terms["actor parameters (fp32)"] == 4 * P
    assert est.terms["actor AdamW state"] == 8 * P
    assert est.terms["actor gradients (update)"] == 4 * P
    assert est.terms["rollout weights"] == 4 * P  # float32 rollout copy
    # KV: 8 sequences x (24 + 8) tokens x 2 layers x 2 (k, v) x 2 kv heads x 16 dims x 4 bytes = 131072
    assert est.terms["rollout KV cache"] == 8 * 32 * 2 * 2 * 2 * 16 * 4
    # activations: 4 seqs x 32 tokens x 2 layers x (4 x (5 x 64 + 2 x 2 x 16 + 3 x 128) + 16 x 64) bytes
    assert est.terms["activations (update, no checkpointing)"] == 4 * 32 * 2 * (4 * (320 + 64 + 384) + 1024)
    # logits: 4 seqs x 8 response tokens x 264 vocab x (4 + 16) bytes
    assert est.terms["logits (update)"] == 4 * 8 * 264 * 20
    runtime = est.terms["process runtime (python, torch, ...)"]
    # update = runtime + params and AdamW (12P) + gradients (4P) + the rollout copy (4P) + activations + logits
    assert est.phases["update"] == pytest.approx(runtime + 12 * P + 4 * P + 4 * P + est.terms["activations (update, no checkpointing)"] + est.terms["logits (update)"])
    assert est.fits is True and est.advice == ()


def test_checkpointing_and_micro_batch_shrink_the_update(tmp_path):
    base = _stack(tmp_path / "a", "actor.ppo_micro_batch_size_per_gpu=8")
    ckpt = _stack(tmp_path / "b", "actor.ppo_micro_batch_size_per_gpu=8", "model.enable_gradient_checkpointing=true")
    small = _stack(tmp_path / "c", "actor.ppo_micro_batch_size_per_gpu=2")
    e0, e1, e2 = (estimate(s.config, s.sizes, available=64 * GB) for s in (base, ckpt, small))
    act = lambda e: next(v for k, v in e.terms.items() if k.startswith("activations"))  # noqa: E731
    assert act(e1) < act(e0)
    assert act(e2) == pytest.approx(act(e0) / 4)
    assert e2.terms["logits (update)"] == e0.terms["logits (update)"] / 4
    assert e1.phases["update"] < e0.phases["update"] and e2.phases["update"] < e0.phases["update"]


def test_does_not_fit_says_what_to_change(tmp_path):
    stack = _stack(tmp_path, "actor.ppo_micro_batch_size_per_gpu=8")
    est = estimate(stack.config, stack.sizes, available=1e6)  # 1 MB of RAM
    assert est.fits is False
    text = "\n".join(est.lines())
    assert "does NOT fit" in text and "actor.ppo_micro_batch_size_per_gpu" in text and "enable_gradient_checkpointing" in text
    # CPU ranks share the RAM: two processes need twice the peak
    two = attrs.evolve(stack.sizes, world_size=2)
    assert estimate(stack.config, two, available=64 * GB).ranks_sharing == 2


def test_fraction_engine_on_gpu_takes_its_share(tmp_path):
    """What a backend holds comes from its card: a rollout card with memory_fraction takes its share of the GPU."""
    from rl_core.cards import RolloutCard

    stack = _stack(tmp_path, "actor.ppo_micro_batch_size_per_gpu=4", "rollout.gpu_memory_utilization=0.4")
    engine = RolloutCard(name="reserving", factory="x:y", memory_fraction=True)
    est = estimate(stack.config, attrs.evolve(stack.sizes, device="cuda"), rollout=engine, available=80 * GB)
    assert est.terms["rollout engine (memory fraction)"] == pytest.approx(0.4 * 80 * GB)
    assert "process runtime (python, torch, ...)" not in est.terms  # allocator memory only on GPU
    plain = estimate(stack.config, attrs.evolve(stack.sizes, device="cuda"), rollout=stack.rollout, available=80 * GB)
    assert "rollout engine (memory fraction)" not in plain.terms and "rollout KV cache" in plain.terms
    # asleep (enable_sleep, the default) it releases its share during training, except what its card says sleep keeps
    assert est.phases["update"] < est.phases["rollout"] and "rollout engine asleep (what its sleep keeps)" not in est.terms
    keeps = RolloutCard(name="reserving", factory="x:y", memory_fraction=True, asleep_gib=1.5)
    asleep = estimate(stack.config, attrs.evolve(stack.sizes, device="cuda"), rollout=keeps, available=80 * GB)
    assert asleep.terms["rollout engine asleep (what its sleep keeps)"] == 1.5 * GB
    assert asleep.phases["update"] == est.phases["update"] + 1.5 * GB and asleep.phases["rollout"] == est.phases["rollout"]


def test_train_card_says_how_states_are_sharded(tmp_path):
    from rl_core.cards import TrainCard

    stack = _stack(tmp_path, "actor.ppo_micro_batch_size_per_gpu=4")
    four = attrs.evolve(stack.sizes, world_size=4, train_model_parallel=2)
    P = model_shape(stack.config.model.path).params
    for sharding, S in (("data", 4), ("model", 2), ("none", 1)):
        card = TrainCard(name="t", factory="x:y", state_sharding=sharding)
        assert estimate(stack.config, four, train=card, available=64 * GB).terms["actor AdamW state"] == 8 * P / S


def test_context_parallel_ranks_hold_whole_shards_and_a_share_of_the_tokens(tmp_path):
    from rl_core.cards import TrainCard

    stack = _stack(tmp_path, "actor.ppo_micro_batch_size_per_gpu=4", "model.share_prompt_forward=false")
    card = TrainCard(name="t", factory="x:y", state_sharding="model")
    tp2 = estimate(stack.config, attrs.evolve(stack.sizes, world_size=2, train_model_parallel=2), train=card, available=64 * GB)
    tp2cp2 = estimate(stack.config, attrs.evolve(stack.sizes, world_size=4, train_model_parallel=4, train_context_parallel=2), train=card,
                      available=64 * GB)
    assert tp2cp2.terms["actor AdamW state"] == tp2.terms["actor AdamW state"]  # TP 2 shards; CP ranks hold them whole
    act = "activations (update, no checkpointing)"
    assert tp2cp2.terms[act] == tp2.terms[act] / 2 and tp2cp2.terms["logits (update)"] == tp2.terms["logits (update)"] / 2


def test_check_prints_the_estimate(tmp_path, capsys):
    from rl_core.cli.main import main

    model = make_tiny_model_dir(tmp_path / "model")
    code = main(["check", f"model.path={model}", f"data.train_files=[{TINY_DATA}]", "trainer.device=cpu", "data.train_batch_size=4",
                 "rollout.n=2", "actor.ppo_mini_batch_size=4", "actor.ppo_micro_batch_size_per_gpu=4"])
    out = capsys.readouterr().out
    assert code == 0
    assert "memory estimate, per process (RAM)" in out and "peak in update" in out and "peak in rollout" in out and ": fits" in out


def test_chunked_lm_head_on_gpu_counts_one_chunk_of_logits(tmp_path):
    # model.logprob_chunk_size: 16 tokens per chunk; a micro-batch of 4 x 8 = 32 response tokens
    stack = _stack(tmp_path, "actor.ppo_micro_batch_size_per_gpu=4", "model.dtype=float32", "model.logprob_chunk_size=16")
    gpu = attrs.evolve(stack.sizes, device="cuda")
    est = estimate(stack.config, gpu, available=80 * GB)
    # one chunk: 16 tokens x 264 vocab x (4 + 12) bytes, in the update and in the log-prob pass alike
    assert est.terms["logits (update, chunked)"] == 16 * 264 * 16
    assert est.terms["logits (log-probs, chunked)"] == 16 * 264 * 16
    assert "logits (update)" not in est.terms
    off = estimate(attrs.evolve(stack.config, model=attrs.evolve(stack.config.model, logprob_chunk_size=0)), gpu, available=80 * GB)
    assert off.terms["logits (update)"] == 4 * 8 * 264 * 20
    assert est.phases["update"] - off.phases["update"] == pytest.approx(16 * 264 * 16 - 4 * 8 * 264 * 20)
    # unset: the train backend's default, 2048 tokens on a GPU (more than this micro-batch has), off on CPU
    default = attrs.evolve(stack.config, model=attrs.evolve(stack.config.model, logprob_chunk_size=None))
    assert estimate(default, gpu, available=80 * GB).terms["logits (update, chunked)"] == 32 * 264 * 16
    assert "logits (update)" in estimate(default, stack.sizes, available=80 * GB).terms


def test_hf_rollout_on_gpu_keeps_a_small_engine_through_sleep(tmp_path):
    """rl_core.rollout.sleep_policy: held while weights + KV cache <= sleep_threshold x the device, else freed."""
    stack = _stack(tmp_path, "actor.ppo_micro_batch_size_per_gpu=4")
    gpu = attrs.evolve(stack.sizes, device="cuda")
    small = estimate(stack.config, gpu, available=80 * GB)  # a tiny model next to 80 GB: kept
    held = small.terms["rollout weights"] + small.terms["rollout KV cache"]
    freed_cfg = attrs.evolve(stack.config, rollout=attrs.evolve(stack.config.rollout, engine_kwargs={"sleep_threshold": 0}))
    freed = estimate(freed_cfg, gpu, available=80 * GB)
    assert small.phases["update"] - freed.phases["update"] == pytest.approx(held)
    assert small.phases["log-probs"] - freed.phases["log-probs"] == pytest.approx(held)
    # a device so small that the engine is more than a tenth of it: freed, as with threshold 0
    tight = estimate(stack.config, gpu, available=held * 5)
    assert tight.phases["update"] == pytest.approx(estimate(freed_cfg, gpu, available=held * 5).phases["update"])


def test_check_on_a_multi_rank_config_says_the_estimate_is_per_rank(tmp_path, capsys):
    """Issue 54: on 2 ranks every term and peak is one rank's (the AdamW state halved by the sharding), and the
    printout says so; the one-rank printout keeps its wording."""
    from rl_core.cli.main import main

    model = make_tiny_model_dir(tmp_path / "model")
    common = [f"model.path={model}", f"data.train_files=[{TINY_DATA}]", "trainer.device=cpu", "data.train_batch_size=4",
              "rollout.n=2", "actor.ppo_mini_batch_size=4", "actor.ppo_micro_batch_size_per_gpu=4"]
    assert main(["check", *common, "trainer.n_gpus_per_node=2"]) == 0
    two = capsys.readouterr().out
    assert "memory estimate, per rank, each of 2 processes (RAM)" in two and "2 processes x peak" in two
    assert main(["check", *common]) == 0
    one = capsys.readouterr().out
    assert "memory estimate, per process (RAM)" in one and "per rank" not in one.split("memory estimate")[1].splitlines()[0]
    # the numbers are one rank's: with the weights sharded over the data-parallel ranks, half the AdamW state each
    from rl_core.cards import TrainCard

    stack = _stack(tmp_path / "s", "actor.ppo_micro_batch_size_per_gpu=4")
    card = TrainCard(name="t", factory="x:y", state_sharding="data")
    one_rank = estimate(stack.config, attrs.evolve(stack.sizes, world_size=1), train=card, available=64 * GB)
    two_ranks = estimate(stack.config, attrs.evolve(stack.sizes, world_size=2), train=card, available=64 * GB)
    assert two_ranks.world == 2 and two_ranks.lines()[0].startswith("memory estimate, per rank, each of 2")
    assert two_ranks.terms["actor AdamW state"] == pytest.approx(one_rank.terms["actor AdamW state"] / 2)
