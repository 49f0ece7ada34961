"""Benchmark the fsdp train engine and the hf rollout on a Qwen2.5-0.5B-shaped model.

Random weights built from an inline config (no download): the numbers are
about throughput and memory, not quality. One process, or several under
``torchrun``; every stage goes through the same engine code the trainer
uses (``rl_train_fsdp.engine.build_engine`` and ``rl_core.rollout.hf``):

    rollout generate -> (rollout sleep) -> ref log-probs -> actor log-probs
    -> actor update -> (rollout wake) -> weight sync

Each stage is run ``--warmup`` times untimed, then ``--iters`` times timed
(median reported). Peak memory is ``torch.cuda.max_memory_allocated`` per
stage on GPU, the process's peak RSS on CPU.

    python bench/fsdp_gpu.py --out bench/results/fsdp_h100.md            # H100, bf16
    torchrun --nproc_per_node 2 bench/fsdp_gpu.py --out two_gpus.md       # FSDP over 2 GPUs
    python bench/fsdp_gpu.py --tiny --out /tmp/fsdp_tiny.md               # CPU smoke run (tested)

Without an installed rl-core (a bare checkout), run with
``PYTHONPATH=core:plugins/train_fsdp``; the built-in algorithms are then
registered by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import socket
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

QWEN25_05B = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
    "hidden_act": "silu",
    "attention_dropout": 0.0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
}

TINY = {**QWEN25_05B, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 264}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="markdown file to write the table to")
    p.add_argument("--tiny", action="store_true", help="tiny model and sizes, CPU, float32: a smoke run")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--dtype", choices=("bfloat16", "float32"), default=None, help="default: bfloat16 on GPU, float32 on CPU")
    p.add_argument("--prompts", type=int, default=None, help="prompts per step (default 32; tiny 4)")
    p.add_argument("--n", type=int, default=None, help="samples per prompt (default 4; tiny 2)")
    p.add_argument("--prompt-len", type=int, default=None, help="default 256; tiny 16")
    p.add_argument("--response-len", type=int, default=None, help="default 256; tiny 8")
    p.add_argument("--mini-batches", type=int, default=1, help="optimizer steps per update")
    p.add_argument("--micro", type=int, default=None, help="sequences per micro-batch (default 8; tiny 2)")
    p.add_argument("--gradient-checkpointing", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--iters", type=int, default=None, help="timed repetitions (default 3; tiny 1)")
    return p.parse_args(argv)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_distributed(device: str):
    """torchrun's env:// when present, else a one-rank group so FSDP2 (and its mixed precision) is used."""
    import torch
    import torch.distributed as dist

    backend = "nccl" if device == "cuda" else "gloo"
    if "WORLD_SIZE" in os.environ:
        rank, world, local = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0))
        init = "env://"
    else:
        rank, world, local = 0, 1, 0
        init = f"tcp://127.0.0.1:{_free_port()}"
    if device == "cuda":
        torch.cuda.set_device(local)
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=world, timeout=timedelta(minutes=10))
    return rank, world, local


def ensure_algorithms_registered() -> None:
    """Register the built-in policy losses when rl-core is on PYTHONPATH but not installed (no entry points)."""
    from rl_core.cards import Provider
    from rl_core.plugins import get_registry

    if "ppo_clip" not in get_registry().names("policy_loss"):
        import rl_core.algorithms.builtin as builtin

        get_registry(extra=[(builtin, Provider(distribution="rl-core", version="path"))])


def write_model_dir(path: Path, shape: dict) -> Path:
    """config.json (random weights are built from it: model.random_init) and the tiny byte-level tokenizer."""
    from rl_core_testing.tiny_model import build_tokenizer

    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({**shape, "torch_dtype": "float32"}, indent=2))
    build_tokenizer().save_pretrained(str(path))
    return path


class Stage:
    def __init__(self, device):
        import torch

        self.torch = torch
        self.device = device
        self.rows: list[dict] = []

    def run(self, name: str, fn, *, warmup: int, iters: int, tokens: int | None = None):
        torch = self.torch
        result = None
        for _ in range(warmup):
            result = fn()
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        times = []
        for _ in range(iters):
            start = time.perf_counter()
            result = fn()
            if self.device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        if self.device.type == "cuda":
            peak = torch.cuda.max_memory_allocated() / 2**30
        else:
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
        med = statistics.median(times)
        self.rows.append({"stage": name, "seconds": med, "tokens_per_s": (tokens / med) if tokens else None, "peak_gib": peak})
        return result


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch
    import transformers

    device_name = args.device
    if device_name == "auto":
        device_name = "cpu" if args.tiny or not torch.cuda.is_available() else "cuda"
    dtype = args.dtype or ("bfloat16" if device_name == "cuda" else "float32")
    prompts = args.prompts or (4 if args.tiny else 32)
    n = args.n or (2 if args.tiny else 4)
    P = args.prompt_len or (16 if args.tiny else 256)
    R = args.response_len or (8 if args.tiny else 256)
    micro = args.micro or (2 if args.tiny else 8)
    iters = args.iters or (1 if args.tiny else 3)
    if device_name == "cpu":  # the tiny run gains nothing from threads, and they hurt on a busy machine
        torch.set_num_threads(1 if args.tiny else max(1, (os.cpu_count() or 1) // int(os.environ.get("WORLD_SIZE", 1))))

    rank, world, local = init_distributed(device_name)

    from rl_core.backends import SamplingParams, WorkerContext
    from rl_core.batch import Batch
    from rl_core.config.schema import ActorConfig, DataConfig, ModelConfig, OptimConfig, RolloutConfig, RunConfig, TrainerConfig
    from rl_core.rollout.hf import factory as hf_rollout
    from rl_train_fsdp.engine import build_engine

    ensure_algorithms_registered()
    shape = TINY if args.tiny else QWEN25_05B
    tmp = tempfile.TemporaryDirectory(prefix="fsdp_bench_")
    model_dir = write_model_dir(Path(tmp.name) / f"rank{rank}", shape)
    seqs = prompts * n
    if prompts % world:
        raise SystemExit(f"--prompts {prompts} does not split over {world} ranks ({prompts} % {world} = {prompts % world})")
    config = RunConfig(
        model=ModelConfig(path=str(model_dir), dtype=dtype, random_init=True, enable_gradient_checkpointing=args.gradient_checkpointing),
        data=DataConfig(train_batch_size=prompts, max_prompt_length=P, max_response_length=R),
        rollout=RolloutConfig(n=n, temperature=1.0),
        actor=ActorConfig(
            ppo_mini_batch_size=prompts // args.mini_batches,
            ppo_micro_batch_size_per_gpu=micro,
            log_prob_micro_batch_size_per_gpu=micro,
            ppo_epochs=1,
            use_kl_loss=True,
            optim=OptimConfig(lr=1e-6),
        ),
        trainer=TrainerConfig(total_training_steps=100, seed=0),
    )
    ctx = WorkerContext(rank=rank, world_size=world, local_rank=local, device=f"cuda:{local}" if device_name == "cuda" else "cpu", seed=0)
    device = ctx.torch_device

    t0 = time.perf_counter()
    actor = build_engine("actor", config, ctx)
    ref = build_engine("ref", config, ctx)
    rollout = hf_rollout(config, ctx)
    build_s = time.perf_counter() - t0
    n_params = sum(t.numel() for _, t in actor.named_weights())

    stages = Stage(device)
    gen = torch.Generator().manual_seed(rank)
    local_prompts = prompts // world
    ids = torch.randint(3, 259, (local_prompts, P), generator=gen)
    prompt_batch = Batch({"input_ids": ids, "attention_mask": torch.ones_like(ids)})
    params = SamplingParams(n=n, max_new_tokens=R, temperature=1.0, logprobs=True, seed=rank)

    rollout.load_weights(actor.named_weights())  # the rollout starts from the actor's weights
    out = stages.run("rollout generate", lambda: rollout.generate(prompt_batch, params), warmup=args.warmup, iters=iters, tokens=local_prompts * n * R)
    if device.type == "cuda":
        rollout.sleep()
    rows = len(out)
    out.meta["temperature"] = 1.0
    stages.run("ref log-probs", lambda: ref.compute_log_prob(out)["log_probs"], warmup=args.warmup, iters=iters, tokens=rows * (P + R))
    old = stages.run("actor log-probs", lambda: actor.compute_log_prob(out)["log_probs"], warmup=args.warmup, iters=iters, tokens=rows * (P + R))
    mask = out.tensors["response_mask"]
    out["old_log_probs"] = old * mask
    out["ref_log_prob"] = old * mask
    out["advantages"] = torch.randn(rows, R, generator=gen) * mask
    metrics = stages.run("actor update", lambda: actor.update(out), warmup=args.warmup, iters=iters, tokens=rows * (P + R))
    if device.type == "cuda":
        rollout.wake_up()
    stages.run("weight sync (actor -> rollout)", lambda: rollout.load_weights(actor.named_weights()), warmup=0, iters=iters)

    if rank == 0:
        dev = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
        lines = [
            f"# fsdp engine + hf rollout benchmark ({'tiny smoke run' if args.tiny else 'Qwen2.5-0.5B shape, random weights'})",
            "",
            f"- device: {dev} x {world}, torch {torch.__version__}, transformers {transformers.__version__}",
            f"- model: hidden {shape['hidden_size']}, {shape['num_hidden_layers']} layers, {shape['num_attention_heads']}/{shape['num_key_value_heads']} heads, "
            f"intermediate {shape['intermediate_size']}, vocab {shape['vocab_size']}, tied embeddings; {n_params / 1e6:.1f} M parameters",
            f"- precision: {dtype} compute, float32 master weights and AdamW state; gradient checkpointing {'on' if args.gradient_checkpointing else 'off'}",
            f"- batch: {prompts} prompts x n={n} = {seqs} sequences, prompt {P} + response {R} tokens; "
            f"{args.mini_batches} mini-batch(es), micro-batch {micro} sequences; per rank {seqs // world} sequences",
            f"- engines built in {build_s:.1f} s; update loss {metrics['loss']:.4f}, grad norm {metrics['grad_norm']:.4f}",
            f"- timings: median of {iters} after {args.warmup} warm-up; tokens/s per rank (generate: new tokens; others: prompt + response tokens)",
            "",
            "| stage | seconds | tokens/s | peak memory (GiB) |",
            "|---|---:|---:|---:|",
        ]
        mem_note = "GPU allocated" if device.type == "cuda" else "process RSS"
        for row in stages.rows:
            tps = f"{row['tokens_per_s']:,.0f}" if row["tokens_per_s"] else "-"
            lines.append(f"| {row['stage']} | {row['seconds']:.3f} | {tps} | {row['peak_gib']:.2f} |")
        lines += ["", f"Peak memory: {mem_note}, per stage on GPU (reset before each), whole process so far on CPU.", ""]
        text = "\n".join(lines)
        print(text)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
    for engine in (actor, ref, rollout):
        engine.shutdown()
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
