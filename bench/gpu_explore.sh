#!/usr/bin/env bash
# One GPU call that measures what to change next (issue 13): rlcore doctor, decode modes at batch 64 (packed q/k/v and
# gate/up, torch.compile before capture), the kernel-time profile of the decode step and of a 1.5B update (fused vs
# foreach AdamW, compiled decoder layers), and the 1.5B update at micro-batch 16 / 32 with and without compiled layers.
#
#   bash bench/gpu_explore.sh             # GPU machine (carry .gpu/whl); ~8 min on an H100; results in $OUT
#   SMOKE=1 bash bench/gpu_explore.sh     # CPU: the same steps on a tiny model
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/logs"
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if [ "${SMOKE:-0}" != 1 ]; then
    source bench/reference/run_gpu.sh   # defines install_base; runs nothing without arguments
    install_base >"$OUT/logs/install.log" 2>&1 || { cat "$OUT/logs/install.log"; exit 1; }
    mv "$OUT/versions.txt" "$OUT/pip_editable.log" "$OUT/logs/" 2>/dev/null
fi
step() {  # name, timeout, command...
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS
    timeout "$limit" "$@" >"$OUT/logs/$name.log" 2>&1
    echo "$name exit $? in $((SECONDS - t0)) s"
}
step doctor 120 python3 -m rl_core doctor
cp "$OUT/logs/doctor.log" "$OUT/doctor.txt"
step decode 240 python3 bench/decode_gpu.py --batches "${DECODE_BATCHES:-64}" --modes graph,nopack,compile
step profile 240 python3 bench/profile_gpu.py --decode-modes graph,compile --update-variants eager,foreach,compile
step mfu 240 python3 bench/update_mfu_gpu.py --only mfu --plan "${MFU_PLAN:-1.5b:16,32}" --compile 0,1
cat "$OUT"/decode_gpu.md "$OUT"/update_mfu_gpu.md 2>/dev/null
grep -A12 "^### " "$OUT/profile_gpu.md" 2>/dev/null | head -80
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
