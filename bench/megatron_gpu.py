"""GRPO steps with the megatron train engine (TP) and the hf rollout on a Qwen2.5-0.5B-shaped model.

Random weights from an inline config (no download): the numbers are about
throughput and memory. ``--tp`` processes are spawned (NCCL on GPU, gloo on
CPU), TP = all of them (data parallel 1). Each step goes through the engine
code the trainer uses (``rl_train_megatron.engine.build_engine``,
``rl_core.rollout.hf``):

    rollout generate (each rank, same prompts and seed) -> actor update (on-policy GRPO-shaped
    batch, random advantages) -> weight sync (TP all-gather -> rollout.load_weights)

Reported: per-step seconds of each stage, the update's model FLOPs
utilisation (``6 * parameters * tokens`` per update over ``seconds * GPUs *
peak``, peak = ``--peak-tflops``, 989 for H100/H200 bf16 dense) and the peak
``torch.cuda.max_memory_allocated`` over ranks.

    python bench/megatron_gpu.py --tp 2 --out bench/results/megatron_gpu_h200x2.md   # 2 GPUs, bf16
    python bench/megatron_gpu.py --tp 1 --out bench/results/megatron_gpu_h100.md     # 1 GPU
    SMOKE=1 python bench/megatron_gpu.py --out /tmp/megatron_smoke.md                # tiny, CPU, TP 2 (tested)

The GPU machines have no megatron-core: send its cp312 wheel (``pip download
--no-deps --only-binary=:all: --python-version 3.12 --platform
manylinux_2_28_x86_64 megatron-core==0.16.1``), ``pip install --no-deps
--target /tmp/site`` it there, and run with
``PYTHONPATH=/tmp/site:core:plugins/train_megatron``.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fsdp_gpu import QWEN25_05B, TINY, ensure_algorithms_registered, write_model_dir  # noqa: E402

TINY_MEGATRON = {**TINY, "num_attention_heads": 4, "num_key_value_heads": 2}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="markdown file to write the table to")
    p.add_argument("--smoke", action="store_true", default=bool(os.environ.get("SMOKE")), help="tiny model, CPU, float32 (also SMOKE=1)")
    p.add_argument("--tp", type=int, default=None, help="tensor-parallel processes (default: 2 on a smoke run, else the visible GPUs, at most 2)")
    p.add_argument("--steps", type=int, default=3, help="GRPO steps (the first is reported apart as warm-up)")
    p.add_argument("--dtype", choices=("bfloat16", "float32"), default=None, help="default: bfloat16 on GPU, float32 on CPU")
    p.add_argument("--prompts", type=int, default=None, help="prompts per step (default 32; smoke 4)")
    p.add_argument("--n", type=int, default=None, help="samples per prompt (default 4; smoke 2)")
    p.add_argument("--prompt-len", type=int, default=None, help="default 256; smoke 16")
    p.add_argument("--response-len", type=int, default=None, help="default 256; smoke 8")
    p.add_argument("--micro", type=int, default=None, help="sequences per micro-batch (default 8; smoke 2)")
    p.add_argument("--peak-tflops", type=float, default=989.0, help="per-GPU dense peak for the MFU (H100/H200 bf16: 989)")
    return p.parse_args(argv)


def run_rank(rank: int, world: int, args, model_dir: str, device_name: str, dtype: str) -> dict:
    import torch
    from rl_core.backends import SamplingParams, WorkerContext
    from rl_core.batch import Batch
    from rl_core.config.schema import (
        ActorConfig,
        DataConfig,
        ModelConfig,
        OptimConfig,
        RolloutConfig,
        RunConfig,
        TrainBackendConfig,
        TrainerConfig,
    )
    from rl_core.rollout.hf import factory as hf_rollout
    from rl_train_megatron.engine import build_engine

    ensure_algorithms_registered()
    P, R, n, prompts, micro = args.prompt_len, args.response_len, args.n, args.prompts, args.micro
    config = RunConfig(
        model=ModelConfig(path=model_dir, dtype=dtype, random_init=True),
        data=DataConfig(train_batch_size=prompts, max_prompt_length=P, max_response_length=R),
        rollout=RolloutConfig(n=n, temperature=1.0),
        train=TrainBackendConfig(name="megatron", tensor_model_parallel_size=world),
        actor=ActorConfig(ppo_mini_batch_size=prompts, ppo_micro_batch_size_per_gpu=micro, log_prob_micro_batch_size_per_gpu=micro, optim=OptimConfig(lr=1e-6)),
        trainer=TrainerConfig(total_training_steps=100, seed=0),
    )
    ctx = WorkerContext(rank=rank, world_size=world, local_rank=rank, device=f"cuda:{rank}" if device_name == "cuda" else "cpu", seed=0)
    cuda = device_name == "cuda"

    def sync():
        if cuda:
            torch.cuda.synchronize()

    t0 = time.perf_counter()
    actor = build_engine("actor", config, ctx)
    rollout = hf_rollout(config, ctx)
    rollout.load_weights(actor.named_weights())
    build_s = time.perf_counter() - t0
    n_params = sum(t.numel() for _, t in actor.named_weights())
    gen = torch.Generator().manual_seed(0)
    steps = []
    for step in range(args.steps):
        ids = torch.randint(3, 259, (prompts, P), generator=gen)
        batch = Batch({"input_ids": ids, "attention_mask": torch.ones_like(ids)})
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        row = {}
        start = time.perf_counter()
        out = rollout.generate(batch, SamplingParams(n=n, max_new_tokens=R, temperature=1.0, seed=step))
        sync()
        row["generate"] = time.perf_counter() - start
        out.meta["temperature"] = 1.0
        out["advantages"] = torch.randn(len(out), R, generator=gen) * out.tensors["response_mask"]
        start = time.perf_counter()
        metrics = actor.update(out, on_policy=True)  # one mini-batch, no old log-prob pass, as the loop does
        sync()
        row["update"] = time.perf_counter() - start
        start = time.perf_counter()
        rollout.load_weights(actor.named_weights())
        sync()
        row["sync"] = time.perf_counter() - start
        row["step"] = row["generate"] + row["update"] + row["sync"]
        row["tokens"] = len(out) * (P + R)
        row["loss"], row["grad_norm"] = metrics["loss"], metrics["grad_norm"]
        row["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30 if cuda else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        steps.append(row)
    actor.shutdown()
    rollout.shutdown()
    return {"steps": steps, "build_s": build_s, "n_params": n_params, "device": torch.cuda.get_device_name(rank) if cuda else (platform.processor() or "cpu")}


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch
    from rl_core_testing.distributed import run_distributed

    device_name = "cpu" if args.smoke or not torch.cuda.is_available() else "cuda"
    tp = args.tp or (2 if args.smoke else max(1, min(2, torch.cuda.device_count())))
    dtype = args.dtype or ("bfloat16" if device_name == "cuda" else "float32")
    args.prompts = args.prompts or (4 if args.smoke else 32)
    args.n = args.n or (2 if args.smoke else 4)
    args.prompt_len = args.prompt_len or (16 if args.smoke else 256)
    args.response_len = args.response_len or (8 if args.smoke else 256)
    args.micro = args.micro or (2 if args.smoke else 8)
    shape = TINY_MEGATRON if args.smoke else QWEN25_05B
    with tempfile.TemporaryDirectory(prefix="megatron_bench_") as tmp:
        model_dir = str(write_model_dir(Path(tmp) / "model", shape))
        results = run_distributed(run_rank, tp, args, model_dir, device_name, dtype, backend="nccl" if device_name == "cuda" else "gloo", timeout=3000)
    r0 = results[0]
    lines = [
        f"# megatron engine (TP {tp}) + hf rollout: {args.steps} GRPO steps ({'tiny smoke run' if args.smoke else 'Qwen2.5-0.5B shape, random weights'})",
        "",
        f"- device: {r0['device']} x {tp}, torch {torch.__version__}",
        f"- model: hidden {shape['hidden_size']}, {shape['num_hidden_layers']} layers, {shape['num_attention_heads']}/{shape['num_key_value_heads']} heads, "
        f"vocab {shape['vocab_size']}; {r0['n_params'] / 1e6:.1f} M parameters; {dtype} compute, float32 weights and AdamW",
        f"- batch: {args.prompts} prompts x n={args.n}, prompt {args.prompt_len} + response {args.response_len} tokens, one mini-batch, micro-batch {args.micro}",
        f"- engines built in {r0['build_s']:.1f} s; MFU = 6 x parameters x tokens / (update seconds x {tp} GPUs x {args.peak_tflops:g} TFLOP/s)",
        "",
        "| step | generate s | update s | weight sync s | step s | update MFU | peak memory GiB (max over ranks) | loss | grad norm |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for i, row in enumerate(r0["steps"]):
        peak = max(r["steps"][i]["peak_gib"] for r in results)
        mfu = 6 * r0["n_params"] * row["tokens"] / (row["update"] * tp * args.peak_tflops * 1e12)
        lines.append(
            f"| {i + 1} | {row['generate']:.3f} | {row['update']:.3f} | {row['sync']:.3f} | {row['step']:.3f} | {100 * mfu:.2f}% | {peak:.2f} | "
            f"{row['loss']:.4f} | {row['grad_norm']:.4f} |"
        )
    lines += ["", "Step 1 includes warm-up (allocator, kernels). Peak memory: GPU allocated per step on GPU; process RSS on CPU.", ""]
    text = "\n".join(lines)
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
