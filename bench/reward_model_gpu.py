"""GRPO steps with a learned reward model next to the policy: stage times (issue 30's device acceptance).

On one H100 (after ``bash bench/reference/run_gpu.sh install_base``, carrying .gpu/qwen05b-gpt2 and .gpu/gsm8k)::

    python3 bench/reward_model_gpu.py --config bench/reference/grpo_reference.yaml --rm-shape 1.5b \\
        --steps 5 --out bench/results/reward_model_h100.md

builds a random Qwen2ForSequenceClassification of Qwen2.5-1.5B's shape (bf16, one label, the policy's
tokenizer) under --rm-dir, then runs the reference GRPO workload (0.5B policy) with ``reward_model.enable``
(colocated, offloaded between uses; ``--pool`` puts it on a GPU of its own instead) and the reference coin
reward mixed in by weight. The table gives each stage's median over the steps after the first (compile
warm-up), ``timing_s/reward`` and ``timing_s/reward_model`` included, the peak memory, and the memory
estimate of ``rlcore check`` for the same config. ``--tiny`` is the CPU smoke of this script (tiny policy,
tiny reward model; no GPU). Extra ``key=value`` arguments override the config.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

SHAPES = {
    "1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2),
    "0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2),
    "tiny": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2),
}


def make_reward_model(out: Path, shape: str, tokenizer_dir: str, device: str) -> Path:
    """A random sequence-classification model of ``shape`` with the tokenizer at ``tokenizer_dir``, saved to ``out``."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForSequenceClassification

    if (out / "config.json").is_file():
        return out
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    cfg = Qwen2Config(vocab_size=len(tok), num_labels=1, pad_token_id=pad, max_position_embeddings=4096, tie_word_embeddings=False, **SHAPES[shape])
    cfg.architectures = ["Qwen2ForSequenceClassification"]
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    with torch.device(device):
        model = Qwen2ForSequenceClassification(cfg).to(dtype)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    del model
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", help="the run's YAML (default with --tiny: a tiny CPU run)")
    ap.add_argument("--rm-shape", default="1.5b", choices=sorted(SHAPES))
    ap.add_argument("--rm-dir", default=None, help="where the reward model is built (default: a temporary folder)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--pool", action="store_true", help="the reward model on a GPU of its own (reward_model.n_gpus_per_node=1)")
    ap.add_argument("--tiny", action="store_true", help="CPU smoke: tiny policy and reward model")
    ap.add_argument("--out", default=None)
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()

    from rl_core.config.load import load_config
    from rl_memory_estimate.estimate import estimate
    from rl_core.plan.resolver import resolve
    from rl_core.trainer.loop import Trainer
    from rl_core_testing.tiny_run import read_metrics, write_tiny_run

    work = Path(tempfile.mkdtemp(prefix="rm_bench_"))
    config_path = args.config
    if args.tiny:
        config_path = config_path or str(write_tiny_run(work / "tiny", steps=args.steps))
        args.rm_shape = "tiny"
    base = load_config(config_path, args.overrides)
    device = "cuda" if base.trainer.device in ("cuda", "auto") and not args.tiny else "cpu"
    rm_dir = Path(args.rm_dir) if args.rm_dir else work / f"rm_{args.rm_shape}"
    t = time.perf_counter()
    make_reward_model(rm_dir, args.rm_shape, base.model.tokenizer_path or base.model.path, device)
    build_s = time.perf_counter() - t
    out_dir = work / "out"
    overrides = [
        *args.overrides,
        "reward_model.enable=true", f"reward_model.model.path={rm_dir}", "reward_model.apply_chat_template=false",
        "reward.weights={default: {rule: 1.0, model: 1.0}}", f"trainer.total_training_steps={args.steps}", f"trainer.output_dir={out_dir}",
        "trainer.loggers=[jsonl]", "trainer.save_freq=-1",
    ]
    if device == "cuda":
        overrides.append("reward_model.model.dtype=bfloat16")
    if args.pool:
        overrides.append("reward_model.n_gpus_per_node=1")
    stack, problems = resolve(load_config(config_path, overrides))
    if stack is None:
        raise SystemExit("\n".join(p.render() for p in problems))
    est = estimate(stack.config, stack.sizes, features=stack.features)
    trainer = Trainer(stack, progress=False)
    try:
        trainer.fit()
    finally:
        trainer.close()
    rows = read_metrics(out_dir)
    timed = rows[1:] if len(rows) > 1 else rows
    stages = sorted({k for r in timed for k in r if k.startswith("timing_s/")})
    lines = [
        f"# GRPO with a {args.rm_shape} reward model ({'own GPU' if args.pool else 'colocated, offloaded between uses'})",
        "",
        f"`python3 bench/reward_model_gpu.py {' '.join(a for a in ['--tiny' if args.tiny else '', '--pool' if args.pool else '', f'--config {args.config}' if args.config else '', f'--rm-shape {args.rm_shape}', f'--steps {args.steps}'] if a)}`"
        f" on {device_name()}; reward model built in {build_s:.0f} s. Medians over steps 2..{len(rows)} (step 1 compiles).",
        "",
        "| stage | median s |",
        "|---|---|",
        *[f"| {k} | {statistics.median(r[k] for r in timed if k in r):.3f} |" for k in stages],
        "",
        f"peak memory allocated (max over workers): {max((r.get('perf/max_memory_allocated_gb', 0) for r in rows), default=0):.2f} GiB",
        f"reward model score mean, last step: {rows[-1].get('reward/model/score_mean')}",
        "",
        "```",
        *(est.lines() if est is not None else ["memory estimate: unknown model shape"]),
        "```",
        "",
        "```json",
        json.dumps(rows[-1], indent=1, sort_keys=True),
        "```",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


def device_name() -> str:
    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"


if __name__ == "__main__":
    main()
