"""Helpers of bench/distill_gpu.sh (issue 50's GPU row: on-policy distillation, teacher 1.5B shape, student 0.5B shape).

    python bench/distill_gpu.py teacher STUDENT_DIR OUT_DIR [--shape 1.5b|tiny] [--device cuda]
        a teacher folder: the student's tokenizer files (the same vocabulary: rl-distill refuses another), the student's
        config.json with the teacher's shape, random weights (bf16) written with save_pretrained
    python bench/distill_gpu.py table OUT
        the steady steps (3..) of OUT/grpo.metrics.jsonl and OUT/distill.metrics.jsonl: median step time, the teacher's
        pass and its share of the distillation step, as a markdown table
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
from pathlib import Path

SHAPES = {
    "1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2),
    "tiny": dict(hidden_size=96, intermediate_size=192, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2),
}
STEADY_FROM = 3  # the first steps compile (model.compile) and warm the allocator up


def teacher(args) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    src, out = Path(args.student), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens", "vocab", "merges", "chat_template", "generation_config")):
            shutil.copy(f, out / f.name)
    cfg = AutoConfig.from_pretrained(src)
    for k, v in SHAPES[args.shape].items():
        setattr(cfg, k, v)
    if hasattr(cfg, "head_dim"):
        cfg.head_dim = cfg.hidden_size // cfg.num_attention_heads
    if getattr(cfg, "layer_types", None) is not None:  # one entry per layer: the new depth's (transformers 5 checks it)
        cfg.layer_types = [cfg.layer_types[0]] * cfg.num_hidden_layers
    torch.manual_seed(0)
    with torch.device(args.device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.save_pretrained(out)
    n = sum(p.numel() for p in model.parameters())
    print(f"teacher {out}: {args.shape} shape, {n / 1e9:.2f}B parameters, random bf16 weights")


def _steady(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if "timing_s/step" in r]
    return [r for r in rows if r["step"] >= STEADY_FROM] or rows


def table(args) -> None:
    out = Path(args.out)
    lines = ["| run | steady steps | step s | gen s | teacher s | update_actor s | teacher share of the step |", "|---|---:|---:|---:|---:|---:|---:|"]
    for name in ("grpo", "distill"):
        p = out / f"{name}.metrics.jsonl"
        if not p.exists():
            lines.append(f"| {name} | (no metrics: see {name}.log) | | | | | |")
            continue
        rows = _steady(p)
        med = lambda k: statistics.median(r.get(k, 0.0) for r in rows)  # noqa: E731
        step, teach = med("timing_s/step"), med("timing_s/teacher")
        share = statistics.median(r.get("timing_s/teacher", 0.0) / r["timing_s/step"] for r in rows)
        lines.append(f"| {name} | {len(rows)} | {step:.3f} | {med('timing_s/gen'):.3f} | {teach:.3f} | {med('timing_s/update_actor'):.3f} | "
                     + (f"{share:.1%} |" if name == "distill" else "- |"))
    print("\n".join(lines))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("teacher")
    t.add_argument("student")
    t.add_argument("out")
    t.add_argument("--shape", default="1.5b", choices=sorted(SHAPES))
    t.add_argument("--device", default="cpu")
    s = sub.add_parser("table")
    s.add_argument("out")
    args = ap.parse_args(argv)
    {"teacher": teacher, "table": table}[args.cmd](args)


if __name__ == "__main__":
    main(sys.argv[1:])
