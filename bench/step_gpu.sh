#!/usr/bin/env bash
# The reference GRPO step with the `hf` rollout before / after issue 13's changes, in one run (issue 13, bench 3).
#
#   bash bench/step_gpu.sh            # on the GPU machine, carry .gpu/qwen05b-gpt2 .gpu/gsm8k; ~3 min on an H100
#   SMOKE=1 bash bench/step_gpu.sh    # CPU: prints the commands it would run and checks the configs resolve
#
# after: the defaults on CUDA (static-cache decode in a CUDA graph, chunked log-probs);
# before: rollout.engine_kwargs.static_decode=false model.logprob_chunk_size=0 (the loop and logits as they were).
# Uses bench/reference/run_gpu.sh's grpo_run (STEPS steps each, default 6 here); per-stage tables in $OUT/grpo_*.md.
set -uo pipefail
cd "$(dirname "$0")/.."
export STEPS=${STEPS:-6}
source bench/reference/run_gpu.sh   # defines install / grpo_run; runs nothing without arguments
BEFORE=(rollout.name=hf rollout.engine_kwargs.static_decode=false model.logprob_chunk_size=0)
AFTER=(rollout.name=hf)
if [ "${SMOKE:-0}" = 1 ]; then
    for args in "${BEFORE[*]}" "${AFTER[*]}"; do
        echo "grpo_run: python3 -m rl_core train bench/reference/grpo_reference.yaml $args"
        python3 -m rl_core check bench/reference/grpo_reference.yaml $args trainer.device=cpu >/dev/null || exit 1
    done
    echo "smoke: both configs resolve"
    exit 0
fi
python3 -c 'import rl_core, rl_train_fsdp' 2>/dev/null || python3 -m pip install -q --no-index --no-deps --no-build-isolation \
    -e . -e plugins/train_fsdp -e plugins/reward_rule >"$OUT/pip_editable.log" 2>&1 || { cat "$OUT/pip_editable.log"; exit 1; }
grpo_run hf_after "${AFTER[@]}"
grpo_run hf_before "${BEFORE[@]}"
