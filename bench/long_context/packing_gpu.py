"""Packed vs padded actor update on one GPU, on a batch whose responses differ a lot in length (issue #33).

The GPU counterpart of ``packing_cpu.py``: the fsdp backend's actor (one rank, ``actor.use_remove_padding`` true /
false) on the 0.5B reference shape (``.gpu/qwen05b-gpt2``: Qwen2.5-0.5B's body, GPT-2 vocabulary, random bf16
weights, gradient checkpointing), the same update (one mini-batch of 64 sequences, micro-batches of 8, GRPO loss
with KL) alternated in one process, after one warm-up update each. The batch is what a reasoning run's rollout looks
like, unlike ``gpu_long.py``'s random-weight rows (where every response runs to the limit and packing only drops the
prompts' padding): prompts of 40..128 tokens, responses spread from 64 to 4,096 tokens (a seeded draw, mean ~1.5k).
Reports the update time of each layout, the ratio, tokens computed and the peak memory of each.

    python bench/long_context/packing_gpu.py --out $OUT            # one H100: ~2 min with start-up
    python bench/long_context/packing_gpu.py --tiny --out /tmp/pg  # CPU smoke run (a tiny model, seconds)

Needs the GPU image plus ``.gpu/whl`` and ``.gpu/qwen05b-gpt2`` (``--model``). Writes ``packing_gpu.md`` and
``packing_gpu.json`` under ``--out`` (a folder).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]


def lengths(rows: int, max_prompt: int, max_response: int, seed: int = 0) -> tuple[list[int], list[int]]:
    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(max(1, max_prompt * 5 // 16), max_prompt + 1, (rows,), generator=g)
    # log-uniform responses: many short, a few at the limit (a reasoning run's spread)
    lo, hi = torch.log(torch.tensor(float(max(2, max_response // 64)))), torch.log(torch.tensor(float(max_response)))
    responses = torch.exp(lo + (hi - lo) * torch.rand(rows, generator=g)).round().long().clamp(1, max_response)
    responses[0] = max_response  # one sequence at the limit: the padded width
    return prompts.tolist(), responses.tolist()


def engine(model_dir: str, *, rows: int, micro: int, packed: bool, max_prompt: int, max_response: int, device: str, dtype: str, seed: int):
    from rl_core.backends import WorkerContext
    from rl_core.config.schema import ActorConfig, DataConfig, ModelConfig, OptimConfig, RolloutConfig, RunConfig, TrainerConfig
    from rl_train_fsdp.engine import build_engine

    cfg = RunConfig(
        model=ModelConfig(path=model_dir, random_init=True, dtype=dtype, enable_gradient_checkpointing=device == "cuda",
                          override_config={"max_position_embeddings": max(8192, max_prompt + max_response)}),  # the folder says 4096
        data=DataConfig(train_batch_size=rows, max_prompt_length=max_prompt, max_response_length=max_response),
        rollout=RolloutConfig(n=1),
        actor=ActorConfig(ppo_mini_batch_size=rows, ppo_micro_batch_size_per_gpu=micro, ppo_epochs=1, use_kl_loss=True, entropy_coeff=0.0,
                          use_remove_padding=packed, optim=OptimConfig(lr=1e-6)),
        trainer=TrainerConfig(device=device, seed=seed),
    )
    return build_engine("actor", cfg, WorkerContext(device=device, seed=seed))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="a folder: packing_gpu.md and packing_gpu.json")
    ap.add_argument("--tiny", action="store_true", help="CPU smoke run: a tiny model and short sequences")
    ap.add_argument("--model", default=str(REPO / ".gpu" / "qwen05b-gpt2"))
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--micro", type=int, default=8)
    ap.add_argument("--max-prompt", type=int, default=128)
    ap.add_argument("--max-response", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = "cpu" if args.tiny or not torch.cuda.is_available() else "cuda"
    if args.tiny:
        args.rows, args.micro, args.max_prompt, args.max_response, args.repeats = 8, 4, 16, 96, 1
    tmp = tempfile.TemporaryDirectory()
    if args.tiny:
        from rl_core_testing.tiny_model import make_tiny_model_dir

        model_dir = str(make_tiny_model_dir(Path(tmp.name) / "model", "qwen2"))
    else:
        model_dir = args.model
        if not (Path(model_dir) / "config.json").exists():
            raise SystemExit(f"{model_dir}/config.json is missing: carry .gpu/qwen05b-gpt2 (or pass --model)")
    vocab = json.loads((Path(model_dir) / "config.json").read_text())["vocab_size"]
    from rl_core_testing.mixed_lengths import mixed_length_batch

    prompts, responses = lengths(args.rows, args.max_prompt, args.max_response)
    batch = mixed_length_batch(prompts, responses, vocab=min(vocab, 50000) - 3)
    dtype = "float32" if device == "cpu" else "bfloat16"
    engines = {name: engine(model_dir, rows=args.rows, micro=args.micro, packed=name == "packed", max_prompt=args.max_prompt,
                            max_response=args.max_response, device=device, dtype=dtype, seed=0) for name in ("padded", "packed")}
    assert engines["packed"].backend.packed and not engines["padded"].backend.packed, "packing did not take effect as asked"
    times: dict[str, list[float]] = {n: [] for n in engines}
    peaks: dict[str, float] = {n: 0.0 for n in engines}
    losses: dict[str, float] = {}
    for _ in range(args.repeats + 1):  # the first round warms up (allocations, kernels) and is dropped
        for name, eng in engines.items():
            if device == "cuda":
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            start = time.perf_counter()
            res = eng.update(batch)
            if device == "cuda":
                torch.cuda.synchronize()
                peaks[name] = max(peaks[name], torch.cuda.max_memory_allocated() / 2**30)
            times[name].append(time.perf_counter() - start)
            losses.setdefault(name, float(res["loss"]))
    med = {n: statistics.median(t[1:]) for n, t in times.items()}
    real = int(batch.tensors["attention_mask"].sum())
    padded = batch.tensors["attention_mask"].numel()
    dev_name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    info = {"device": dev_name, "torch": torch.__version__, "rows": args.rows, "micro": args.micro, "prompts": prompts, "responses": responses,
            "tokens_real": real, "tokens_padded": padded, "update_s": med, "all_s": times, "peak_gib": peaks, "first_loss": losses,
            "command": "python bench/long_context/packing_gpu.py " + " ".join(sys.argv[1:])}
    (out / "packing_gpu.json").write_text(json.dumps(info, indent=1))
    lines = [
        f"# Packed vs padded actor update ({dev_name})", "",
        f"`{info['command']}`; torch {torch.__version__}; {Path(model_dir).name}, random {dtype} weights"
        f"{', gradient checkpointing' if device == 'cuda' else ''}; {args.rows} sequences, micro-batches of {args.micro}; prompts "
        f"{min(prompts)}..{max(prompts)} tokens, responses {min(responses)}..{max(responses)} (mean {statistics.mean(responses):.0f}); "
        f"median of {args.repeats} updates each, alternated, after one warm-up.", "",
        "| layout | update s | relative | tokens computed | peak GiB |", "|---|---|---|---|---|",
        f"| padded | {med['padded']:.2f} | 1.00 | {padded:,} | {peaks['padded']:.1f} |",
        f"| packed | {med['packed']:.2f} | {med['packed'] / med['padded']:.2f} | {real:,} | {peaks['packed']:.1f} |", "",
        f"padded / packed: {med['padded'] / med['packed']:.2f}x; first-update loss padded {losses['padded']:.6f}, packed {losses['packed']:.6f}",
    ]
    text = "\n".join(lines) + "\n"
    (out / "packing_gpu.md").write_text(text)
    print(text)
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
