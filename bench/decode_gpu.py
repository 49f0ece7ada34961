"""``hf`` rollout decode throughput at batch 8-256 against the weights-read floor (issue 13, bench 1).

    python bench/decode_gpu.py                       # H100: 0.5B reference shape, batches 8..256, < 4 min
    python bench/decode_gpu.py --batches 64 --modes graph,compile,compile_nopack
    python bench/decode_gpu.py --shape 1.5b --batches 64
    SMOKE=1 python bench/decode_gpu.py               # CPU smoke run: a tiny model, seconds

For every batch size ``B`` (``B / 8`` random prompts of ``--prompt`` tokens x 8 samples, ``--new`` new
tokens, temperature 1, as in the reference workload) it times ``HFRolloutEngine.generate`` with

- ``plain``: the transformers loop (``static_decode=false``);
- ``static``: the static-cache loop without CUDA graphs;
- ``graph``: the static-cache loop with the decode step in a CUDA graph, not compiled;
- ``compile``: ``graph`` with the step ``torch.compile``d first (the GPU default; one compilation per
  batch size, not timed: it happens in the warm-up call);
- ``nopack`` / ``compile_nopack`` (only with ``--modes``): ``graph`` / ``compile`` with separate q / k / v and
  gate / up GEMMs (``pack_projections=false``; packed is the default);
- ``compile_nochunk`` (only with ``--modes``): ``compile`` with every step attending over the whole cache
  (``decode_chunk=0``; the default grows the attended capacity in steps of 1024 slots): long responses,
  e.g. ``--batches 64 --new 4096 --modes compile,compile_nochunk`` (issue #33);

after one warm-up call per mode at the timed length (which also compiles and captures the graph). The floor: a decode step must read
every weight once, so ``step >= weight bytes / HBM bandwidth`` (bandwidth measured here by a device copy)
and ``tokens/s <= B / step``. Also reports how many greedy tokens ``graph`` shares with ``plain`` (bf16:
different kernels may flip near-ties). Writes ``$OUT/decode_gpu.{json,md}`` (``OUT`` default ``/tmp/out``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "core"), str(REPO / "plugins" / "hf_decode")]

import torch  # noqa: E402

SHAPES = {
    "0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True),
    "1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2, tie_word_embeddings=True),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True),
}


def build_model(shape: str, vocab: int, device: str, dtype: torch.dtype):
    from transformers import AutoModelForCausalLM, Qwen2Config

    cfg = Qwen2Config(**SHAPES[shape], vocab_size=vocab, max_position_embeddings=4096, rope_theta=1e6, rms_norm_eps=1e-6,
                      bos_token_id=vocab - 1, eos_token_id=vocab - 1, pad_token_id=vocab - 1)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    return model.eval()


class _Tok:
    """What the engine reads of a tokenizer (no text is decoded without stop strings)."""

    def __init__(self, eos: int) -> None:
        self.eos_token_id = self.pad_token_id = eos


def hbm_bandwidth(device: str) -> float:
    """Bytes/s of a large device-to-device copy (read + write), best of 5."""
    n = (1 << 30) if device == "cuda" else (1 << 24)
    a = torch.empty(n, dtype=torch.uint8, device=device)
    b = torch.empty_like(a)
    best = float("inf")
    for _ in range(5):
        t = _timed(lambda: b.copy_(a), device)
        best = min(best, t)
    return 2 * n / best


def _timed(fn, device: str) -> float:
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    if device == "cuda":
        torch.cuda.synchronize()
    _timed.last = out
    return time.perf_counter() - t0


def main() -> None:
    smoke = os.environ.get("SMOKE") == "1"
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="tiny" if smoke else "0.5b", choices=sorted(SHAPES))
    ap.add_argument("--vocab", type=int, default=300 if smoke else 50257)
    ap.add_argument("--batches", default="8,16" if smoke else "8,16,32,64,128,256")
    ap.add_argument("--prompt", type=int, default=16 if smoke else 128)
    ap.add_argument("--new", type=int, default=12 if smoke else 256)
    ap.add_argument("--modes", default="plain,static,graph,compile")
    ap.add_argument("--plain-max-batch", type=int, default=256, help="skip the slow plain and static (no graph) loops above this batch")
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() and not smoke else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    out_dir = Path(os.environ.get("OUT", "/tmp/out"))
    out_dir.mkdir(parents=True, exist_ok=True)

    from rl_core.backends import SamplingParams, WorkerContext
    from rl_core.batch import Batch
    from rl_core.config.schema import DataConfig, ModelConfig, RolloutConfig, RunConfig
    from rl_core.rollout.hf import HFRolloutEngine
    from rl_hf_decode.feature import FEATURE

    model = build_model(args.shape, args.vocab, device, dtype)
    tok = _Tok(args.vocab - 1)
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    bw = hbm_bandwidth(device)
    n = 8
    engines = {}
    for mode in args.modes.split(","):
        kw = {"plain": {"static_decode": False}, "static": {"static_decode": True, "cuda_graph": False, "compile": False},
              "graph": {"static_decode": True, "cuda_graph": True, "compile": False},
              "compile": {"static_decode": True, "cuda_graph": True, "compile": True},
              "nopack": {"static_decode": True, "cuda_graph": True, "compile": False, "pack_projections": False},
              "compile_nopack": {"static_decode": True, "cuda_graph": True, "compile": True, "pack_projections": False},
              "compile_nochunk": {"static_decode": True, "cuda_graph": True, "compile": True, "decode_chunk": 0}}[mode]
        cfg = RunConfig(model=ModelConfig(path="unused", dtype="bfloat16" if dtype == torch.bfloat16 else "float32"), data=DataConfig(max_prompt_length=args.prompt),
                        rollout=RolloutConfig(engine_kwargs=kw))
        eng = HFRolloutEngine(cfg, WorkerContext(device=device, features={"hf_decode": FEATURE}), model=model, tokenizer=tok)
        assert (eng.static is None) == (mode == "plain"), f"{mode}: the engine did not take engine_kwargs={kw}"
        engines[mode] = eng

    rows = []
    for B in [int(b) for b in args.batches.split(",")]:
        g = torch.Generator().manual_seed(B)
        ids = torch.randint(0, args.vocab - 1, (max(1, B // n), args.prompt), generator=g)
        batch = Batch({"input_ids": ids, "attention_mask": torch.ones_like(ids)}, {"uid": [str(i) for i in range(len(ids))]}, {})
        floor_step = weight_bytes / bw
        row = {"batch": B, "floor_tokens_per_s": B / floor_step}
        greedy = {}
        for mode, eng in engines.items():
            if mode in ("plain", "static") and B > args.plain_max_batch:
                continue
            try:
                # warm-up at the timed length (the same cache size: capture and compilation happen here, not in the timing)
                eng.generate(batch, SamplingParams(n=n, max_new_tokens=8 if mode == "plain" else args.new, temperature=1.0, seed=0))
                t = _timed(lambda e=eng: e.generate(batch, SamplingParams(n=n, max_new_tokens=args.new, temperature=1.0, seed=1)), device)
            except Exception as exc:  # noqa: BLE001 - report it and go on with the other modes
                row[f"{mode}_error"] = f"{type(exc).__name__}: {exc}"[:300]
                print(f"{mode} at batch {B} failed: {row[f'{mode}_error']}", flush=True)
                continue
            made = int(_timed.last.tensors["response_mask"].sum())
            row[f"{mode}_s"] = t
            row[f"{mode}_tokens_per_s"] = made / t
            row[f"{mode}_ms_per_step"] = 1000 * t / args.new
            if B == 8 or smoke:
                greedy[mode] = eng.generate(batch, SamplingParams(n=1, max_new_tokens=32, greedy=True)).tensors["responses"]
        if "plain" in greedy:
            for mode in greedy:
                if mode != "plain":
                    row[f"{mode}_greedy_match"] = float((greedy[mode] == greedy["plain"]).float().mean())
        rows.append(row)
        print(json.dumps(row), flush=True)

    info = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([("SMOKE=1 " if smoke else "") + "python"] + sys.argv),
        "device": torch.cuda.get_device_name() if device == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "shape": args.shape, "vocab": args.vocab, "prompt": args.prompt, "new_tokens": args.new, "n": n,
        "weight_bytes": weight_bytes, "hbm_bytes_per_s": bw,
    }
    (out_dir / "decode_gpu.json").write_text(json.dumps({"info": info, "rows": rows}, indent=1))
    modes = list(engines)
    lines = [f"# hf decode throughput: {info['device']}, {info['date']}", "", f"`{info['command']}`; torch {info['torch']}, transformers {info['transformers']}; "
             f"{args.shape} shape, vocab {args.vocab}, {args.prompt} prompt + {args.new} new tokens, n={n}, temperature 1; weights {weight_bytes / 2**30:.2f} GiB, "
             f"measured copy bandwidth {bw / 1e9:.0f} GB/s", "",
             "| batch | " + " | ".join(f"{m} tok/s (ms/step)" for m in modes) + " | floor tok/s | best % of floor |",
             "|---:|" + "---:|" * (len(modes) + 2)]
    for r in rows:
        cells = [f"{r[f'{m}_tokens_per_s']:,.0f} ({r[f'{m}_ms_per_step']:.2f})" if f"{m}_s" in r else "-" for m in modes]
        best = max(r.get(f"{m}_tokens_per_s", 0) for m in modes)
        lines.append(f"| {r['batch']} | " + " | ".join(cells) + f" | {r['floor_tokens_per_s']:,.0f} | {100 * best / r['floor_tokens_per_s']:.1f}% |")
    text = "\n".join(lines) + "\n"
    (out_dir / "decode_gpu.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
