#!/usr/bin/env bash
# Issue 48's SGLang rows on one H200 (bench/rollout_sglang_part.py: SGLang alone vs rl-core's SGLang rollout on the
# scale and long workloads, prefix sharing counted, the radix cache off on a second engine, one sleep + wake-up).
#
# SGLang 0.5.17 travels as a stream of its own (the bundle's `sglang` segment alone, so it adds to a machine that
# already installed base + vllm from .gpu/dvNN without touching that stream), built here:
#   python3 bench/device_bundle.py build --segments sglang --gpu-dir .gpu --out .gpu/sgl --part-mib 45   # .gpu/sgl/dv00 .. dv13
# (the wheels first: bash plugins/rollout_vllm/scripts/gpu/build_parts.sh plugins/rollout_sglang/scripts/gpu/sglang-0.5.17-cu130-py312.txt .gpu/sglang)
# Calls (one machine; after the base segment is installed, e.g. after the vLLM rows' calls):
#   carry [".gpu/sgl/dv00"] .. [".gpu/sgl/dvNN"], one per call:  bash bench/rollout_sglang.sh part   (the last one
#                                              installs the segment, ~40 s, and runs the probe: $OUT/sglang_probe.txt)
#   carry []:                                                 bash bench/rollout_sglang.sh   (timeout_s 600)
# `part` copies the carried parts to $T/parts/sgl (bench/device_setup.sh's dev_part looks at .gpu/dv?? only) and
# installs the segment once all its bytes are there (into /tmp/site_sgl), saying which part it needs next. The run:
# dev_install (base etc., whatever .gpu/dv?? this call carries), the SGLang part, the probe (every import SGLang's
# engine needs, with SGLang's transformers 5.12.1 first on the path: dev_env_sglang), then the bench.
# A fresh machine needs the base segment first: carry [".gpu/dv00"] with `bash bench/device_setup.sh install`.
# Knobs: DEADLINE (seconds from the call's start to the last timed row, default 540), ROUNDS (default 2), NO_SHARING=0 (no second engine),
# BEFORE=0 (no share_prefill=false row), SGLANG_ENGINE_KWARGS (JSON: sglang.Engine arguments of both engines, e.g.
# {"attention_backend": "triton"} if fa3 fails to start; {"schedule_policy": "lpm"}).
# SMOKE=1 on a CPU: tiny shapes, no bundle (SGLang's CPU engine; PY names the interpreter of a venv that has it).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
# the deadline counts from the call's start (install and probe included): DEADLINE=540 fits a 600 s call
export ROLLOUT_BENCH_START=${ROLLOUT_BENCH_START:-$(date +%s)}
export PYTHONUNBUFFERED=1 RL_CORE_ALLOW_UNTESTED_ENGINE=1  # the card lists 0.5.17 and 0.5.23; the env keeps a patch release from stopping the call
if [ "${SMOKE:-0}" = 1 ]; then
    exec ${PY:-python3} bench/rollout_sglang_part.py --deadline "${DEADLINE:-900}"
fi
source bench/device_setup.sh

SGL_PARTS=${SGL_PARTS:-.gpu/sgl}  # where the carried parts are (tests point it elsewhere)

sgl_part() {  # the carried .gpu/sgl/dv?? parts -> $T/parts/sgl (a part already there with its size is not copied
    # again: the device keeps earlier calls' carried folders; the segment's sha256 is checked at install)
    local d f n=0
    mkdir -p "$T/parts/sgl"
    for d in "$SGL_PARTS"/dv[0-9][0-9]; do
        [ -d "$d" ] || continue
        for f in "$d"/*; do
            if [ "$(basename "$f")" = INDEX.json ] || [ ! -f "$T/parts/sgl/$(basename "$f")" ] || [ "$(stat -c %s "$f")" != "$(stat -c %s "$T/parts/sgl/$(basename "$f")")" ]; then
                cp "$f" "$T/parts/sgl/" || return 1
            fi
        done
        n=$((n + 1))
    done
    echo "sglang parts here: $(cd "$T/parts/sgl" && ls part-* 2>/dev/null | tr '\n' ' ') ($n folders carried)"
    [ -f "$T/parts/sgl/INDEX.json" ] || { echo "no $SGL_PARTS/dvNN part carried yet"; return 1; }
    python3 bench/device_bundle.py install --parts "$T/parts/sgl" 2>&1 | tee -a "$OUT/sglang_install.log"
    return "${PIPESTATUS[0]}"
}

if [ "${1:-run}" = part ]; then  # `part`: this call's part; once the segment is complete, the probe too
    dev_env
    sgl_part || exit 1
    if ls "$T"/dev/installed/sglang.* >/dev/null 2>&1; then
        dev_editable && dev_probe_sglang
        rc=$?
        dev_pack
        exit $rc
    fi
    exit 0
fi

dev_install >"$OUT/install.log" 2>&1 || { tail -30 "$OUT/install.log"; exit 1; }
tail -3 "$OUT/install.log"
sgl_part || exit 1
ls "$T"/dev/installed/sglang.* >/dev/null 2>&1 || { echo "the sglang segment is not installed yet (carry the part named above)"; exit 1; }
dev_probe_sglang || { echo "the SGLang probe failed: $OUT/sglang_probe.txt"; dev_pack; exit 1; }
dev_env_sglang
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/versions.txt"
python3 -c 'import sglang, torch, transformers; print("sglang", sglang.__version__, "| torch", torch.__version__, "| transformers", transformers.__version__)' 2>&1 | tail -1 | tee -a "$OUT/versions.txt"
timeout $(( ${DEADLINE:-540} + 30 - ($(date +%s) - ROLLOUT_BENCH_START) )) python3 bench/rollout_sglang_part.py --deadline "${DEADLINE:-540}" 2>&1 | tee "$OUT/rollout_sglang.log" | grep -v '^{' | tail -40
echo "exit ${PIPESTATUS[0]}"
dev_pack
