"""Train-side forward cost with and without the shared-prompt forward and padding-column trimming.

Times ``rl_core.modeling.forward_response`` the way the FSDP engine calls it
on one CPU rank: a no-grad pass (old log-probs) and a forward + backward
(the update), bf16 autocast over fp32 weights, 16-sequence micro-batches,
for the quickstart's shapes (8 prompts x 4 samples, ~29 prompt tokens,
responses padded to 24). Every variant runs in the same process, alternated,
so the ratios compare like with like.

    python bench/shared_prompt_cpu.py --model DIR --out bench/results/shared_prompt_cpu.md
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from rl_core.modeling import forward_response, load_causal_lm, position_ids_from_mask


def make_batch(prompts: int, n: int, prompt_len: int, response_len: int, longest: int, vocab: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    p = torch.randint(100, vocab, (prompts, prompt_len), generator=g)
    rows = prompts * n
    responses = torch.randint(100, vocab, (rows, response_len), generator=g)
    lengths = torch.randint(1, longest + 1, (rows,), generator=g)
    lengths[0] = longest
    rmask = (torch.arange(response_len)[None] < lengths[:, None]).long()
    ids = torch.cat([p.repeat_interleave(n, 0), responses], 1)
    mask = torch.cat([torch.ones(rows, prompt_len, dtype=torch.long), rmask], 1)
    return ids, mask, position_ids_from_mask(mask), responses, rmask


def timed(model, batch, micro: int, share: bool, trim: bool, grad: bool) -> float:
    ids, mask, pos, responses, rmask = batch
    if not trim:  # defeat trimming: mark the padding columns as attended (values unused)
        mask = mask.clone()
        mask[:, -responses.shape[1] :] = 1
    start = time.perf_counter()
    for s in range(0, ids.shape[0], micro):
        sl = slice(s, s + micro)
        with torch.autocast("cpu", dtype=torch.bfloat16), torch.set_grad_enabled(grad):
            lp, _ = forward_response(model, ids[sl], mask[sl], pos[sl], responses[sl], with_entropy=not grad, share_prompts=share)
            if grad:
                (lp * rmask[sl]).sum().backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="model folder (e.g. from `rlcore model smollm2 --out DIR`)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    model = load_causal_lm(args.model, dtype=torch.float32)
    model.train()
    vocab = model.config.vocab_size
    cases = {"early (longest response 24)": 24, "late (longest response 13)": 13}
    variants = [("plain", False, False), ("trim", False, True), ("share", True, False), ("share + trim", True, True)]
    lines = [
        "| responses | pass | " + " | ".join(v[0] for v in variants) + " |",
        "|---|---|" + "---:|" * len(variants),
    ]
    for label, longest in cases.items():
        batch = make_batch(8, 4, 29, 24, longest, vocab)
        for grad, pass_name in ((False, "no-grad (old log-prob)"), (True, "forward + backward (update)")):
            times = {v[0]: [] for v in variants}
            timed(model, batch, 16, False, False, grad)  # warm-up
            for _ in range(args.repeats):
                for name, share, trim in variants:
                    times[name].append(timed(model, batch, 16, share, trim, grad))
            base = statistics.median(times["plain"])
            cells = [f"{statistics.median(t):.2f} s ({base / statistics.median(t):.2f}x)" for t in times.values()]
            lines.append(f"| {label} | {pass_name} | " + " | ".join(cells) + " |")
            print(lines[-1], flush=True)
    text = (
        f"Median of {args.repeats} alternated repeats, 32 sequences (8 prompts x 4) in micro-batches of 16, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; (Nx) = speed-up over plain.\n\n" + "\n".join(lines) + "\n"
    )
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
