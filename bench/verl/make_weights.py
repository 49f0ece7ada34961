"""A loadable model folder for verl: the reference model folder (config + tokenizer, no weights) with random weights.

    python bench/verl/make_weights.py --src .gpu/qwen05b-gpt2 --out /tmp/verl_models/ref [--shape 1.5b] [--seed 0]

rl-core builds its random weights itself (``model.random_init: true``); verl's FSDP actor loads weights with
``from_pretrained``, so they are written here, on the GPU machine (0.8 GB for the 0.5B shape, 3.1 GB for 1.5B:
too large to carry). Both sides then run the same architecture, tokenizer and lengths; the weights differ only in
their random draw, which changes nothing a throughput measurement sees (a random model runs every response to its
length limit either way). ``--shape`` rewrites the config with one of bench/reference/make_model.py's shapes.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", required=True, help="model folder from bench/reference/make_model.py")
    ap.add_argument("--out", required=True)
    ap.add_argument("--shape", default=None, help="0.5b or 1.5b (default: the folder's own config)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    src, out = Path(args.src), Path(args.out)
    if not (src / "config.json").is_file():
        sys.exit(f"{src}: no config.json; build the folder with bench/reference/make_model.py")
    out.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file():
            shutil.copy2(f, out / f.name)
    if args.shape:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reference"))
        from make_model import SHAPES

        if args.shape not in SHAPES:
            sys.exit(f"--shape {args.shape}: not one of {sorted(SHAPES)}")
        cfg = json.loads((out / "config.json").read_text())
        cfg.update(SHAPES[args.shape])
        (out / "config.json").write_text(json.dumps(cfg, indent=2))
    t0 = time.perf_counter()
    torch.manual_seed(args.seed)
    config = AutoConfig.from_pretrained(out)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    n = sum(p.numel() for p in model.parameters())
    print(f"wrote {out}: {n / 1e6:.0f}M parameters, bf16, {time.perf_counter() - t0:.1f} s on {device}")


if __name__ == "__main__":
    main()
