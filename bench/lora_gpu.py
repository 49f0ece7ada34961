"""Issue #32's H100 acceptance runs: rl-core LoRA vs TRL + peft on the 7B anchor workload, and a 7B full fine-tune
with CPU offload, each next to `rlcore check`'s memory estimate.

    python bench/lora_gpu.py --runs trl_lora rlcore_lora_vllm rlcore_lora_vllm_nosleep --timeout 300 --deadline 530 --out $OUT/lora
    python bench/lora_gpu.py --runs rlcore_offload --timeout 540 --out $OUT/offload     # one H100 each (bench/DEVICE_RUNBOOK.md)
    python bench/lora_gpu.py --tiny --out /tmp/lora_gpu_tiny                                                  # CPU smoke

The anchor (issue #32): TRL 1.16 ``GRPOTrainer`` + peft, Qwen2.5-7B's body with the GPT-2 vocabulary (6.9B
parameters; the model folder is written from ``--base``'s tokenizer with Qwen2.5-7B's shape), random bf16
weights, LoRA r=32 alpha=64 on all linear layers, 8 prompts x 8 samples, 128 + 256 tokens, beta 0, gradient
checkpointing on: 19.9 s per step (median), peak 29.7 GB. Runs, one after the other (``--runs`` picks):

- ``rlcore_lora``: ``bench/reference/grpo_reference.yaml`` (the same workload: hf rollout, coin reward, lr 1e-6)
  with ``model.lora_rank=32 lora_alpha=64 target_modules=all-linear``, gradient checkpointing, ``--steps`` steps;
- ``trl_lora``: ``bench/reference/trl_grpo.py --lora-rank 32`` on the same folder and data (under ``--trl-python``);
- ``rlcore_lora_merged``: ``rlcore_lora`` with ``rollout.lora_sync=merged`` (every weight merged and copied each
  sync: the path before the in-place adapter merge, for a side-by-side sync time);
- ``rlcore_lora_nosleep``: ``rlcore_lora`` with ``rollout.enable_sleep=false`` (the rollout keeps its merged weights,
  packed projections and CUDA graphs between steps: what sleeping costs per step, at the memory it frees);
- ``rlcore_lora_vllm``: ``rlcore_lora`` with the vLLM rollout (in-process engine) and ``rollout.lora_sync=adapter``:
  the frozen base goes to vLLM once, then only the adapters each step, through vLLM's LoRA layers (verified);
- ``rlcore_lora_vllm_nosleep``: ``rlcore_lora_vllm`` with ``rollout.enable_sleep=false`` and
  ``rollout.gpu_memory_utilization=0.3`` (vLLM keeps its weights, KV cache and CUDA graphs between steps: no host
  round trip of the 7B base per step);
- ``rlcore_lora_vllm_merged``: ``rlcore_lora_vllm`` with ``rollout.lora_sync=merged`` (every weight merged and sent each
  step: the fallback if vLLM's in-memory adapter path fails on the GPU build);
- ``rlcore_lora_vllm_nogc`` / ``rlcore_lora_vllm_nosleep_nogc``: those two without gradient checkpointing, in
  micro-batches of 16 sequences (the recomputation is a third of the update's matmuls; the activations of 16 x 384
  tokens fit: ``rlcore check`` estimates ~49 GiB in the update);
- ``rlcore_offload``: the full fine-tune (no LoRA) with ``actor.fsdp_config.param_offload=true optimizer_offload=true``,
  3 steps.

``--deadline S``: the runs share S seconds (each gets at most ``--timeout`` and what is left; a run that would get
less than ``--min-run`` seconds, default 60, is skipped and reported as such), so one 10-minute device call can run
TRL and rl-core's best rows, the last ones only if time is left.

The rl-core runs use ``model.compile=true`` unless ``--no-compile``. Each rl-core run's median step time (``timing_s/step``, the first step left out: warm-up) and peak GPU memory
(``perf/max_memory_allocated_gb``; with a sleeping vLLM this still counts its unmapped weights and KV cache, so the
update phase's device-level peak ``perf/update_actor_device_peak_gb`` is reported against the estimate's update
phase too) are reported next to the estimate of ``rl_memory_estimate.estimate`` for the same config, and each run's peak resident
host memory (``ru_maxrss``) next to ``rl_memory_estimate.host``'s host estimate
(what ``rlcore check`` prints), as ``OUT/results.json`` and ``OUT/README.md``. Acceptance: the LoRA step at most
1/3 of TRL's (goal 1/5), peak within 25% of the estimate; the offload run finishes its 3 steps.

``--tiny``: a 2-layer model of the tiny test tokenizer and the fixture data on the CPU, 2 steps each, no TRL:
checks that the configs resolve and every run goes through (what this file was smoked with; head_dim 64, which
vLLM's CPU kernels accept, so the vLLM rows run with the vLLM CPU engine: ``VLLM_CPU_KVCACHE_SPACE=1``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "bench" / "reference" / "grpo_reference.yaml"
# Qwen2.5-7B's body (config.json of Qwen/Qwen2.5-7B); the vocabulary is the tokenizer's (GPT-2: 50,257 rows)
SHAPE_7B = dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
                tie_word_embeddings=False, max_position_embeddings=4096, rope_theta=1000000.0, rms_norm_eps=1e-6)
LORA = ["model.lora_rank=32", "model.lora_alpha=64", "model.target_modules=all-linear"]
OFFLOAD = ["actor.fsdp_config.param_offload=true", "actor.fsdp_config.optimizer_offload=true"]
VLLM = ["rollout.name=vllm", "rollout.calculate_log_probs=true"]
NO_GC = ["model.enable_gradient_checkpointing=false", "actor.ppo_micro_batch_size_per_gpu=16"]
# rl-core runs: name -> (overrides, steps or None for --steps)
RUNS = {
    "rlcore_lora": (LORA, None),
    # the sync before in-place adapter merging, in the same call
    "rlcore_lora_merged": (LORA + ["rollout.lora_sync=merged"], None),
    # the rollout keeps its weights and CUDA graphs between steps (no re-capture)
    "rlcore_lora_nosleep": (LORA + ["rollout.enable_sleep=false"], None),
    # vLLM: base weights once, then the adapters through vLLM's LoRA layers each step
    "rlcore_lora_vllm": (LORA + VLLM + ["rollout.lora_sync=adapter"], None),
    "rlcore_lora_vllm_nosleep": (LORA + VLLM + ["rollout.lora_sync=adapter", "rollout.enable_sleep=false",
                                                "rollout.gpu_memory_utilization=0.3"], None),
    "rlcore_lora_vllm_merged": (LORA + VLLM + ["rollout.lora_sync=merged"], None),
    # no gradient checkpointing (one forward less per micro-batch: the frozen base needs no recomputation), in
    # micro-batches of 16 sequences so the activations fit (rlcore check: ~49 GiB peak in the update on 80 GB)
    "rlcore_lora_vllm_nogc": (LORA + VLLM + NO_GC + ["rollout.lora_sync=adapter"], None),
    "rlcore_lora_vllm_nosleep_nogc": (LORA + VLLM + NO_GC + ["rollout.lora_sync=adapter", "rollout.enable_sleep=false",
                                                             "rollout.gpu_memory_utilization=0.3"], None),
    "rlcore_offload": (OFFLOAD, 3),
}


def make_model(base: Path | None, out: Path, tiny: bool) -> Path:
    """A config-only model folder (random weights at load, ``model.random_init``): ``base``'s tokenizer, the 7B shape."""
    if out.exists():
        shutil.rmtree(out)
    if tiny:
        from rl_core_testing.tiny_model import make_tiny_model_dir

        make_tiny_model_dir(out, "qwen2", hidden=128, heads=2, kv_heads=1)  # head_dim 64: vLLM's CPU attention
        return out
    out.mkdir(parents=True)
    for f in base.iterdir():
        if f.name != "config.json" and f.is_file() and not f.name.endswith((".safetensors", ".bin")):
            shutil.copy(f, out / f.name)
    cfg = json.loads((base / "config.json").read_text())
    cfg.update(SHAPE_7B)
    (out / "config.json").write_text(json.dumps(cfg, indent=1))
    return out


def overrides(args, model: Path, run_dir: Path, extra: list[str], steps: int) -> list[str]:
    common = [f"model.path={model}", f"trainer.output_dir={run_dir}", f"trainer.total_training_steps={steps}",
              "model.enable_gradient_checkpointing=true", f"model.compile={'true' if args.compile else 'false'}", "trainer.loggers=[jsonl]"]
    if args.tiny:
        common += ["trainer.device=cpu", "model.dtype=float32", f"data.train_files=[{ROOT / 'tests/fixtures/data/tiny_gsm8k.jsonl'}]",
                   "data.max_response_length=16", "data.max_prompt_length=64", "rollout.n=2", "data.train_batch_size=2",
                   "actor.ppo_mini_batch_size=2", "actor.ppo_micro_batch_size_per_gpu=4"]
    else:
        common += [f"data.train_files=[{args.data}]"]
    return common + extra


def estimate_gib(ov: list[str]) -> dict:
    """``rl_memory_estimate.estimate``'s estimate for the config (the numbers ``rlcore check`` prints)."""
    from rl_core.config.load import load_config
    from rl_core.config.normalize import normalize
    from rl_core.plan.features import load_features
    from rl_memory_estimate.estimate import estimate
    from rl_core.plugins import get_registry

    config = load_config(str(CONFIG), ov)
    features = load_features(get_registry(), [])  # LoRA's memory terms (rl-lora's feature card), as the plan's
    from rl_core.plan.resolver import resolve

    # with the stack's cards, as `rlcore check` does: a vLLM / SGLang rollout reserves its memory fraction of the
    # device in the same process, which torch's max_memory_allocated (the reported peak) counts (session 10: without
    # the card the 7B vLLM row was compared with the hf rollout's 29.3 GiB instead of 53.3)
    stack, _ = resolve(config)
    if stack is not None:
        config, sizes, cards = stack.config, stack.sizes, dict(rollout=stack.rollout, train=stack.train, features=stack.features)
    else:
        config, sizes, _ = normalize(config)
        cards = dict(features=features)
    est = estimate(config, sizes, **cards) if sizes is not None else None
    if est is None:
        return {"peak_gib": None}
    out = {"peak_gib": est.peak / 2**30, "update_gib": est.phases.get("update", 0) / 2**30, "lines": est.lines()}
    if est.device != "cpu":  # host memory (offload, sleep, the model load): rl_memory_estimate.host
        from rl_memory_estimate.host import host_estimate, host_ram

        host = host_estimate(config, est.shape, world_size=sizes.world_size, available=host_ram(), features=features)
        out.update(host_peak_gib=host.peak / 2**30, lines=out["lines"] + host.lines())
    return out


def _call(cmd: list[str], log: Path, timeout: float) -> tuple[int | str, float]:
    """Run ``cmd`` with its output in ``log``; past ``timeout`` seconds its process group is killed ("timeout").
    Also its peak resident host memory in GiB (``ru_maxrss`` from ``wait4``: pinned buffers count, the page cache not):
    what the host estimate (rl_memory_estimate.host) is compared with."""
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)
        deadline = time.time() + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
                return proc.returncode, usage.ru_maxrss / 2**20  # KiB -> GiB
            if time.time() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                _, status, usage = os.wait4(proc.pid, 0)
                proc.returncode = os.waitstatus_to_exitcode(status)
                return "timeout", usage.ru_maxrss / 2**20
            time.sleep(0.5)


def run_rlcore(args, name: str, model: Path, extra: list[str], steps: int, limit: float) -> dict:
    run_dir = Path(args.work) / name
    shutil.rmtree(run_dir, ignore_errors=True)
    ov = overrides(args, model, run_dir, extra, steps)
    cmd = [sys.executable, "-m", "rl_core", "train", str(CONFIG), *ov, "--no-progress"]
    log = Path(args.out) / f"{name}.log"
    start = time.time()
    code, host_peak = _call(cmd, log, limit)
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()] if (run_dir / "metrics.jsonl").exists() else []
    steps_s = [r["timing_s/step"] for r in rows if "timing_s/step" in r]
    peaks = [r["perf/max_memory_allocated_gb"] for r in rows if "perf/max_memory_allocated_gb" in r]
    if rows:
        shutil.copy(run_dir / "metrics.jsonl", Path(args.out) / f"{name}.metrics.jsonl")
    est = estimate_gib([o for o in ov if not o.startswith("trainer.output_dir")])
    stages = {k: [r[k] for r in rows if k in r] for k in ("timing_s/gen", "timing_s/old_log_prob", "timing_s/update_actor", "timing_s/sync_weights",
                                                          "perf/update_actor_max_memory_allocated_gb",  # the update's own peak (GiB)
                                                          "perf/update_actor_device_peak_gb")}  # ... on the device (a sleeping vLLM unmapped)
    return {"exit": code, "steps_done": len(steps_s), "step_s": steps_s, "estimate_host_peak_gib": est.get("host_peak_gib"), "host_peak_gib": host_peak,
            "median_stage_s": {k: statistics.median(v[1:] or v) for k, v in stages.items() if v},
            "median_step_s": statistics.median(steps_s[1:] or steps_s) if steps_s else None,
            "peak_gib": max(peaks) if peaks else None, "estimate_peak_gib": est["peak_gib"], "estimate": est.get("lines"),
            "estimate_update_gib": est.get("update_gib"),
            "wall_s": time.time() - start, "command": " ".join(cmd).replace(str(ROOT) + "/", "")}


def run_trl(args, model: Path, limit: float) -> dict:
    out = Path(args.out) / "trl_lora.json"
    cmd = [args.trl_python, str(ROOT / "bench/reference/trl_grpo.py"), "--model", str(model), "--data", str(args.data),
           "--steps", str(args.steps), "--gradient-checkpointing", "1", "--lora-rank", "32", "--out", str(out)]
    code, host_peak = _call(cmd, Path(args.out) / "trl_lora.log", limit)
    res = json.loads(out.read_text()) if out.exists() else {}
    steps_s = res.get("step_s") or []
    return {"exit": code, "step_s": steps_s, "median_step_s": statistics.median(steps_s[1:] or steps_s) if steps_s else None,
            "peak_gib": res.get("peak_mem_gib"), "host_peak_gib": host_peak, "command": " ".join(cmd).replace(str(ROOT) + "/", "")}


def report(results: dict, out: Path) -> None:
    lines = ["# Issue #32 on one GPU: rl-core LoRA vs TRL + peft (7B anchor), 7B full fine-tune with offload", "",
             f"{results['when']}; device {results['device']}; `python bench/lora_gpu.py {' '.join(results['argv'])}`", "",
             "| run | exit | steps | median step (s) | gen / update / sync (s) | peak GiB | estimate GiB | peak / estimate | host peak GiB (max RSS) | host estimate GiB |",
             "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
    for name, r in results["runs"].items():
        ratio = f"{r['peak_gib'] / r['estimate_peak_gib']:.2f}" if r.get("peak_gib") and r.get("estimate_peak_gib") else "-"
        fmt = lambda v: f"{v:.2f}" if isinstance(v, float) else ("-" if v is None else str(v))  # noqa: E731
        st = r.get("median_stage_s") or {}
        stages = " / ".join(fmt(st.get(k)) for k in ("timing_s/gen", "timing_s/update_actor", "timing_s/sync_weights")) if st else "-"
        lines.append(f"| {name} | {r['exit']} | {len(r['step_s'])} | {fmt(r['median_step_s'])} | {stages} | {fmt(r.get('peak_gib'))} | "
                     f"{fmt(r.get('estimate_peak_gib'))} | {ratio} | {fmt(r.get('host_peak_gib'))} | {fmt(r.get('estimate_host_peak_gib'))} |")
    updates = []
    for name, r in results["runs"].items():
        st, want = r.get("median_stage_s") or {}, r.get("estimate_update_gib")
        dev, alloc = st.get("perf/update_actor_device_peak_gb"), st.get("perf/update_actor_max_memory_allocated_gb")
        if dev and want:
            updates.append(f"- {name}: update phase on the device {dev:.2f} GiB vs estimated {want:.2f} GiB ({dev / want:.2f}); "
                           f"torch's allocated peak {alloc:.2f} GiB (it still counts a sleeping vLLM's unmapped weights and KV cache)")
    if updates:
        lines += ["", "Update phase (median of steps), device-level peak = in use at its start + torch's new segments:", *updates]
    trl = results["runs"].get("trl_lora")
    if trl and trl["median_step_s"]:
        ratios = [f"{name} **{r['median_step_s'] / trl['median_step_s']:.2f}**" for name, r in results["runs"].items()
                  if name.startswith("rlcore_lora") and r.get("median_step_s")]
        if ratios:
            lines += ["", f"rl-core LoRA step / TRL + peft step (same call): {', '.join(ratios)} (acceptance <= 0.33, goal 0.20)"]
    (out / "README.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", type=Path, default=ROOT / ".gpu" / "qwen05b-gpt2", help="a model folder whose tokenizer to use")
    ap.add_argument("--data", type=Path, default=ROOT / ".gpu" / "gsm8k" / "train.parquet")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--work", type=Path, default=Path("/tmp/lora_gpu"))
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--runs", nargs="+", default=["rlcore_lora", "trl_lora", "rlcore_offload"], choices=[*RUNS, "trl_lora"])
    ap.add_argument("--trl-python", default=sys.executable)
    ap.add_argument("--timeout", type=int, default=560, help="seconds per run (the device tool allows 10 min a command: one run per call)")
    ap.add_argument("--deadline", type=float, default=None, help="seconds for all runs together (each gets at most --timeout and what is left)")
    ap.add_argument("--min-run", type=float, default=60, help="a run that would get fewer seconds than this is skipped (reported as such)")
    ap.add_argument("--tiny", action="store_true", help="CPU smoke: a 2-layer model, the fixture data, 2 steps, no TRL")
    ap.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True,
                    help="model.compile for the rl-core runs (default on, as the reference workload runs; --no-compile: eager)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.tiny:
        args.steps = 2
        args.runs = [r for r in args.runs if r != "trl_lora"]
    model = make_model(args.base, args.work / ("tiny-model" if args.tiny else "qwen7b-gpt2"), args.tiny)
    import torch

    results = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "argv": argv if argv is not None else sys.argv[1:],
               "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu", "runs": {}}
    start = time.time()
    for name in args.runs:
        limit = args.timeout if args.deadline is None else min(args.timeout, args.deadline - (time.time() - start))
        print(f"[{time.strftime('%H:%M:%S')}] {name} (at most {limit:.0f} s)", flush=True)
        if limit < args.min_run:
            results["runs"][name] = {"exit": f"skipped: {limit:.0f} s left of --deadline {args.deadline}", "step_s": [], "median_step_s": None}
        elif name == "trl_lora":
            results["runs"][name] = run_trl(args, model, limit)
        else:
            extra, steps = RUNS[name]
            results["runs"][name] = run_rlcore(args, name, model, extra, 2 if args.tiny else steps or args.steps, limit)
        (args.out / "results.json").write_text(json.dumps(results, indent=1))
        print(json.dumps({k: v for k, v in results["runs"][name].items() if k not in ("estimate", "step_s")}), flush=True)
    report(results, args.out)
    print((args.out / "README.md").read_text())
    return 0 if all(r["exit"] == 0 for r in results["runs"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
