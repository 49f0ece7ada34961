#!/usr/bin/env bash
# Issue 48's GPU rows in ONE call on one H200 (~6 min with vLLM's start): bench/rollout_gpu.py's parts hf, vllm,
# vllm_fp8 (each in a process of its own), the table in $OUT/rollout_gpu.md, every number in $OUT/rollout_gpu.results.json,
# the parts' logs in $OUT/logs.tgz.
#
# What the machine needs: the device bundle's base segment (.gpu/qwen15b-gpt2: the scale workload's model folder)
# and vllm segment (vLLM 0.26 for torch 2.11 cu130), i.e. the parts .gpu/dv00 .. .gpu/dv07 (bench/DEVICE_RUNBOOK.md):
#   carry [".gpu/dv00"]: bash bench/device_setup.sh install
#   carry [".gpu/dv01"] .. [".gpu/dv06"], one per call, back to back: bash bench/device_setup.sh part
#   carry [".gpu/dv07"]: bash bench/rollout_gpu.sh          (timeout_s 600; installs vLLM, then runs)
# A machine that already has both segments installed (e.g. right after machine B's calls): carry [] and run the same.
# Knobs: DEADLINE (seconds for the python part, default 420), PARTS (default hf,vllm,vllm_fp8).
# GRPO=1 (a second call, carry []): instead of the bench, 20 GRPO steps of the reference workload with the vLLM rollout
# in bf16 and in fp8 (~2 x 4 min), their metrics (rollout_corr/*: the rollout / trainer mismatch; reward) side by side.
# SMOKE=1 on a CPU: tiny shapes, no bundle (the vLLM parts run where vllm imports, else say skipped).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export VLLM_ENABLE_V1_MULTIPROCESSING=0 PYTHONUNBUFFERED=1
if [ "${SMOKE:-0}" = 1 ]; then
    PY=${PY:-python3}
    exec $PY bench/rollout_gpu.py --parts "${PARTS:-hf,vllm,vllm_fp8}" --deadline "${DEADLINE:-900}"
fi
source bench/device_setup.sh
dev_install >"$OUT/install.log" 2>&1 || { tail -30 "$OUT/install.log"; exit 1; }
tail -3 "$OUT/install.log"
if [ "${GRPO:-0}" = 1 ]; then
    # The FP8 acceptance run (a second call, same warm machine): the reference GRPO workload (bench/reference/grpo_reference.yaml,
    # 0.5B shape, 8 x 8, 256 new tokens) with the vLLM rollout, 20 steps in bf16 and in fp8, both with rollout log-probs and
    # TIS on (fp8 turns them on by itself), so rollout_corr/* (the rollout / trainer mismatch) is logged in both.
    for prec in auto fp8; do
        timeout "${GRPO_TIMEOUT:-270}" python3 -m rl_core train bench/reference/grpo_reference.yaml --no-progress trainer.total_training_steps="${GRPO_STEPS:-20}" \
            trainer.output_dir=/tmp/grpo_$prec rollout.name=vllm rollout.precision=$prec rollout.calculate_log_probs=true \
            algorithm.rollout_correction.rollout_is=token >"$OUT/grpo_$prec.log" 2>&1
        echo "grpo $prec: exit $?"
        cp /tmp/grpo_$prec/metrics.jsonl "$OUT/grpo_$prec.metrics.jsonl" 2>/dev/null
        python3 bench/timing_table.py /tmp/grpo_$prec/metrics.jsonl >"$OUT/grpo_$prec.md" 2>&1
    done
    python3 bench/compare_metrics.py "$OUT/grpo_auto.metrics.jsonl" "$OUT/grpo_fp8.metrics.jsonl" --names bf16 fp8 --out "$OUT/grpo_bf16_vs_fp8.md" 2>&1 | tail -3
    dev_pack
    exit 0
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/versions.txt"
python3 -c 'import vllm, torch, transformers; print("vllm", vllm.__version__, "| torch", torch.__version__, "| transformers", transformers.__version__)' 2>&1 | tail -1 | tee -a "$OUT/versions.txt"
timeout $(( ${DEADLINE:-420} + 60 )) python3 bench/rollout_gpu.py --parts "${PARTS:-hf,vllm,vllm_fp8}" --deadline "${DEADLINE:-420}"
echo "exit $?"
dev_pack
