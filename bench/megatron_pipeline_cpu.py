"""PP 2 update time on 2 CPU processes (gloo): megatron-core's 1F1B schedule (rl_train_megatron.core_pipeline) vs the
reference loop (rl_train_megatron.pipeline, one micro-batch at a time through the stages), same workload and results.

    .venv/bin/python bench/megatron_pipeline_cpu.py --out bench/results/megatron_pipeline_cpu
    python bench/megatron_pipeline_cpu.py --device cuda --hidden 1536 --layers 8 --rows 64 --micro 4 --out $OUT   # 2 GPUs

A tiny random Qwen3 (hidden --hidden, --layers layers, one stage each half), one mini-batch of --rows rows in
micro-batches of --micro rows, --repeats timed actor updates after one warm-up, one torch thread per process.
Writes result.json (median seconds per update, each mode) there.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

import attrs
import torch


def run(rank: int, world: int, config, step, core: bool, repeats: int, device: str = "cpu") -> dict:
    torch.set_num_threads(1)
    from rl_core.backends import WorkerContext
    from rl_train_megatron.engine import MegatronBackend, build_engine

    MegatronBackend.core_pipeline = core
    dev = f"cuda:{rank}" if device == "cuda" else "cpu"
    actor = build_engine("actor", config, WorkerContext(rank=rank, world_size=world, local_rank=rank, device=dev, seed=0))
    times, losses = [], []
    for i in range(repeats + 1):
        torch.distributed.barrier()
        if device == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        metrics = actor.update(step)
        if device == "cuda":
            torch.cuda.synchronize()
        torch.distributed.barrier()
        if i:
            times.append(time.perf_counter() - t)
        losses.append(metrics["loss"])
    schedule = getattr(actor.backend, "core_schedule_name", None)
    actor.shutdown()
    return {"times": times, "losses": losses, "schedule": schedule}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--micro", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="cuda: 2 GPUs, NCCL, bf16 compute (the GPU row)")
    a = ap.parse_args()
    from rl_core_testing.distributed import run_distributed
    from rl_core_testing.tiny_model import make_tiny_model_dir
    from rl_core_testing.train_conformance import N_SAMPLES, default_config, make_step_batch

    with tempfile.TemporaryDirectory() as tmp:
        model = make_tiny_model_dir(Path(tmp) / "m", "qwen3", hidden=a.hidden, layers=a.layers, heads=4, kv_heads=2, seed=0)
        step = make_step_batch(model, rows=a.rows)
        cfg = default_config(model)
        prompts = a.rows // N_SAMPLES
        cfg = attrs.evolve(cfg, data=attrs.evolve(cfg.data, train_batch_size=prompts),
                           actor=attrs.evolve(cfg.actor, ppo_mini_batch_size=prompts, ppo_micro_batch_size_per_gpu=a.micro, ppo_epochs=1),
                           train=attrs.evolve(cfg.train, name="megatron", pipeline_model_parallel_size=2))
        if a.device == "cuda":
            cfg = attrs.evolve(cfg, model=attrs.evolve(cfg.model, dtype="bfloat16"), trainer=attrs.evolve(cfg.trainer, device="cuda"))
        res = {}
        for name, core in (("megatron_core_1f1b", True), ("reference_loop", False)):
            outs = run_distributed(run, 2, cfg, step, core, a.repeats, a.device, backend="nccl" if a.device == "cuda" else "gloo", timeout=600)
            res[name] = {"median_s": statistics.median(outs[0]["times"]), "times_s": outs[0]["times"], "losses": outs[0]["losses"],
                         "schedule": outs[0]["schedule"]}
    import megatron.core

    res["ratio_1f1b_over_loop"] = res["megatron_core_1f1b"]["median_s"] / res["reference_loop"]["median_s"]
    res["setup"] = {**vars(a), "micro_batches": a.rows // a.micro, "torch": torch.__version__, "megatron_core": megatron.core.__version__,
                    "machine": platform.platform(), "cpus": __import__("os").cpu_count()}
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").write_text(json.dumps(res, indent=1))
    print(json.dumps({k: v for k, v in res.items() if k != "setup"}, indent=1))


if __name__ == "__main__":
    main()
