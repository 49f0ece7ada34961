"""Does rl-core's hf rollout sample what HF ``generate`` (TRL's sampler) samples? (issue 18)

Both sample 8 responses for each of the 100 held-out prompts of bench/vs_trl_cpu.py from the untrained
SmolLM2-135M-Instruct (fp32, temperature 1, no top-k / top-p, 24 new tokens), and the same scorer grades
them. Equal distributions give equal means up to sampling noise (the standard errors printed; samples of
one prompt are correlated, so the error is taken over prompt means). Writes ``--out`` as JSON.

    python bench/vs_trl_sampling.py --work /tmp/vs_trl_cpu --out bench/results/vs_trl_cpu/sampling.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
N, NEW_TOKENS, MODEL = 8, 24, Path("~/.cache/rl-core/models/smollm2").expanduser()


def summary(scores: list[list[float]], lengths: list[list[int]]) -> dict:
    per_prompt = [statistics.mean(s) for s in scores]
    flat_len = [x for row in lengths for x in row]
    return {
        "reward_mean": statistics.mean(per_prompt),
        "reward_se": statistics.stdev(per_prompt) / math.sqrt(len(per_prompt)),
        "length_mean": statistics.mean(flat_len),
        "length_se": statistics.stdev([statistics.mean(r) for r in lengths]) / math.sqrt(len(lengths)),
        "stopped_fraction": sum(x < NEW_TOKENS for x in flat_len) / len(flat_len),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=Path("/tmp/vs_trl_cpu"))
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()

    import torch
    from rl_core.backends import SamplingParams, WorkerContext
    from rl_core.config.load import load_config
    from rl_core.data.dataset import collate, load_prompt_dataset
    from rl_core.rollout.hf import HFRolloutEngine
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    sys.path.insert(0, str(ROOT / "plugins" / "reward_rule"))
    from rl_reward_rule.gsm8k import score

    val = args.work / "data" / "val.jsonl"
    cfg = load_config(ROOT / "examples" / "quickstart.yaml", [
        f"model.path={MODEL}", "model.dtype=float32", "data.train_generator=null", "data.val_generator=null",
        f"data.train_files=[{val}]", f"data.val_files=[{val}]", f"data.max_response_length={NEW_TOKENS}",
    ])
    tok = AutoTokenizer.from_pretrained(MODEL)
    ds = load_prompt_dataset(cfg.data, tok, "val")
    golds = [it["ground_truth"] for it in ds.items]
    out: dict = {"n": N, "prompts": len(ds), "new_tokens": NEW_TOKENS}

    # rl-core: the hf rollout as the trainer builds it (eager attention on CPU, inverse-CDF sampling)
    t = time.perf_counter()
    engine = HFRolloutEngine(cfg, WorkerContext(seed=0))
    scores, lengths = [], []
    for start in range(0, len(ds), 20):
        items = ds.items[start : start + 20]
        batch = collate(items, engine.pad_id, [f"u{start + i}" for i in range(len(items))])
        got = engine.generate(batch, SamplingParams(n=N, temperature=1.0, max_new_tokens=NEW_TOKENS, seed=1000 + start))
        lens = got["response_mask"].sum(-1).tolist()
        texts = [tok.decode(r[: int(n)].tolist(), skip_special_tokens=True) for r, n in zip(got["responses"], lens)]
        for i in range(len(items)):
            rows = range(i * N, (i + 1) * N)
            scores.append([score(solution_str=texts[j], ground_truth=golds[start + i], method="flexible")["score"] for j in rows])
            lengths.append([int(lens[j]) for j in rows])
    out["rl-core hf rollout"] = summary(scores, lengths) | {"seconds": time.perf_counter() - t}
    del engine

    # HF generate, as TRL calls it (do_sample, temperature 1, top_k 0, top_p 1)
    t = time.perf_counter()
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32).eval()
    model.generation_config = GenerationConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=NEW_TOKENS,
                                               eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    tok.padding_side = "left"
    scores, lengths = [], []
    with torch.no_grad():
        for start in range(0, len(ds), 20):
            texts_in = [it["prompt_text"] for it in ds.items[start : start + 20]]
            enc = tok(texts_in, return_tensors="pt", padding=True, add_special_tokens=False)
            enc = {k: v.repeat_interleave(N, 0) for k, v in enc.items()}
            gen = model.generate(**enc)[:, enc["input_ids"].shape[1] :]
            for i in range(len(texts_in)):
                row_s, row_l = [], []
                for r in gen[i * N : (i + 1) * N]:
                    ids = r.tolist()
                    n = ids.index(tok.eos_token_id) + 1 if tok.eos_token_id in ids else len(ids)
                    row_l.append(n)
                    row_s.append(score(solution_str=tok.decode(ids[:n], skip_special_tokens=True), ground_truth=golds[start + i], method="flexible")["score"])
                scores.append(row_s)
                lengths.append(row_l)
    out["HF generate"] = summary(scores, lengths) | {"seconds": time.perf_counter() - t}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
