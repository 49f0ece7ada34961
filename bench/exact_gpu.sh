#!/usr/bin/env bash
# Issue 51's GPU rows (docs/exact.md): exact on-policy training on one GPU, the reference workload
# (bench/reference/grpo_reference.yaml: 0.5B shape, 8 prompts x 8 samples, 256 new tokens, hf rollout, FSDP, bf16).
#   1. exact      3 GRPO steps, rollout.exact=true: rollout_corr/log_prob_abs_diff_max must be exactly 0 every step
#                 (the run itself stops otherwise: the bound is 0 in exact mode)
#   2. packed     the same with packing on (actor.use_remove_padding=true)
#   3. default    3 steps of the default path: its measured gap (max / mean |delta log-prob|) and the step time exact costs
#   4. det_a/b    two runs with trainer.deterministic=true and the same seed (2 steps): metrics.jsonl without the
#                 timing columns and hf_final compared byte for byte
# Every run: model.compile=false and rollout.engine_kwargs.compile=false (exact mode refuses compiled decoder layers;
# no cold inductor compile in a 4-minute call), so default and exact differ only in rollout.exact.
# Writes $OUT/exact_gpu.md (the tables), $OUT/<run>.metrics.jsonl, $OUT/<run>.log, $OUT/versions.txt.
#
# On the GPU machine (carry .gpu: the wheels in .gpu/whl, .gpu/qwen05b-gpt2, .gpu/gsm8k/train.parquet, as for
# bench/kernel_gpu.sh):   bash bench/exact_gpu.sh
# CPU smoke run (a tiny random model, this venv, ~3 min on 2 idle cores):   SMOKE=1 OUT=/tmp/exact_smoke bash bench/exact_gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
PY=${PY:-python3}
STEPS=${STEPS:-3}; DET_STEPS=${DET_STEPS:-2}
CFG=bench/reference/grpo_reference.yaml
COMMON=(model.compile=false rollout.engine_kwargs.compile=false trainer.save_freq=-1)
if [ "${SMOKE:-0}" = 1 ]; then
    # this venv; a tiny random llama and 8 GSM8K-like rows written here; the CPU, fp32 weights in bf16 compute
    SMOKE_DIR=$OUT/smoke_inputs; mkdir -p "$SMOKE_DIR"
    $PY bench/exact_inputs.py "$SMOKE_DIR" || exit 1
    COMMON+=(model.path="$SMOKE_DIR/model" model.random_init=false data.train_files=["$SMOKE_DIR/train.jsonl"] data.train_batch_size=4
             data.max_prompt_length=128 data.max_response_length=8 rollout.n=2 actor.ppo_mini_batch_size=4 actor.ppo_micro_batch_size_per_gpu=8 trainer.device=cpu)
else
    $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu/whl/*.whl >"$OUT/install_whl.log" 2>&1 || { cat "$OUT/install_whl.log"; exit 1; }
    rm -rf /tmp/exact_tree && mkdir -p /tmp/exact_tree
    $PY -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target /tmp/exact_tree . plugins/train_fsdp plugins/reward_rule \
        >"$OUT/install_tree.log" 2>&1 || { tail -20 "$OUT/install_tree.log"; exit 1; }
    export PYTHONPATH=/tmp/exact_tree:/tmp/site
fi
$PY - <<'PYEOF' | tee "$OUT/versions.txt"
import importlib.metadata as md, platform, torch
print("gpu:", torch.cuda.get_device_name() if torch.cuda.is_available() else "none", "| python", platform.python_version(), "| torch", torch.__version__)
for d in ("transformers", "rl-core", "rl-train-fsdp"):
    print(d, md.version(d))
PYEOF
run() {  # run NAME STEPS [key=value ...]: one rlcore train; its metrics and log kept under $OUT
    local name=$1 steps=$2; shift 2
    local dir=/tmp/exact_gpu_$name
    rm -rf "$dir"
    local start=$SECONDS
    timeout "${RUN_TIMEOUT:-240}" $PY -m rl_core train $CFG --no-progress "${COMMON[@]}" trainer.total_training_steps="$steps" \
        trainer.output_dir="$dir" "$@" >"$OUT/$name.log" 2>&1
    echo "$name: exit $? in $((SECONDS - start)) s"
    cp "$dir/metrics.jsonl" "$OUT/$name.metrics.jsonl" 2>/dev/null
}
run exact "$STEPS" rollout.exact=true
run packed "$STEPS" rollout.exact=true actor.use_remove_padding=true
run default "$STEPS"
run det_a "$DET_STEPS" trainer.deterministic=true trainer.seed=5
run det_b "$DET_STEPS" trainer.deterministic=true trainer.seed=5
$PY bench/exact_gpu_report.py "$OUT" /tmp/exact_gpu_det_a/hf_final /tmp/exact_gpu_det_b/hf_final | tee "$OUT/exact_gpu.md"
