"""LoRA weight sync to the colocated hf rollout, side by side in one process (issue #32): the merged sync (every
weight, ``W + s * B @ A`` in float32 per weight, sent and copied every step: ``rollout.lora_sync=merged``, what
the 7B anchor measured 2.2-2.9 s for) vs the in-place adapter sync (``auto``: the frozen base once, then one
GEMM per targeted weight into the rollout's own weights, ``rl_lora.merge``). Both verified as the
Worker verifies them (``rl_core.weight_sync_check``); the verification's share is timed apart.

    python bench/lora_sync.py --shape 0.5b --layers 6 --out bench/lora_sync/cpu     # CPU (about 2 min here)
    python bench/lora_sync.py --shape 7b --device cuda --out $OUT/lora_sync           # one GPU (2-4 min, ~45 GiB)
    python bench/lora_sync.py --tiny --out /tmp/lora_sync_tiny                        # smoke

One actor (the fsdp backend's LoRA actor, r=32 alpha=64 all-linear, random weights in the compute dtype, the
adapters moved off peft's zero start) and two hf rollouts (one per mode). Between syncs the adapters move (as an
update would). On a GPU each rollout is put to sleep before its sync, as the Worker does with
``rollout.enable_sleep`` (the merged engine copies its weights to the host and back; the adapter engine frees and
rebuilds them), unless ``--no-sleep``. Writes ``OUT/results.json`` and ``OUT/README.md``: seconds per sync (median of ``--syncs``), the
ratio, and the largest difference between the two rollouts' weights (one rounding step of the dtype at most).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import attrs
import torch

SHAPES = {
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2),
    "0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2),
    "7b": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4),
}


def make_model(out: Path, shape: dict) -> Path:
    from rl_core_testing.tiny_model import make_tiny_model_dir

    make_tiny_model_dir(out, "qwen2")  # its tokenizer; the weights are drawn at load (model.random_init)
    cfg = json.loads((out / "config.json").read_text())
    cfg.pop("layer_types", None)  # per-layer attention kinds of the tiny config: rebuilt from the new depth
    cfg.update(shape, tie_word_embeddings=False)
    (out / "config.json").write_text(json.dumps(cfg, indent=1))
    for f in out.glob("*.safetensors"):
        f.unlink()
    return out


def _sync(fn, device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


@torch.no_grad()
def _move_adapters(actor, step: int) -> None:
    g = torch.Generator().manual_seed(step)
    for name, p in actor.model.named_parameters():
        if p.requires_grad:
            p.add_(torch.randn(p.shape, generator=g).to(p.device) * 1e-2)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="0.5b")
    ap.add_argument("--layers", type=int, default=None, help="fewer decoder layers than the shape's (CPU time)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--syncs", type=int, default=3)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--work", type=Path, default=Path("/tmp/lora_sync"))
    ap.add_argument("--tiny", action="store_true", help="smoke: the tiny shape, 2 syncs")
    ap.add_argument("--sleep", action=argparse.BooleanOptionalAction, default=True,
                    help="on a GPU, put each rollout to sleep before its sync, as the Worker does (the sync wakes it up)")
    args = ap.parse_args(argv)
    if args.tiny:
        args.shape, args.syncs = "tiny", 2
    shape = dict(SHAPES[args.shape])
    if args.layers:
        shape["num_hidden_layers"] = args.layers
    args.out.mkdir(parents=True, exist_ok=True)
    model_dir = make_model(args.work / f"model-{args.shape}", shape)

    from rl_core.backends import WorkerContext
    from rl_core.plan.features import load_features
    from rl_core.plugins import get_registry
    from rl_core.rollout.hf import HFRolloutEngine
    from rl_core.weight_sync_check import load_verified
    from rl_lora.sync import load_adapter_verified
    from rl_core_testing.train_conformance import default_config
    from rl_train_fsdp.engine import build_engine

    # the hf rollout gets rl-lora's in-place merge from the plan's features (rollout_adapters), as a plan's worker hands them
    ctx = WorkerContext(rank=0, world_size=1, device=args.device, features=load_features(get_registry(), []))
    device = ctx.torch_device
    cfg = default_config(model_dir)
    cfg = attrs.evolve(cfg, model=attrs.evolve(cfg.model, lora_rank=32, lora_alpha=64.0, dtype=args.dtype, random_init=True),
                       critic=attrs.evolve(cfg.critic, enable=False), trainer=attrs.evolve(cfg.trainer, device=device.type))  # random weights drawn on the device
    merged_cfg = attrs.evolve(cfg, rollout=attrs.evolve(cfg.rollout, lora_sync="merged"))
    actor = build_engine("actor", cfg, ctx)
    _move_adapters(actor, 0)
    sleep = args.sleep and device.type == "cuda"  # the Worker puts the rollout to sleep after generating (rollout.enable_sleep)
    if sleep:
        cfg = attrs.evolve(cfg, rollout=attrs.evolve(cfg.rollout, engine_kwargs={"sleep_threshold": 0}))  # always frees, as a 7B rollout does
        merged_cfg = attrs.evolve(merged_cfg, rollout=attrs.evolve(merged_cfg.rollout, engine_kwargs={"sleep_threshold": 0}))
    rollout_m, rollout_a = HFRolloutEngine(merged_cfg, ctx), HFRolloutEngine(cfg, ctx)
    load_verified(rollout_m, actor.named_weights(), None, engine_name="hf", version=0)
    base_s = _sync(lambda: load_verified(rollout_a, actor.named_base_weights(), None, engine_name="hf", version=0, load=rollout_a.load_base_weights), device)
    times: dict[str, list[float]] = {k: [] for k in ("merged", "adapter", "merged_unverified", "adapter_unverified", "merged_sleep", "adapter_sleep")}
    for i in range(args.syncs):
        _move_adapters(actor, i + 1)
        for mode, engine, verified, plain in (
            ("merged", rollout_m, lambda: load_verified(rollout_m, actor.named_weights(), actor.sample_weights, engine_name="hf", version=i),
             lambda: rollout_m.load_weights(actor.named_weights())),
            ("adapter", rollout_a, lambda: load_adapter_verified(rollout_a, *actor.lora_adapter(), actor.sample_weights, engine_name="hf", version=i),
             lambda: rollout_a.load_adapter(*actor.lora_adapter(), i)),
        ):
            if sleep:  # the sync then wakes the engine up first (sleep timed apart: it is part of the generation stage)
                times[f"{mode}_sleep"].append(_sync(engine.sleep, device))
            times[mode].append(_sync(verified, device))
            if sleep:
                engine.sleep()
            times[f"{mode}_unverified"].append(_sync(plain, device))
    held_m, held_a = rollout_m.model.state_dict(), rollout_a.model.state_dict()
    worst = max(float((held_m[k].float() - held_a[k].float()).abs().max() / held_m[k].float().abs().max().clamp_min(1e-12)) for k in held_m)
    med = {k: statistics.median(v) if v else None for k, v in times.items()}
    params = sum(p.numel() for p in rollout_a.model.parameters())
    borrowed = sum(1 for k in rollout_a.lora.bases if k not in rollout_a.lora.owned)
    res = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "argv": argv if argv is not None else sys.argv[1:],
           "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu", "torch_threads": torch.get_num_threads(),
           "shape": shape, "params": params, "dtype": args.dtype, "syncs": args.syncs, "base_sync_once_s": base_s,
           "sync_s": times, "median_s": med, "ratio_adapter_over_merged": med["adapter"] / med["merged"],
           "max_rel_diff_between_rollouts": worst, "bases_borrowed_from_trainer": borrowed, "bases_copied": len(rollout_a.lora.owned)}
    (args.out / "results.json").write_text(json.dumps(res, indent=1))
    lines = [f"# LoRA sync to the colocated hf rollout: merged vs in-place adapter merge ({args.shape} shape, "
             f"{shape['num_hidden_layers']} layers, {params / 1e6:.0f}M parameters, {args.dtype}, {res['device']})", "",
             f"{res['when']}; `python bench/lora_sync.py {' '.join(res['argv'])}`", "",
             "| sync | median s (verified) | median s (load only) |", "|---|---:|---:|",
             f"| merged (every weight, every sync) | {med['merged']:.3f} | {med['merged_unverified']:.3f} |",
             f"| adapter, merged in place | {med['adapter']:.3f} | {med['adapter_unverified']:.3f} |", "",
             *([f"with sleep before each sync (the sync includes the wake-up); the sleep itself: merged {med['merged_sleep']:.3f} s, "
                f"adapter {med['adapter_sleep']:.3f} s", ""] if sleep else []),
             f"adapter / merged (verified): **{res['ratio_adapter_over_merged']:.3f}**; the base sent once at start-up: {base_s:.3f} s; "
             f"bases borrowed from the trainer (no copy): {borrowed}, copied: {len(rollout_a.lora.owned)}; "
             f"largest difference between the two rollouts' weights, relative to the tensor's largest element: {worst:.2e} (the adapters rounded to the rollout dtype before the GEMM, as the trainer's forward rounds them)"]
    (args.out / "README.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
