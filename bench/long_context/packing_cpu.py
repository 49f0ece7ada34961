"""Packed vs padded actor update on the CPU, on a batch whose sequences differ a lot in length.

Both engines (the fsdp backend, one rank, ``actor.use_remove_padding`` true / false) start from the same
random-weight model and run the same update (one mini-batch, every sequence in one micro-batch, float32),
alternated in one process, so the ratio compares like with like; only the ratio is reported (absolute CPU
seconds depend on the machine and its load). Default shape: a tiny llama (hidden 256, 4 layers, 8 heads /
4 KV heads), 8 sequences of 16 to 96 prompt and 24 to 1,024 response tokens.

    python bench/long_context/packing_cpu.py --out bench/long_context/packing_cpu.md
    python bench/long_context/packing_cpu.py --tiny   # seconds: the smoke run (CI)
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import attrs
import torch
from rl_core.backends import WorkerContext
from rl_core_testing.mixed_lengths import mixed_length_batch
from rl_core_testing.tiny_model import make_tiny_model_dir
from rl_core_testing.train_conformance import default_config
from rl_train_fsdp.engine import build_engine

FULL = dict(hidden=256, layers=4, heads=8, kv_heads=4, prompts=[16, 96, 40, 70, 24, 88, 32, 60], responses=[1024, 24, 300, 64, 700, 40, 150, 90])
TINY = dict(hidden=64, layers=2, heads=4, kv_heads=2, prompts=[4, 20, 9], responses=[80, 5, 30])


def engine(model_dir: str, rows: int, packed: bool, max_response: int):
    cfg = default_config(model_dir)
    cfg = attrs.evolve(
        cfg,
        data=attrs.evolve(cfg.data, train_batch_size=rows, max_response_length=max_response),
        rollout=attrs.evolve(cfg.rollout, n=1),
        actor=attrs.evolve(cfg.actor, use_remove_padding=packed, ppo_mini_batch_size=rows, ppo_micro_batch_size_per_gpu=rows, ppo_epochs=1,
                           use_kl_loss=True, entropy_coeff=0.0),
    )
    return build_engine("actor", cfg, WorkerContext())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiny", action="store_true", help="a tiny model and batch (seconds): the smoke run")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None, help="write the markdown table here too")
    args = ap.parse_args()
    shape = TINY if args.tiny else FULL
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = make_tiny_model_dir(tmp, "llama", hidden=shape["hidden"], layers=shape["layers"], heads=shape["heads"], kv_heads=shape["kv_heads"])
        batch = mixed_length_batch(shape["prompts"], shape["responses"], vocab=250)
        rows, R = len(batch), batch.tensors["responses"].shape[1]
        engines = {name: engine(str(model_dir), rows, name == "packed", R) for name in ("padded", "packed")}
        assert engines["packed"].backend.packed and not engines["padded"].backend.packed
        times: dict[str, list[float]] = {name: [] for name in engines}
        losses: dict[str, float] = {}
        for _ in range(args.repeats + 1):  # the first round warms up and is dropped
            for name, eng in engines.items():
                start = time.perf_counter()
                out = eng.update(batch)
                times[name].append(time.perf_counter() - start)
                losses.setdefault(name, out["loss"])
    med = {name: statistics.median(t[1:]) for name, t in times.items()}
    tokens = int(batch.tensors["attention_mask"].sum())
    padded_tokens = batch.tensors["attention_mask"].numel()
    lines = [
        "| layout | update time (relative to padded) | tokens computed |",
        "|---|---|---|",
        f"| padded | 1.00 | {padded_tokens} |",
        f"| packed | {med['packed'] / med['padded']:.2f} | {tokens} |",
        "",
        f"padded / packed speed-up: {med['padded'] / med['packed']:.2f}x (median of {args.repeats} updates each, alternated, after one warm-up; "
        f"first-update loss padded {losses['padded']:.6f}, packed {losses['packed']:.6f})",
        f"shape: llama hidden {shape['hidden']}, {shape['layers']} layers, {shape['heads']} heads / {shape['kv_heads']} KV heads; "
        f"prompts {shape['prompts']}, responses {shape['responses']}; float32, {args.threads} CPU threads",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(f"# Packed vs padded actor update (CPU)\n\nCommand: `python bench/long_context/packing_cpu.py --out {args.out}`\n\n{text}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
