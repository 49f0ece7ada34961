"""verl's offload switches on one GPU (issue #37): device memory between phases, peak memory of the update, step time,
and the results against the same engine without them. Until this runs, they are tested on the CPU only (where every
copy is host to host: plugins/verl/tests/test_verl_offload.py, plugins/*/tests/test_*offload*.py).

    python bench/verl_scripts/offload_gpu.py --out $OUT/offload                 # one GPU, Qwen2.5-0.5B shape (~3-5 min)
    python bench/verl_scripts/offload_gpu.py --tiny --out /tmp/offload_tiny     # CPU smoke (what this file was run with)

Runs, one engine at a time (the actor role, as the trainer drives it: ``RoleEngine.compute_log_prob`` then
``update`` x ``--updates``), each against its backend's plain run:

- fsdp: ``plain``; ``offload_policy`` (verl's FSDP2 switch; on one device = param_offload + optimizer_offload);
  ``activation_offload`` (``model.enable_activation_offload``).
- megatron (when megatron-core imports; see bench/megatron_gpu.py for how the GPU machine gets it): ``plain``;
  ``param_grad_cpu_optim_recompute`` (``train.options``: param_offload, grad_offload, optimizer_cpu_offload,
  transformer_config recompute full/uniform/1); ``optimizer_offload``.

Per run: ``resting_gb`` (torch.cuda.memory_allocated between phases, after the last update: the parameters / AdamW
state left on the device), ``update_peak_gb`` (max_memory_allocated during the updates), ``update_s`` (median),
``metrics_max_rel_diff`` and ``weights_max_abs_diff`` against the plain run of the same backend (the offload paths
should give the same update; bf16 autocast kernels may differ in the last bits if the placement changes the
algorithm), and the engine's offload bookkeeping (megatron ``offload_log`` tail; fsdp activation counters).
Writes ``OUT/results.json`` and ``OUT/README.md``. Needs: torch with CUDA, transformers, rl-core + rl-train-fsdp
(+ rl-train-megatron and megatron-core for the megatron rows); the model folder ``.gpu/qwen05b-gpt2`` (config +
tokenizer; random weights built at run time) or ``--model``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import attrs
import torch
from rl_core.backends import WorkerContext
from rl_core.batch import Batch
from rl_core.config.sections import evolve_key
from rl_core_testing.train_conformance import default_config

ROOT = Path(__file__).resolve().parents[2]
GB = 2**30


def step_batch(rows: int, prompt: int, response: int, vocab: int, seed: int = 0) -> Batch:
    """A synthetic step: random tokens, responses of different lengths, random advantages (old log-probs filled later)."""
    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(3, vocab - 1, (rows, prompt), generator=g)
    responses = torch.randint(3, vocab - 1, (rows, response), generator=g)
    response_mask = torch.zeros(rows, response, dtype=torch.long)
    for i in range(rows):
        response_mask[i, : response - (i * response) // (2 * rows)] = 1
    attention_mask = torch.cat([torch.ones(rows, prompt, dtype=torch.long), response_mask], 1)
    positions = torch.arange(prompt + response).expand(rows, -1).clone()
    batch = Batch({"prompts": prompts, "responses": responses, "input_ids": torch.cat([prompts, responses], 1),
                   "attention_mask": attention_mask, "position_ids": positions, "response_mask": response_mask},
                  {"uid": [f"u{i // 2}" for i in range(rows)]}, {"temperature": 1.0})
    batch["advantages"] = torch.randn(rows, response, generator=g) * response_mask
    return batch


def config(model: str, device: str, backend: str, rows: int, options: dict, *, random_init: bool, **fsdp):
    cfg = default_config(model)
    a = cfg.actor
    actor = attrs.evolve(a, ppo_mini_batch_size=rows // 2, ppo_micro_batch_size_per_gpu=max(1, rows // 4), log_prob_micro_batch_size_per_gpu=rows,
                         ppo_epochs=1, use_kl_loss=False, entropy_coeff=0.0,
                         optim=attrs.evolve(a.optim, lr=1e-5, lr_warmup_steps=0, lr_scheduler="constant"))
    actor = evolve_key(actor, "fsdp_config", attrs.evolve(a.fsdp_config, **fsdp))  # rl-train-fsdp's section
    return attrs.evolve(cfg, actor=actor, data=attrs.evolve(cfg.data, train_batch_size=rows // 2),
                        model=attrs.evolve(cfg.model, random_init=random_init, dtype="bfloat16" if device == "cuda" else "float32"),
                        critic=attrs.evolve(cfg.critic, enable=False), train=attrs.evolve(cfg.train, name=backend, options=options),
                        trainer=attrs.evolve(cfg.trainer, device=device))


def run(name: str, cfg, batch: Batch, device: str, updates: int, build) -> dict:
    cuda = device == "cuda"
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    engine = build("actor", cfg, WorkerContext(device=device))
    b = engine.backend
    try:
        lp = engine.compute_log_prob(batch, temperature=1.0)["log_probs"]
        batch["old_log_probs"] = lp.detach().cpu() * batch["response_mask"]
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        metrics, times = [], []
        for _ in range(updates):
            t0 = time.perf_counter()
            metrics.append(engine.update(batch))
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        out = {"name": name, "update_s": statistics.median(times), "metrics": metrics,
               "resting_gb": torch.cuda.memory_allocated() / GB if cuda else None,
               "update_peak_gb": torch.cuda.max_memory_allocated() / GB if cuda else None,
               "weights": {n: t.detach().to("cpu", copy=True) for n, t in engine.named_weights()}}
        if getattr(b, "offload_log", None):
            out["offload_log_tail"] = b.offload_log[-6:]
        hooks = getattr(b, "last_activations", None)
        if hooks is not None:
            out["activations"] = {"packed": hooks.packed, "unpacked": hooks.unpacked, "packed_gb": hooks.packed_bytes / GB}
        return out
    finally:
        engine.shutdown()
        del engine, b
        if cuda:
            torch.cuda.empty_cache()


def compare(row: dict, plain: dict) -> dict:
    rel = 0.0
    for m, p in zip(row["metrics"], plain["metrics"]):
        for k, v in p.items():
            if isinstance(v, (int, float)) and isinstance(m.get(k), (int, float)) and "time" not in k and "timing" not in k and "memory" not in k:
                rel = max(rel, abs(m[k] - v) / max(abs(v), 1e-12))
    w = max((float((row["weights"][n].float() - t.float()).abs().max()) for n, t in plain["weights"].items()), default=0.0)
    return {"metrics_max_rel_diff": rel, "weights_max_abs_diff": w}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default=str(ROOT / ".gpu" / "qwen05b-gpt2"))
    ap.add_argument("--tiny", action="store_true", help="a 2-layer model on the CPU (smoke)")
    ap.add_argument("--updates", type=int, default=3)
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--response", type=int, default=1024)
    ap.add_argument("--backends", default="fsdp,megatron")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = "cpu" if args.tiny else "cuda"
    if args.tiny:
        from rl_core_testing.tiny_model import make_tiny_model_dir

        model, random_init = str(make_tiny_model_dir(out / "tiny_model", "qwen2", hidden=32, layers=2)), False
        args.rows, args.prompt, args.response, args.updates = 4, 8, 16, 2
    else:
        model, random_init = args.model, True
    vocab = json.loads((Path(model) / "config.json").read_text())["vocab_size"]
    batch = step_batch(args.rows, args.prompt, args.response, vocab)
    plans = {
        "fsdp": [("plain", {}, {}), ("offload_policy", {}, {"offload_policy": True}), ("activation_offload", {}, {"_activation": True})],
        "megatron": [("plain", {}, {}),
                     ("param_grad_cpu_optim_recompute", {"param_offload": True, "grad_offload": True, "optimizer_cpu_offload": True,
                                                         "transformer_config": {"recompute_granularity": "full", "recompute_method": "uniform",
                                                                                "recompute_num_layers": 1}}, {}),
                     ("optimizer_offload", {"optimizer_offload": True}, {})],
    }
    rows, skipped = [], {}
    for backend in args.backends.split(","):
        try:
            build = __import__(f"rl_train_{backend}.engine", fromlist=["build_engine"]).build_engine
        except ImportError as exc:
            skipped[backend] = f"{type(exc).__name__}: {exc}"
            continue
        plain = None
        for name, options, fsdp in plans[backend]:
            act = fsdp.pop("_activation", False)
            cfg = config(model, device, backend, args.rows, options, random_init=random_init, **fsdp)
            if act:
                cfg = attrs.evolve(cfg, model=attrs.evolve(cfg.model, enable_activation_offload=True))
            row = run(f"{backend}/{name}", cfg, batch, device, args.updates, build)
            plain = plain or row
            row.update(compare(row, plain))
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k not in ("weights", "metrics")}), flush=True)
    for r in rows:
        r.pop("weights")
    (out / "results.json").write_text(json.dumps({"device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "args": vars(args),
                                                  "skipped": skipped, "rows": rows}, indent=1, default=str))
    lines = ["# verl's offload switches on one device (bench/verl_scripts/offload_gpu.py)", "",
             f"device: {torch.cuda.get_device_name() if device == 'cuda' else 'cpu (smoke)'}; {args.rows} rows x ({args.prompt} + {args.response}) "
             f"tokens, {args.updates} updates; model {model}", "",
             "| run | resting GB | update peak GB | update s | metrics max rel diff | weights max abs diff |", "|---|---|---|---|---|---|"]
    fmt = lambda v: "-" if v is None else f"{v:.3g}"  # noqa: E731
    lines += [f"| {r['name']} | {fmt(r['resting_gb'])} | {fmt(r['update_peak_gb'])} | {r['update_s']:.2f} | {r['metrics_max_rel_diff']:.2g} | "
              f"{r['weights_max_abs_diff']:.2g} |" for r in rows]
    lines += [""] + [f"- {k} skipped: {v}" for k, v in skipped.items()]
    (out / "README.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
