"""model.compile over whole steps on a GPU (issue 56): do the rollout, reference and actor passes compile in the
first step only?

A tiny GRPO run (rl_core_testing.tiny_run: random Qwen2-shaped model, KL loss so the reference model runs, prompts of
other lengths each batch) with ``model.compile=true`` and the hf rollout's own compiled decode step (its default on
CUDA), trained for 1 and for 3 steps in this process with inductor (the real backend); torch._dynamo's counters give
the graphs compiled and the recompilations. Steps 2 and 3 should compile nothing. Writes ``$OUT/compile_recompiles.json``.

    python bench/compile_recompiles_gpu.py --device cuda        # on one GPU, ~2-4 min (inductor compiles)
    python bench/compile_recompiles_gpu.py --device cpu --backend eager   # the CPU smoke test (~1 min)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def compiled_run(tmp: Path, steps: int, device: str, backend: str, share) -> dict:
    import rl_train_fsdp.compile as fsdp_compile
    import rl_train_fsdp.engine as fsdp_engine
    import torch
    import torch._dynamo
    from rl_core.config.load import load_config
    from rl_core.plan.resolver import resolve
    from rl_core.trainer.loop import Trainer
    from rl_core_testing.tiny_run import read_metrics, tiny_rows, write_tiny_run
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    fsdp_engine.compile_decoder_layers = lambda model: fsdp_compile.compile_decoder_layers(model, backend=backend)
    cfg = write_tiny_run(tmp, steps=steps, model__compile=True, actor__use_kl_loss=True, actor__kl_loss_coef=0.01,
                         rollout__n=2, data__max_response_length=12, model__share_prompt_forward=share, trainer__device=device)
    rows = tiny_rows()
    for i, row in enumerate(rows):  # prompts of other lengths from batch to batch
        row["prompt"][0]["content"] = "0+" * (i % 5) + row["prompt"][0]["content"]
    (tmp / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    stack, problems = resolve(load_config(cfg))
    assert stack is not None, [p.render() for p in problems]
    t0 = time.perf_counter()
    trainer = Trainer(stack, progress=False)
    try:
        trainer.fit()
    finally:
        trainer.close()
    out = {
        "steps": steps, "share_prompt_forward": share, "seconds": round(time.perf_counter() - t0, 1),
        "unique_graphs": int(counters["stats"].get("unique_graphs", 0)),
        "frames_ok": int(counters["frames"].get("ok", 0)),
        "recompiles": int(sum(counters["recompiles"].values())) if "recompiles" in counters else 0,
        "step_seconds": [row.get("timing_s/step") for row in read_metrics(tmp / "out")],
    }
    torch._dynamo.reset()
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda")
    p.add_argument("--backend", default="inductor")
    args = p.parse_args()
    import torch
    import transformers

    results = {"torch": torch.__version__, "transformers": transformers.__version__, "device": args.device,
               "gpu": torch.cuda.get_device_name(0) if args.device == "cuda" else None, "backend": args.backend, "runs": []}
    for share in (None, True):
        for steps in (1, 3):
            with tempfile.TemporaryDirectory() as tmp:
                run = compiled_run(Path(tmp), steps, args.device, args.backend, share)
            results["runs"].append(run)
            print(json.dumps(run), flush=True)
    by = {(r["share_prompt_forward"], r["steps"]): r for r in results["runs"]}
    results["steps_2_3_compile_nothing"] = all(by[(s, 3)]["unique_graphs"] == by[(s, 1)]["unique_graphs"] and by[(s, 3)]["recompiles"] == 0
                                               for s in (None, True))
    out = Path(os.environ.get("OUT", "."))
    out.mkdir(parents=True, exist_ok=True)
    (out / "compile_recompiles.json").write_text(json.dumps(results, indent=1) + "\n")
    print("steps 2 and 3 compile nothing:", results["steps_2_3_compile_nothing"])
    return 0 if results["steps_2_3_compile_nothing"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
