"""CPU cost of one quickstart actor update, LoRA vs full fine-tune, interleaved (issue #32).

    python bench/lora_cpu/step_cost.py --reps 2 --out bench/lora_cpu/step_cost.json

The actor of ``examples/quickstart.yaml`` (SmolLM2-135M, ``builtin:smollm2``) on a synthetic step of the quickstart's
shape (8 prompts x 4 samples, prompts of 40 tokens, 16 response tokens, one optimizer step of 32 rows in micro-batches
of 16), full fine-tune and LoRA (rank 32, alpha 64, all linear layers) built side by side, one thread each, updates
alternated A B A B after one warm-up each. Reported: the process CPU seconds of each update (less sensitive than wall
time to other work on a shared machine) and the wall seconds. LoRA's update skips the base weights' gradient
products and AdamW over 135M parameters, and adds the adapters' small products.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def step_batch(vocab: int, rows: int = 32, prompt: int = 40, response: int = 16, seed: int = 0):
    import torch
    from rl_core.batch import Batch

    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(100, vocab - 100, (rows, prompt), generator=g)
    responses = torch.randint(100, vocab - 100, (rows, response), generator=g)
    mask = torch.ones(rows, prompt + response, dtype=torch.long)
    return Batch({
        "prompts": prompts, "responses": responses, "input_ids": torch.cat([prompts, responses], 1), "attention_mask": mask,
        "response_mask": torch.ones(rows, response, dtype=torch.long),
        "old_log_probs": -torch.rand(rows, response, generator=g) * 3,
        "advantages": torch.randn(rows, 1, generator=g).expand(rows, response).contiguous(),
    }, meta={"temperature": 1.0})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    import torch
    from rl_core.backends import WorkerContext
    from rl_core.config.load import load_config
    from rl_core.plan.builtin_model import ensure_builtin_model
    from rl_model_smollm2.convert import convert_smollm2
    from rl_train_fsdp.engine import build_engine

    torch.set_num_threads(1)
    ctx = WorkerContext(rank=0, world_size=1, device="cpu")
    engines = {}
    for name, extra in (("full", []), ("lora_r32", ["model.lora_rank=32", "model.lora_alpha=64", "actor.optim.lr=2e-4"])):
        cfg = load_config(str(ROOT / "examples" / "quickstart.yaml"), ["trainer.device=cpu", *extra])
        import attrs

        from rl_core.util.precision import resolve_dtype

        dtype = resolve_dtype(cfg.model.dtype, "cpu")[0]  # the quickstart's auto: what is fast on this CPU
        cfg = attrs.evolve(cfg, model=attrs.evolve(cfg.model, dtype=dtype, path=str(ensure_builtin_model(convert_smollm2, cfg.model.path.split(':', 1)[1]))))
        engines[name] = build_engine("actor", cfg, ctx)
    vocab = engines["full"].model.config.vocab_size
    batch = step_batch(vocab)
    times: dict[str, dict[str, list[float]]] = {n: {"cpu_s": [], "wall_s": []} for n in engines}
    for rep in range(args.reps + 1):
        for name, engine in engines.items():
            c, w = time.process_time(), time.perf_counter()
            engine.update(batch, on_policy=False)
            c, w = time.process_time() - c, time.perf_counter() - w
            if rep:  # rep 0: warm-up
                times[name]["cpu_s"].append(c)
                times[name]["wall_s"].append(w)
            print(f"rep {rep} {name}: cpu {c:.1f} s, wall {w:.1f} s", flush=True)
    out = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "threads": 1, "rows": len(batch), "reps": args.reps,
           "dtype": str(engines["full"].backend.compute_dtype), "times": times,
           "median_cpu_s": {n: statistics.median(t["cpu_s"]) for n, t in times.items()}}
    out["lora_over_full_cpu"] = out["median_cpu_s"]["lora_r32"] / out["median_cpu_s"]["full"]
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: out[k] for k in ("median_cpu_s", "lora_over_full_cpu")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
