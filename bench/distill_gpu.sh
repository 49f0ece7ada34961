#!/usr/bin/env bash
# Issue 50's GPU row: one on-policy distillation step time and the teacher's share of it, one H200.
# The reference workload (bench/reference/grpo_reference.yaml: student of Qwen2.5-0.5B's shape with the GPT-2
# vocabulary, random bf16 weights, 8 prompts x 8 samples, 256 new tokens, hf rollout, FSDP, model.compile) run twice,
# STEPS steps each: as GRPO (the baseline) and as algorithm.adv_estimator=distill with a teacher of Qwen2.5-1.5B's shape
# (the same tokenizer, random bf16 weights: bench/distill_gpu.py teacher) in the trainer's process on the same GPU.
#
# Needs the .gpu/ that bench/kernel_gpu.sh prepares (.gpu/whl: tensordict, pyvers; .gpu/qwen05b-gpt2;
# .gpu/gsm8k/train.parquet). On the GPU machine (carry .gpu):   bash bench/distill_gpu.sh
# On a CPU (tiny shapes, 2 steps, no .gpu needed):   SMOKE=1 PY=.venv/bin/python OUT=/tmp/dg bash bench/distill_gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
PY=${PY:-python3}
WORK=${WORK:-/tmp/distill_gpu}; rm -rf "$WORK"; mkdir -p "$WORK"
if [ "${SMOKE:-0}" = 1 ]; then
    STEPS=${STEPS:-2}; DEVICE=cpu; SHAPE=tiny; RUN_LIMIT=900
    $PY - "$WORK" <<'PYEOF'
import json, sys
from pathlib import Path
from rl_core_testing.tiny_model import make_tiny_model_dir
from rl_core_testing.tiny_run import tiny_rows
w = Path(sys.argv[1])
make_tiny_model_dir(w / "student")
(w / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in tiny_rows()))
PYEOF
    STUDENT=$WORK/student
    SIZES="model.path=$STUDENT model.random_init=false model.compile=false data.train_files=[$WORK/train.jsonl] data.max_response_length=8 rollout.n=2 data.train_batch_size=4 actor.ppo_mini_batch_size=4 actor.ppo_micro_batch_size_per_gpu=4 trainer.device=cpu model.dtype=float32 trainer.torch_threads=1"
    SITE=""
else
    STEPS=${STEPS:-8}; DEVICE=cuda; SHAPE=1.5b; RUN_LIMIT=150
    $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu/whl/*.whl >"$OUT/install_whl.log" 2>&1 || { cat "$OUT/install_whl.log"; exit 1; }
    $PY -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target /tmp/site . plugins/train_fsdp plugins/reward_rule \
        plugins/distill >"$OUT/install.log" 2>&1 || { tail -20 "$OUT/install.log"; exit 1; }
    STUDENT=.gpu/qwen05b-gpt2
    SIZES=""
    SITE=/tmp/site
fi
export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
$PY - <<'PYEOF' | tee "$OUT/versions.txt"
import importlib.metadata as md, platform, torch
print("gpu:", torch.cuda.get_device_name() if torch.cuda.is_available() else "none", "| python", platform.python_version(), "| torch", torch.__version__)
for d in ("transformers", "rl-core", "rl-train-fsdp", "rl-distill"):
    print(d, md.version(d))
PYEOF
$PY bench/distill_gpu.py teacher "$STUDENT" "$WORK/teacher" --shape $SHAPE --device $DEVICE | tee "$OUT/teacher.txt" || exit 1
run() {  # run NAME overrides...: one rlcore train of STEPS steps of the reference workload
    local name=$1; shift
    timeout "${RUN_TIMEOUT:-$RUN_LIMIT}" $PY -m rl_core train bench/reference/grpo_reference.yaml --no-progress trainer.total_training_steps="$STEPS" \
        trainer.output_dir="$WORK/$name" trainer.device=$DEVICE $SIZES "$@" >"$OUT/$name.log" 2>&1
    echo "$name: exit $?"
    cp "$WORK/$name/metrics.jsonl" "$OUT/$name.metrics.jsonl" 2>/dev/null
}
run grpo
run distill algorithm.adv_estimator=distill algorithm.options.teacher_path="$WORK/teacher" algorithm.options.teacher_dtype=bfloat16 \
    rollout.calculate_log_probs=true
$PY bench/distill_gpu.py table "$OUT" | tee "$OUT/table.md"
