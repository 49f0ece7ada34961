"""Long-response GRPO steps on one GPU (issue #33's device rows): random weights, the hf rollout, the fsdp backend.

Each row is one ``rlcore train`` run of the reference workload (``bench/reference/grpo_reference.yaml``: the
Qwen2.5 body with the GPT-2 vocabulary, random bf16 weights built at start, GSM8K prompts of at most 128 tokens,
the coin reward, no KL) with a long response budget: gradient checkpointing, ``model.compile``, micro-batches by a
token budget (two full-length sequences), the static-cache decode with its capacity grown in chunks of 1,024 slots
(``rollout.engine_kwargs.decode_chunk``, the default). A random model almost never samples EOS, so responses run
to the limit. The table reports the median of the steps after the first (step 1 compiles and captures), the first
step's time, the peak allocated memory of those steps, and ``rlcore check``'s estimate of each phase's peak.

Rows (``--rows``, comma-separated; needed on a GPU, where all three do not fit one 10-minute command):
  r16k         1.5B shape (.gpu/qwen15b-gpt2), 8 prompts x 4, 128 + 16,384 tokens, packed (the default);
               model.compile=false (compiling the layers for the update, ~30-60 s, would not pay back in 2-3 steps;
               the decode step is still compiled and captured)
  r4k_packed   0.5B shape (.gpu/qwen05b-gpt2), 8 prompts x 8, 128 + 4,096 tokens, packed
               (the issue's row, measured before packing: 16.8 s / step, generation 12.0 s, update 4.6 s, peak 15.8 GB)
  r4k_padded   the same with actor.use_remove_padding=false, for the side-by-side ratio

Each row fits one 10-minute device command, installs included. Expected on one H100, from earlier H100 numbers
(bench/results/decode_gpu_h100.md: a 0.5B decode step costs ~1.7 ms at a 384-slot cache; the issue's 4k row, 12.0 s
for 4,096 tokens of 64 sequences, 2.9 ms a step, read its growing cache at ~2.4 TB/s):
r4k_*: ~40 s of start-up, step 1 ~1.5-2.5 min (compiling the decode step and, with model.compile, the layers'
forward / backward for the packed shapes) + 2 steps of ~15 s (its decode now attends over ~2.6k slots on average,
not 4.2k): ~3-4 min a row, within its 270 s budget; both r4k rows fit one command.
r16k: 16,511 decode steps of 32 sequences; each ~2.2 ms of weights and launches plus 0.92 MB of keys / values per
cache slot reached (8.8k slots on average with chunks: ~8 GB, ~4 ms at ~2 TB/s; 16.5k slots without): ~6 ms a
token, ~100 s of generation (135 s if attention reads at 1.5 TB/s, as 64 attention blocks may on 132 SMs); the
update of ~530k tokens (~8.5e15 FLOP with recomputation and 16k-token causal attention) and the old-log-prob pass:
~40 s; so ~150 s a step, ~30 s more for step 1 (the decode step's compilation and captures), ~1 min of start-up:
3 steps in ~9 min, 2 in ~6.5. So r16k asks for 3 steps within a 500 s budget: it reports 3 steps, or the 2 done
when the budget ran out (step 2 then stands alone for the median).

A row stops when its last step's metrics are written (the final model is not waited for) or at its time budget
(``--budget-s``; r16k: 500 s, r4k_*: 270 s), killed with SIGKILL (a SIGTERM would save a checkpoint first): the
steps done by then are reported, and the table says how many. Every step's metrics reach ``--out`` as they are
written, so a command cut short still brings them back. Needs only the GPU image plus ``.gpu/whl`` (tensordict,
pyvers), the model folders ``.gpu/qwen05b-gpt2`` / ``.gpu/qwen15b-gpt2`` and ``.gpu/gsm8k/train.parquet``
(``--gpu-dir``); runs from any directory. Writes under ``--out`` (a folder): ``gpu_long.md`` (the table),
``gpu_long.jsonl`` (one summary per row), and per row ``<row>.metrics.jsonl`` (every step's metrics),
``<row>.train.log`` and ``<row>.check.txt``.

    python bench/long_context/gpu_long.py --rows r16k --out $OUT                    # one H100, <= 500 s + start
    python bench/long_context/gpu_long.py --rows r4k_packed,r4k_padded --out $OUT   # one H100, ~6-9 min
    python bench/long_context/gpu_long.py --tiny --out /tmp/gpu_long_tiny           # CPU smoke run (a minute)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REFERENCE = "bench/reference/grpo_reference.yaml"
FOLDERS = {"1.5b": "qwen15b-gpt2", "0.5b": "qwen05b-gpt2"}
# name: (shape, prompts, n, prompt tokens, response tokens, packed, time budget s); bench/two_gpu/run.py reads these too
STEPS = 3
ROWS = {
    "r16k": ("1.5b", 8, 4, 128, 16384, True, 500),
    "r4k_packed": ("0.5b", 8, 8, 128, 4096, True, 270),
    "r4k_padded": ("0.5b", 8, 8, 128, 4096, False, 270),
}
# r16k: 2-3 steps, where compiling the decoder layers for the update (~30-60 s in step 1) would cost more than it saves
EXTRA = {"r16k": ["model.compile=false"]}
TINY_ROWS = {"tiny_packed": ("tiny", 2, 2, 32, 48, True, 300), "tiny_padded": ("tiny", 2, 2, 32, 48, False, 300)}
TINY_QWEN = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "max_position_embeddings": 1024, "rope_theta": 1000000.0,
             "rms_norm_eps": 1e-6, "hidden_act": "silu", "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
             "use_sliding_window": False, "torch_dtype": "float32", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 264, "tie_word_embeddings": True}


def token_budget(plen: int, rlen: int) -> int:
    return 2 * (plen + rlen) + 64  # two full-length sequences per micro-batch


def row_command(name: str, row, *, tiny: bool, steps: int | None, gpu_dir: Path, work: Path) -> tuple[list[str], Path]:
    """``(config path and key=value overrides, run output folder)`` of one row."""
    shape, prompts, n, plen, rlen, packed, _ = row
    run_dir = work / name
    steps = steps or STEPS
    common = [
        f"data.train_batch_size={prompts}", f"data.max_prompt_length={plen}", f"data.max_response_length={rlen}", f"rollout.n={n}",
        f"actor.ppo_mini_batch_size={prompts}", f"actor.ppo_micro_batch_size_per_gpu={prompts * n}", "actor.use_dynamic_bsz=true",
        f"actor.ppo_max_token_len_per_gpu={token_budget(plen, rlen)}", f"actor.use_remove_padding={str(packed).lower()}",
        "model.random_init=true", f"trainer.total_training_steps={steps}", f"trainer.output_dir={run_dir}",
    ]
    if tiny:
        from rl_core_testing.tiny_run import write_tiny_run

        cfg = write_tiny_run(work / f"{name}_files", steps=steps)
        model_dir = work / f"{name}_files" / "model"
        (model_dir / "model.safetensors").unlink(missing_ok=True)  # random_init: the config is enough
        (model_dir / "config.json").write_text(json.dumps(TINY_QWEN))
        return [str(cfg), *common, "trainer.loggers=[console,jsonl]"], run_dir
    model = gpu_dir / FOLDERS[shape]
    return [
        str(REPO / REFERENCE), *common, f"model.path={model}", f"data.train_files=[{gpu_dir / 'gsm8k' / 'train.parquet'}]",
        "model.enable_gradient_checkpointing=true", "model.compile=true", "model.dtype=bfloat16", *EXTRA.get(name, []),
        "model.override_config.max_position_embeddings=32768",  # the folders say 4096; rotary positions have no limit
        f"reward.custom.path={REPO / 'bench' / 'reference' / 'coin_reward.py'}", "trainer.device=cuda",
    ], run_dir


def metric_rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:  # a line being written
            pass
    return rows


def check_peaks(text: str) -> dict[str, float]:
    """``{phase: GiB}`` from the ``peak in <phase>  N GiB`` lines of ``rlcore check``."""
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^\s*peak in (.+?)\s+([\d.]+) GiB", text, re.M)}


def run_row(name: str, row, args, out: Path, work: Path) -> dict:
    shape, prompts, n, plen, rlen, packed, default_budget = row
    budget, steps = args.budget_s or default_budget, args.steps or STEPS
    argv, run_dir = row_command(name, row, tiny=args.tiny, steps=steps, gpu_dir=args.gpu_dir, work=work)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    py = [sys.executable, "-m", "rl_core"]
    check_out = open(out / f"{name}.check.txt", "w")
    check = subprocess.Popen([*py, "check", *argv], stdout=check_out, stderr=subprocess.STDOUT, cwd=REPO, env=env)
    log = open(out / f"{name}.train.log", "w")
    t0 = time.time()
    train = subprocess.Popen([*py, "train", argv[0], "--no-progress", *argv[1:]], stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env,
                             start_new_session=True)
    metrics_path, copy = run_dir / "metrics.jsonl", out / f"{name}.metrics.jsonl"
    stopped = ""
    while True:
        rc = train.poll()
        rows = metric_rows(metrics_path)
        if rows:
            copy.write_text("".join(json.dumps(r) + "\n" for r in rows))
        if rc is not None:
            stopped = f"exit {rc}"
            break
        if len(rows) >= steps:  # every step measured: the final model's write is not waited for
            stopped = "done"
            break
        if time.time() - t0 > budget:
            stopped = f"time budget {budget} s"
            break
        time.sleep(2)
    if train.poll() is None:
        os.killpg(train.pid, signal.SIGKILL)  # not SIGTERM: the trainer would write a checkpoint first
        train.wait()
    wall = time.time() - t0
    log.close()
    try:
        check.wait(timeout=120)
    except subprocess.TimeoutExpired:
        check.kill()
    check_out.close()
    rows = metric_rows(metrics_path)
    peaks = check_peaks((out / f"{name}.check.txt").read_text())
    timed = rows[1:] or rows

    def med(key):
        vals = [r[key] for r in timed if key in r]
        return statistics.median(vals) if vals else float("nan")

    result = {
        "row": name, "shape": shape, "prompts": prompts, "n": n, "prompt_tokens": plen, "response_tokens": rlen,
        "layout": ("packed" if packed else "padded") + ("".join(f", {e}" for e in EXTRA.get(name, [])) if not args.tiny else ""), "steps_asked": steps, "steps_done": len(rows), "steps_timed": len(timed) if rows else 0, "stopped": stopped,
        "wall_s": round(wall, 1), "first_step_s": rows[0].get("timing_s/step") if rows else None,
        "step_s": med("timing_s/step"), "gen_s": med("timing_s/gen"), "old_log_prob_s": med("timing_s/old_log_prob"),
        "update_s": med("timing_s/update_actor"), "tokens_per_s": med("perf/throughput_tokens_per_s"),
        "response_mean": med("response_length/mean"),
        "peak_gb": max((r["perf/max_memory_allocated_gb"] for r in timed if "perf/max_memory_allocated_gb" in r), default=float("nan")),
        "check_peak_gib": peaks,
    }
    if stopped != "done" and not stopped.startswith("time budget"):
        tail = (out / f"{name}.train.log").read_text()[-3000:]
        print(f"{name}: rlcore train stopped ({stopped}) after {len(rows)} steps; log tail:\n{tail}", flush=True)
    return result


def fmt(v, spec: str = ".1f") -> str:
    return "-" if v is None or v != v else format(v, spec)


def table_line(r: dict) -> str:
    pk = r["check_peak_gib"]
    est = " / ".join(fmt(pk.get(p)) for p in ("rollout", "log-probs", "update")) if pk else "-"
    return (f"| {r['row']} | {r['shape']} | {r['prompts']} x {r['n']} | {r['prompt_tokens']} + {r['response_tokens']:,} | {r['layout']} | "
            f"{r['steps_done']} ({r['stopped']}) | {fmt(r['first_step_s'])} | {fmt(r['step_s'])} | {fmt(r['gen_s'])} | {fmt(r['update_s'])} | "
            f"{fmt(r['tokens_per_s'], ',.0f')} | {fmt(r['response_mean'], ',.0f')} | {fmt(r['peak_gb'])} | {est} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="a folder: the table, the summaries, each row's metrics, log and check output")
    ap.add_argument("--tiny", action="store_true", help="tiny model, CPU, float32: a smoke run")
    ap.add_argument("--rows", default=None, help="comma-separated row names (default, --tiny / --check-only only: all)")
    ap.add_argument("--steps", type=int, default=None, help="steps a row runs (default 3)")
    ap.add_argument("--budget-s", type=float, default=None, help="seconds a row's training may take (default: the row's own)")
    ap.add_argument("--gpu-dir", type=Path, default=REPO / ".gpu", help="where the model folders and gsm8k/train.parquet are")
    ap.add_argument("--check-only", action="store_true", help="only `rlcore check` each row (here: --skip-device-check) and print its peaks")
    ap.add_argument("--work", type=Path, default=Path("/tmp/gpu_long_runs"), help="the runs' output folders (final models: not under --out)")
    args = ap.parse_args()
    table = TINY_ROWS if args.tiny else ROWS
    if not args.rows and not args.tiny and not args.check_only:
        raise SystemExit("--rows is needed on a GPU: all three rows take ~17 min, more than one 10-minute device command; "
                         "run --rows r16k, then --rows r4k_packed,r4k_padded")
    names = args.rows.split(",") if args.rows else list(table)
    unknown = [n for n in names if n not in table]
    if unknown:
        raise SystemExit(f"--rows: unknown {unknown}; the rows are {', '.join(table)}")
    if not args.tiny:
        need = [args.gpu_dir / FOLDERS[table[n][0]] / "config.json" for n in names] + [args.gpu_dir / "gsm8k" / "train.parquet"]
        missing = [str(p) for p in need if not p.exists()]
        if missing:
            raise SystemExit(f"missing {', '.join(missing)}: carry .gpu/qwen05b-gpt2 .gpu/qwen15b-gpt2 .gpu/gsm8k (or set --gpu-dir)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    if args.check_only:
        for name in names:
            argv, _ = row_command(name, table[name], tiny=args.tiny, steps=args.steps, gpu_dir=args.gpu_dir, work=args.work)
            proc = subprocess.run([sys.executable, "-m", "rl_core", "check", "--skip-device-check", *argv], capture_output=True, text=True, cwd=REPO)
            (out / f"{name}.check.txt").write_text(proc.stdout + proc.stderr)
            print(f"{name}: rlcore check exit {proc.returncode}, peaks GiB {check_peaks(proc.stdout)}", flush=True)
            if proc.returncode:
                print(proc.stdout[-2000:] + proc.stderr[-2000:])
        return 0
    head = ["| row | shape | prompts x n | prompt + response tokens | layout | steps (stopped) | step 1 s | step s | gen s | update s | "
            "tokens/s | mean response | peak GiB | check's peak GiB rollout / log-probs / update |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    lines, results = list(head), []
    for name in names:
        print(f"{name}: starting ({time.strftime('%H:%M:%S')})", flush=True)
        r = run_row(name, table[name], args, out, args.work)
        results.append(r)
        lines.append(table_line(r))
        print(lines[-1], flush=True)
        (out / "gpu_long.jsonl").write_text("".join(json.dumps(x) + "\n" for x in results))
    cmd = "python bench/long_context/gpu_long.py " + " ".join(sys.argv[1:])
    try:
        import torch

        device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
        versions = f"torch {torch.__version__}"
    except Exception:  # noqa: BLE001 - the table without it
        device, versions = "?", ""
    text = "\n".join(lines)
    (out / "gpu_long.md").write_text(
        f"# Long-response GRPO steps (issue #33)\n\nCommand: `{cmd}` on {device} ({versions}); "
        f"step / gen / update / tokens/s: median of the steps after the first; peak: the largest `perf/max_memory_allocated_gb` (GiB: torch.cuda.max_memory_allocated / 2**30) of those steps.\n\n{text}\n"
    )
    print(text)
    return 0 if all(r["steps_done"] >= 2 or (args.tiny and r["steps_done"] >= 1) for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
