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
# Knobs: DEADLINE (seconds for the python part, default 420), PARTS (default hf,vllm,vllm_fp8; sglang: see
# bench/rollout_sglang_part.py for its set-up), ROUNDS (timed calls per row, default 3).
# STEP=1: the scale workload's GRPO step with the hf and the vLLM rollout (STEP_ROLLOUTS, also sglang once bench/rollout_sglang.sh
# installed it on this machine; STEP_STEPS, STEP_TIMEOUT; STEP_EXTRA: more key=value overrides for every run, e.g.
# STEP_EXTRA=rollout.enable_sleep=false).
# ATTN_MICRO=1: first bench/decode_attention_gpu.py (the decode attention kernel alone vs sdpa; ATTN_CONFIGS=64:4:4,...
# BLOCK_N:warps:stages variants; run it through this script, whose set-up puts tensordict & co. on the path).
# HF_ATTENTION=triton,sdpa, HF_SAMPLER=triton,torch: the hf part with one engine per engine_kwargs.decode_attention x
# decode_sampler value, side by side.
# PROFILE=1: CUPTI kernel times of the hf decode on the scale shape (bench/profile_gpu.py; PROFILE_NEW tokens).
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
if [ "${STEP:-0}" = 1 ]; then
    # "its step no slower than the hf rollout's" (issue 48): the scale workload's GRPO step (bench/verl/run_verl_gpu.sh's
    # SCALE_ARGS on bench/reference/grpo_reference.yaml), each rollout with its defaults (rollout.calculate_log_probs=null:
    # log-probs on step 1 only here). STEP_ROLLOUTS="hf" and "vllm" may go in two calls of one machine: the runs stay in
    # /tmp/step_<name>, and the comparison is written once both are there.
    SCALE=(model.path=.gpu/qwen15b-gpt2 data.train_batch_size=32 data.max_response_length=1024 model.enable_gradient_checkpointing=true
        actor.ppo_mini_batch_size=32 actor.ppo_micro_batch_size_per_gpu=16)
    for r in ${STEP_ROLLOUTS:-hf vllm}; do
        rm -rf "/tmp/step_$r"
        # sglang: its own site folder first (SGLang 0.5.17 pins transformers 5.12.1; bench/rollout_sglang.sh installs it)
        (if [ "$r" = sglang ]; then dev_env_sglang; export RL_CORE_ALLOW_UNTESTED_ENGINE=1; fi
         timeout "${STEP_TIMEOUT:-280}" python3 -m rl_core train bench/reference/grpo_reference.yaml --no-progress trainer.total_training_steps="${STEP_STEPS:-5}" \
            trainer.output_dir="/tmp/step_$r" rollout.name="$r" "${SCALE[@]}" ${STEP_EXTRA:-} >"$OUT/step_$r.log" 2>&1)
        echo "step $r: exit $?"
        tail -3 "$OUT/step_$r.log"
        cp "/tmp/step_$r/metrics.jsonl" "$OUT/step_$r.metrics.jsonl" 2>/dev/null
        python3 bench/timing_table.py "/tmp/step_$r/metrics.jsonl" >"$OUT/step_$r.md" 2>&1
    done
    for other in vllm sglang; do
        if [ -s /tmp/step_hf/metrics.jsonl ] && [ -s "/tmp/step_$other/metrics.jsonl" ]; then
            python3 bench/compare_metrics.py /tmp/step_hf/metrics.jsonl "/tmp/step_$other/metrics.jsonl" --names hf "$other" --out "$OUT/step_hf_vs_$other.md" 2>&1 | tail -3
        fi
    done
    dev_pack
    exit 0
fi
if [ "${PROFILE:-0}" = 1 ]; then
    # where the hf decode's time goes on the scale shape (1.5B, 32 prompts x 8, 128 + PROFILE_NEW tokens): CUPTI kernel times by group
    timeout "${PROFILE_TIMEOUT:-300}" python3 bench/profile_gpu.py --decode-modes compile --update-variants "" --decode-shape 1.5b --batch 256 \
        --prompt 128 --new "${PROFILE_NEW:-512}" >"$OUT/profile.log" 2>&1
    echo "profile: exit $?"
    head -30 "$OUT/profile_gpu.md" 2>/dev/null || tail -20 "$OUT/profile.log"
    dev_pack
    exit 0
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/versions.txt"
if [ "${ATTN_MICRO:-0}" = 1 ]; then  # one decode step's attention alone: rl-hf-decode's Triton kernel vs sdpa (~30 s)
    timeout 150 python3 bench/decode_attention_gpu.py ${ATTN_CONFIGS:+--configs "$ATTN_CONFIGS"} >"$OUT/decode_attention.log" 2>&1
    echo "decode attention: exit $?"
    cat "$OUT/decode_attention.md" 2>/dev/null || tail -5 "$OUT/decode_attention.log"
fi
python3 -c 'import vllm, torch, transformers; print("vllm", vllm.__version__, "| torch", torch.__version__, "| transformers", transformers.__version__)' 2>&1 | tail -1 | tee -a "$OUT/versions.txt"
timeout $(( ${DEADLINE:-420} + 60 )) python3 bench/rollout_gpu.py --parts "${PARTS:-hf,vllm,vllm_fp8}" --deadline "${DEADLINE:-420}"
echo "exit $?"
dev_pack
