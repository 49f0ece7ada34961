"""Long-response GRPO steps on one GPU (issue #33's device rows): random weights, the hf rollout, the fsdp backend.

Each row is a 3-step ``rlcore train`` run (random-weight model built from an inline config, so responses run to
the length limit; bf16, gradient checkpointing, ``model.compile``, micro-batches by a token budget); the table
reports the median of steps 2..3 (step 1 compiles): step, generation and actor-update seconds, tokens/s and the
peak allocated memory, next to the memory ``rlcore check`` estimates.

Rows (``--rows``, default all):
  r16k         1.5B shape (Qwen2.5-1.5B), 8 prompts x 4, 128 + 16,384 tokens, packed sequences (the default)
  r4k_packed   0.5B shape, 8 prompts x 8, 128 + 4,096 tokens, packed (issue row: 16.8 s / step, update 4.6 s padded)
  r4k_padded   the same with actor.use_remove_padding=false (the issue's layout), for the side-by-side ratio

    python bench/long_context/gpu_long.py --out bench/long_context/gpu_long_h100.md           # H100, ~15-25 min
    python bench/long_context/gpu_long.py --tiny --out /tmp/gpu_long_tiny.md                  # CPU smoke run (seconds)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

QWEN = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "max_position_embeddings": 32768, "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6, "hidden_act": "silu", "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
        "use_sliding_window": False, "torch_dtype": "bfloat16"}
SHAPES = {
    "1.5b": {**QWEN, "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28, "num_attention_heads": 12,
             "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True},
    "0.5b": {**QWEN, "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
             "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True},
    "tiny": {**QWEN, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "vocab_size": 264, "tie_word_embeddings": True, "max_position_embeddings": 1024},
}
# name: (shape, prompts, n, prompt tokens, response tokens, packed)
ROWS = {
    "r16k": ("1.5b", 8, 4, 128, 16384, True),
    "r4k_packed": ("0.5b", 8, 8, 128, 4096, True),
    "r4k_padded": ("0.5b", 8, 8, 128, 4096, False),
}
TINY_ROWS = {"tiny_packed": ("tiny", 2, 2, 32, 48, True), "tiny_padded": ("tiny", 2, 2, 32, 48, False)}


def write_row(tmp: Path, name: str, row, *, tiny: bool, steps: int) -> Path:
    from rl_core.testing.tiny_run import write_tiny_run

    shape, prompts, n, plen, rlen, packed = row
    budget = 2 * (plen + rlen) + 64
    extra = dict(
        data__train_batch_size=prompts, data__max_prompt_length=plen, data__max_response_length=rlen,
        rollout__n=n, actor__ppo_mini_batch_size=prompts, actor__use_dynamic_bsz=True, actor__ppo_max_token_len_per_gpu=budget,
        actor__use_remove_padding=packed, model__random_init=True, trainer__total_training_steps=steps, trainer__loggers=["jsonl"],
    )
    if not tiny:
        extra.update(model__dtype="bfloat16", model__enable_gradient_checkpointing=True, model__compile=True, trainer__device="cuda",
                     rollout__gpu_memory_utilization=0.5)
    cfg = write_tiny_run(tmp / name, steps=steps, **extra)
    model_dir = tmp / name / "model"
    (model_dir / "model.safetensors").unlink(missing_ok=True)  # random_init: the config is enough
    (model_dir / "config.json").write_text(json.dumps(SHAPES[shape]))
    return cfg


def run_row(cfg: Path, out_dir: Path) -> dict:
    check = subprocess.run([sys.executable, "-m", "rl_core", "check", str(cfg)], capture_output=True, text=True)
    estimate = next((line.split()[-2] for line in check.stdout.splitlines() if line.strip().startswith("peak in update")), "?")
    run = subprocess.run([sys.executable, "-m", "rl_core", "train", str(cfg), "--no-progress"], capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"{cfg}: rlcore train failed\n{run.stdout[-4000:]}\n{run.stderr[-4000:]}")
    rows = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    timed = rows[1:] or rows

    def med(key):
        vals = [r[key] for r in timed if key in r]
        return statistics.median(vals) if vals else float("nan")

    return {"step": med("timing_s/step"), "gen": med("timing_s/gen"), "update": med("timing_s/update_actor"),
            "tokens_s": med("perf/throughput_tokens_per_s"), "peak": med("perf/max_memory_allocated_gb"),
            "resp_len": med("response_length/mean"), "estimate": estimate, "steps": len(rows)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tiny", action="store_true", help="tiny model, CPU, float32: a smoke run")
    ap.add_argument("--rows", default=None, help="comma-separated row names (default: all)")
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    table = TINY_ROWS if args.tiny else ROWS
    names = args.rows.split(",") if args.rows else list(table)
    lines = ["| row | shape | prompts x n | prompt + response tokens | layout | step s | gen s | update s | tokens/s | mean response | peak GB | check's update peak GiB |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            row = table[name]
            cfg = write_row(Path(tmp), name, row, tiny=args.tiny, steps=args.steps)
            r = run_row(cfg, Path(tmp) / name / "out")
            shape, prompts, n, plen, rlen, packed = row
            lines.append(f"| {name} | {shape} | {prompts} x {n} | {plen} + {rlen} | {'packed' if packed else 'padded'} | {r['step']:.1f} | "
                         f"{r['gen']:.1f} | {r['update']:.2f} | {r['tokens_s']:.0f} | {r['resp_len']:.0f} | {r['peak']:.1f} | {r['estimate']} |")
            print(lines[-1], flush=True)
    text = "\n".join(lines)
    Path(args.out).write_text(f"# Long-response GRPO steps (issue #33)\n\nCommand: `python bench/long_context/gpu_long.py {'--tiny ' if args.tiny else ''}--out {args.out}`"
                              f" (median of steps 2..{args.steps})\n\n{text}\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
