#!/usr/bin/env bash
# Issue 51's CPU number: rollout.exact's step-time cost against the default path, a tiny random Qwen2 (hidden 64, 2 layers),
# 4 prompts x 4 samples, 32 new tokens, bf16 compute, fsdp, on-policy; ROUNDS rounds of both runs in ABBA order, STEPS steps
# each; medians over steps 2.. (step 1 warms up). Writes $OUT/<run>_<round>.metrics.jsonl and $OUT/cost.md.
#     OUT=bench/results/exact/cpu PY=.venv/bin/python bash bench/exact_cpu_cost.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/exact_cpu}; mkdir -p "$OUT"; PY=${PY:-python3}; STEPS=${STEPS:-5}; ROUNDS=${ROUNDS:-2}
IN=/tmp/exact_cpu_inputs; mkdir -p "$IN"
$PY bench/exact_inputs.py "$IN" 32 || exit 1
run() {
    rm -rf "/tmp/exact_cpu_$1_$2"
    $PY -m rl_core train bench/reference/grpo_reference.yaml --no-progress model.path="$IN/model" model.random_init=false model.compile=false \
        data.train_files=["$IN/train.jsonl"] data.train_batch_size=4 data.max_prompt_length=128 data.max_response_length=32 rollout.n=4 \
        actor.ppo_mini_batch_size=4 actor.ppo_micro_batch_size_per_gpu=16 trainer.device=cpu trainer.loggers=[jsonl] \
        trainer.total_training_steps="$STEPS" trainer.output_dir="/tmp/exact_cpu_$1_$2" rollout.exact="$3" >"$OUT/$1_$2.log" 2>&1
    echo "$1 round $2: exit $?"; cp "/tmp/exact_cpu_$1_$2/metrics.jsonl" "$OUT/$1_$2.metrics.jsonl"
}
for r in $(seq 1 "$ROUNDS"); do
    if ((r % 2)); then run default "$r" false; run exact "$r" true; else run exact "$r" true; run default "$r" false; fi
done
$PY - "$OUT" <<'PYEOF' | tee "$OUT/cost.md"
import json, statistics, sys
from pathlib import Path
out = Path(sys.argv[1]); keys = ("timing_s/step", "timing_s/gen", "timing_s/update_actor")
print("| run | " + " | ".join(keys) + " | rollout_corr/log_prob_abs_diff_max (max over steps) |\n|---|---:|---:|---:|---:|")
med = {}
for name in ("default", "exact"):
    rows = [json.loads(l) for f in sorted(out.glob(f"{name}_*.metrics.jsonl")) for l in f.read_text().splitlines()[1:] if l.strip()]
    med[name] = {k: statistics.median(r[k] for r in rows) for k in keys}
    gap = max(r["rollout_corr/log_prob_abs_diff_max"] for r in rows)
    print(f"| {name} | " + " | ".join(f"{med[name][k]:.3f}" for k in keys) + f" | {gap:.3g} |")
print(f"\nexact / default: step {med['exact']['timing_s/step'] / med['default']['timing_s/step']:.2f}x, "
      f"gen {med['exact']['timing_s/gen'] / med['default']['timing_s/gen']:.2f}x, update {med['exact']['timing_s/update_actor'] / med['default']['timing_s/update_actor']:.2f}x")
PYEOF
