"""Actor update throughput and MFU against a measured bf16 matmul peak (issue 13, bench 2).

    python bench/update_mfu_gpu.py                  # H100: 0.5B and 1.5B shapes + the GSM8K memory rows, < 4 min
    python bench/update_mfu_gpu.py --only mfu       # or --only memory
    SMOKE=1 python bench/update_mfu_gpu.py          # CPU smoke run: a tiny model, seconds

``RoleEngine.update`` over ``FSDPBackend`` of the ``fsdp`` train backend (one process, bf16 compute over fp32 master weights and
AdamW, as the reference workload runs it), on-policy GRPO (one forward + backward per micro-batch, entropy
as a detached metric), ``--rows`` sequences of ``--prompt`` + ``--response`` tokens, random weights and
tokens; one warm-up update, then the median of ``--iters``. MFU = model FLOPs / time / peak, model FLOPs =
6 x (decoder matmul parameters) x tokens + 6 x vocab x hidden x response tokens (the LM head runs on the
response only) + 6 x layers x hidden x seq^2 per sequence (causal attention); the chunked log-prob
backward's extra LM-head matmul is not counted. The peak is the best of a 8192^3 bf16 matmul.

Memory rows: the shape of ``examples/gsm8k_grpo.yaml`` (Qwen2.5-0.5B with its 151,936 vocabulary, gradient
checkpointing, micro-batches of 32 x (512 + 512) tokens), peak ``torch.cuda.max_memory_allocated`` of the
update with chunked log-probs off (``model.logprob_chunk_size=0``) and on (2048). Only the update stage:
the example's rollout and reference model come on top. Writes ``$OUT/update_mfu_gpu.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "core"), str(REPO / "plugins" / "train_fsdp")]

import attrs  # noqa: E402
import torch  # noqa: E402

SHAPES = {
    "0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True),
    "1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2, tie_word_embeddings=True),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True),
}


def model_dir(root: Path, shape: str, vocab: int) -> Path:
    d = root / f"{shape}-{vocab}"
    d.mkdir(parents=True, exist_ok=True)
    cfg = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", **SHAPES[shape], "vocab_size": vocab, "max_position_embeddings": 4096,
           "rope_theta": 1e6, "rms_norm_eps": 1e-6, "hidden_act": "silu", "use_sliding_window": False, "torch_dtype": "bfloat16"}
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def run_config(path: Path, *, rows: int, prompt: int, response: int, micro: int, dtype: str, chunk: int, ckpt: bool):
    from rl_core.config.schema import ActorConfig, DataConfig, ModelConfig, RolloutConfig, RunConfig

    n = 8 if rows % 8 == 0 else 1
    return RunConfig(
        model=ModelConfig(path=str(path), random_init=True, dtype=dtype, logprob_chunk_size=chunk, enable_gradient_checkpointing=ckpt),
        data=DataConfig(train_batch_size=rows // n, max_prompt_length=prompt, max_response_length=response),
        rollout=RolloutConfig(n=n),
        actor=ActorConfig(ppo_mini_batch_size=rows // n, ppo_micro_batch_size_per_gpu=micro),
    )


def step_batch(rows: int, prompt: int, response: int, vocab: int):
    from rl_core.batch import Batch

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (rows, prompt + response), generator=g)
    return Batch(
        {
            "input_ids": ids,
            "attention_mask": torch.ones_like(ids),
            "responses": ids[:, prompt:].clone(),
            "response_mask": torch.ones(rows, response, dtype=torch.long),
            "advantages": torch.randn(rows, response, generator=g),
        },
        {"uid": [str(i // 8) for i in range(rows)]},
        {},
    )


def model_flops(shape: str, vocab: int, rows: int, prompt: int, response: int) -> float:
    s = SHAPES[shape]
    h, f, L = s["hidden_size"], s["intermediate_size"], s["num_hidden_layers"]
    kv = h // s["num_attention_heads"] * s["num_key_value_heads"]
    per_layer = h * h * 2 + h * kv * 2 + 3 * h * f  # q, o; k, v; gate, up, down
    seq = prompt + response
    return 6 * L * per_layer * rows * seq + 6 * vocab * h * rows * response + 6 * L * h * seq * seq * rows


def matmul_peak(device: str) -> float:
    n = 8192 if device == "cuda" else 512
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    best = float("inf")
    for _ in range(20):
        best = min(best, _timed(lambda: a @ b, device))
    return 2 * n**3 / best


def _timed(fn, device: str) -> float:
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def measure(engine, batch, device: str, iters: int) -> tuple[float, float]:
    """(median seconds per update, peak GiB allocated during them)."""
    on_policy = "old_log_probs" not in batch.tensors.keys()  # no old log-prob pass: one mini-batch, as the loop does
    engine.update(batch, on_policy=on_policy)  # warm-up
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = [_timed(lambda: engine.update(batch, on_policy=on_policy), device) for _ in range(iters)]
    peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else float("nan")
    return statistics.median(times), peak


def main() -> None:
    smoke = os.environ.get("SMOKE") == "1"
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=("mfu", "memory"), default=None)
    ap.add_argument("--rows", type=int, default=16 if smoke else 64)
    ap.add_argument("--prompt", type=int, default=16 if smoke else 128)
    ap.add_argument("--response", type=int, default=16 if smoke else 256)
    ap.add_argument("--iters", type=int, default=2 if smoke else 3)
    ap.add_argument("--plan", default=None, help="shape:micro,micro ... e.g. '0.5b:16,64 1.5b:8,16,32' (default: the committed rows)")
    ap.add_argument("--compile", default="0", help="model.compile values to run, e.g. '0,1' (1: each decoder layer torch.compiled)")
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() and not smoke else "cpu"
    dtype = "bfloat16" if device == "cuda" else "float32"
    out_dir = Path(os.environ.get("OUT", "/tmp/out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    from rl_core.backends import WorkerContext
    from rl_train_fsdp.engine import build_engine

    peak = matmul_peak(device)
    print(f"measured matmul peak: {peak / 1e12:.1f} TFLOP/s", flush=True)
    root = Path(tempfile.mkdtemp(prefix="update_mfu_"))
    ctx = WorkerContext(device=device)
    rows_out = []

    def record(row):
        rows_out.append(row)
        print(json.dumps(row), flush=True)

    if args.only in (None, "mfu"):
        # (shape, vocab, micro-batch sizes); chunked log-probs on (the GPU default) and, for 0.5B, off
        plan = [("tiny", 300, (4, 16))] if smoke else [("0.5b", 50257, (16, 64)), ("1.5b", 50257, (8, 16))]
        if args.plan:
            plan = [(sh, 300 if sh == "tiny" else 50257, tuple(int(m) for m in ms.split(","))) for sh, ms in (x.split(":") for x in args.plan.split())]
        for (shape, vocab, micros), compiled in [(p, c) for p in plan for c in (bool(int(v)) for v in args.compile.split(","))]:
            path = model_dir(root, shape, vocab)
            batch = step_batch(args.rows, args.prompt, args.response, vocab)
            cfg = run_config(path, rows=args.rows, prompt=args.prompt, response=args.response, micro=micros[0], dtype=dtype, chunk=2048, ckpt=False)
            engine = build_engine("actor", attrs.evolve(cfg, model=attrs.evolve(cfg.model, compile=compiled)), ctx)
            flops = model_flops(shape, vocab, args.rows, args.prompt, args.response)
            for micro in micros:
                for chunk in ((2048, 0) if shape != "1.5b" and not args.plan else (2048,)):
                    engine.config = attrs.evolve(engine.config, model=attrs.evolve(engine.config.model, logprob_chunk_size=chunk),
                                                 actor=attrs.evolve(engine.config.actor, ppo_micro_batch_size_per_gpu=micro))
                    try:
                        t, mem = measure(engine, batch, device, args.iters)
                    except torch.OutOfMemoryError:
                        record({"kind": "mfu", "shape": shape, "micro": micro, "chunk": chunk, "compile": compiled, "error": "out of memory"})
                        torch.cuda.empty_cache()
                        continue
                    tokens = args.rows * (args.prompt + args.response)
                    record({"kind": "mfu", "shape": shape, "vocab": vocab, "micro": micro, "chunk": chunk, "compile": compiled, "update_s": t, "tokens_per_s": tokens / t,
                            "tflops": flops / t / 1e12, "mfu": flops / t / peak, "peak_gib": mem})
            del engine
            if device == "cuda":
                torch.cuda.empty_cache()

    if args.only in (None, "memory"):
        shape, vocab = ("tiny", 1000) if smoke else ("0.5b", 151936)
        P, R, rows, micro = (16, 16, 8, 4) if smoke else (512, 512, 32, 32)
        path = model_dir(root, shape, vocab)
        batch = step_batch(rows, P, R, vocab)
        engine = build_engine("actor", run_config(path, rows=rows, prompt=P, response=R, micro=micro, dtype=dtype, chunk=2048, ckpt=True), ctx)
        for chunk in (0, 2048):
            engine.config = attrs.evolve(engine.config, model=attrs.evolve(engine.config.model, logprob_chunk_size=chunk))
            try:
                t, mem = measure(engine, batch, device, 1)
                record({"kind": "memory", "shape": shape, "vocab": vocab, "rows": rows, "micro": micro, "seq": P + R, "chunk": chunk, "update_s": t, "peak_gib": mem})
            except torch.OutOfMemoryError:
                record({"kind": "memory", "shape": shape, "vocab": vocab, "chunk": chunk, "error": "out of memory"})
                torch.cuda.empty_cache()

    import transformers

    info = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": ("SMOKE=1 " if smoke else "") + "python " + " ".join(sys.argv),
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__, "transformers": transformers.__version__, "matmul_peak_tflops": peak / 1e12,
        "rows": args.rows, "prompt": args.prompt, "response": args.response,
    }
    (out_dir / "update_mfu_gpu.json").write_text(json.dumps({"info": info, "rows": rows_out}, indent=1))
    lines = [f"# actor update throughput / MFU: {info['device']}, {info['date']}", "",
             f"`{info['command']}`; torch {info['torch']}, transformers {info['transformers']}; measured bf16 matmul peak {peak / 1e12:.0f} TFLOP/s; "
             f"{args.rows} x ({args.prompt} + {args.response}) tokens per update", "",
             "| shape | vocab | micro | log-prob chunk | compiled layers | update s | tokens/s | TFLOP/s | MFU | peak GiB |", "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
    for r in rows_out:
        if r["kind"] != "mfu":
            continue
        comp = "yes" if r.get("compile") else "no"
        if "error" in r:
            lines.append(f"| {r['shape']} | | {r['micro']} | {r['chunk']} | {comp} | {r['error']} | | | | |")
        else:
            lines.append(f"| {r['shape']} | {r['vocab']} | {r['micro']} | {r['chunk'] or 'off'} | {comp} | {r['update_s']:.3f} | {r['tokens_per_s']:,.0f} | "
                         f"{r['tflops']:.0f} | {100 * r['mfu']:.1f}% | {r['peak_gib']:.1f} |")
    mem_rows = [r for r in rows_out if r["kind"] == "memory"]
    if mem_rows:
        lines += ["", "GSM8K example shape (update stage only, gradient checkpointing):", "", "| log-prob chunk | update s | peak GiB |", "|---:|---:|---:|"]
        for r in mem_rows:
            lines.append(f"| {r['chunk'] or 'off'} | " + (r["error"] + " | |" if "error" in r else f"{r['update_s']:.3f} | {r['peak_gib']:.1f} |"))
    text = "\n".join(lines) + "\n"
    (out_dir / "update_mfu_gpu.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
