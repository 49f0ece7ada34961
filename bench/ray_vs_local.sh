#!/usr/bin/env bash
# The reference GRPO job (bench/reference/grpo_reference.yaml, Qwen2.5-0.5B shape, random weights, 5 steps) with one rank
# per GPU on a 2-GPU machine, twice: in-process placement (LocalCluster, spawned ranks, NCCL) and through Ray
# (rl-placement-ray's RayCluster: a local Ray instance started by the run, one actor per GPU). Writes both timing tables and the
# per-step comparison to $REPORT (default bench/results/ray_vs_local_2gpu.md; copies, logs and metrics in $OUT
# when that folder exists, as on the device machine).
#
#   bash bench/ray_vs_local.sh parts      # here (registry access): Ray 2.60 cp312 wheels -> .gpu/ray_p0, .gpu/ray_p1
#   # on the GPU machine, one call per part (the 64 MiB carry limit):
#   #   carry .gpu/ray_p0:  mkdir -p /tmp/rayparts && cp .gpu/ray_p0/* /tmp/rayparts/
#   #   carry .gpu/ray_p1 .gpu/qwen05b-gpt2 .gpu/gsm8k:  bash bench/ray_vs_local.sh install run
#   SMOKE=1 bash bench/ray_vs_local.sh run   # the same two runs on a CPU: tiny model, 2 worker processes, gloo
#
# Extra key=value overrides go to both runs: RUN_ARGS="trainer.total_training_steps=10".
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-5}
RUN_ROOT=${RUN_ROOT:-/tmp/ray_vs_local}

parts() {
    local whl=.gpu/ray_whl
    rm -rf "$whl" .gpu/ray_p0 .gpu/ray_p1 && mkdir -p "$whl" .gpu/ray_p0 .gpu/ray_p1
    # the GPU image has filelock, packaging, pyyaml, requests (transformers needs them); the rest of Ray's closure,
    # and tensordict (rl-core needs it; the image has none):
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --dest "$whl" \
        --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
        ray==2.60.0 click msgpack protobuf jsonschema jsonschema-specifications referencing rpds-py \
        tensordict==0.15.3 pyvers==0.2.3 cloudpickle
    tar -C "$whl" -cf .gpu/ray_wheels.tar .
    split -b 50m -d .gpu/ray_wheels.tar .gpu/ray_part-
    mv .gpu/ray_part-00 .gpu/ray_p0/ && mv .gpu/ray_part-01 .gpu/ray_p1/
    sha256sum .gpu/ray_wheels.tar | cut -d' ' -f1 > .gpu/ray_p1/ray_wheels.sha256
    ls -la .gpu/ray_p0 .gpu/ray_p1
}

install() {
    export PYTHONPATH=/tmp/site_ray${PYTHONPATH:+:$PYTHONPATH}
    python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . -e plugins/testing -e plugins/train_fsdp -e plugins/reward_rule -e plugins/placement_ray
    if python3 -c 'import ray' 2>/dev/null; then return 0; fi
    mkdir -p /tmp/rayparts && cp .gpu/ray_p1/* /tmp/rayparts/
    cat /tmp/rayparts/ray_part-* > /tmp/ray_wheels.tar
    [ "$(sha256sum /tmp/ray_wheels.tar | cut -d' ' -f1)" = "$(cat /tmp/rayparts/ray_wheels.sha256)" ] || { echo "ray wheels: checksum mismatch (send .gpu/ray_p0 first)"; return 1; }
    rm -rf /tmp/ray_whl && mkdir -p /tmp/ray_whl && tar -C /tmp/ray_whl -xf /tmp/ray_wheels.tar
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site_ray /tmp/ray_whl/*.whl
    python3 -c 'import ray, torch; print("ray", ray.__version__, "| torch", torch.__version__, "| gpus", torch.cuda.device_count())'
}

run() {
    export PYTHONPATH=/tmp/site_ray${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 RAY_USAGE_STATS_ENABLED=0
    rm -rf "$RUN_ROOT" && mkdir -p "$RUN_ROOT"
    local cfg args
    if [ "${SMOKE:-0}" = 1 ]; then
        cfg=$(python3 -c "
import sys; from pathlib import Path; sys.path.insert(0, '.')
from tests.e2e.helpers import write_tiny_run
print(write_tiny_run(Path('$RUN_ROOT/tiny'), nprocs=2, steps=2))")
        args=(trainer.device=cpu trainer.total_training_steps=2)
        export RAY_AUTH_MODE=disabled
    else
        local model=${MODEL:-.gpu/qwen05b-gpt2}
        [ -d "$model" ] || model=.gpu/qwen05b
        cfg=bench/reference/grpo_reference.yaml  # 8 prompts x 8 samples, 256 new tokens: 32 sequences per rank
        args=(model.path="$model" model.random_init=true "data.train_files=[.gpu/gsm8k/train.parquet]"
              trainer.device=cuda trainer.total_training_steps="$STEPS" actor.ppo_micro_batch_size_per_gpu=32)
    fi
    args+=(trainer.nnodes=1 trainer.n_gpus_per_node=2 trainer.save_freq=-1 "trainer.loggers=[console,jsonl]")
    # shellcheck disable=SC2206
    args+=(${RUN_ARGS:-})
    local env_vars='{env_vars: {NCCL_NVLS_ENABLE: "0", TORCH_SYMM_MEM_DISABLE_MULTICAST: "1", NVSHMEM_DISABLE_NVLS: "1"}}'
    echo "== in-process placement (LocalCluster)"
    python3 -m rl_core train "$cfg" --no-progress "${args[@]}" trainer.placement=local trainer.output_dir="$RUN_ROOT/local" 2>&1 | tee "$RUN_ROOT/local.log" | grep -v "^step " || true
    echo "== Ray placement (RayCluster, a local Ray instance)"
    python3 -m rl_core train "$cfg" --no-progress "${args[@]}" trainer.placement=ray "ray.runtime_env=$env_vars" trainer.output_dir="$RUN_ROOT/ray" 2>&1 | tee "$RUN_ROOT/ray.log" | grep -v "^step " || true
    report
}

report() {
    export PYTHONPATH=/tmp/site_ray${PYTHONPATH:+:$PYTHONPATH}
    local out=${REPORT:-bench/results/ray_vs_local_2gpu.md}
    [ "${SMOKE:-0}" = 1 ] && out=${REPORT:-$RUN_ROOT/ray_vs_local_smoke.md}
    {
        echo "# The reference GRPO job, one rank per GPU: in-process placement vs Ray"
        echo
        python3 -c 'import torch, platform; gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"; print(f"device: {gpu} x {max(torch.cuda.device_count(), 1)}, torch {torch.__version__}, python {platform.python_version()}")'
        python3 -c 'import ray; print(f"ray {ray.__version__}")'
        echo; echo "command: bash bench/ray_vs_local.sh run ${RUN_ARGS:-}"; echo
        echo "## in-process (trainer.placement=local)"; echo
        python3 bench/timing_table.py "$RUN_ROOT/local/metrics.jsonl"
        echo; echo "## Ray (trainer.placement=ray)"; echo
        grep -E "^(ray: |  rank [0-9]+ -> )" "$RUN_ROOT/ray.log" | sed 's/^/    /' || true
        echo
        python3 bench/timing_table.py "$RUN_ROOT/ray/metrics.jsonl"
        echo; echo "## per step"; echo
        python3 - "$RUN_ROOT/local/metrics.jsonl" "$RUN_ROOT/ray/metrics.jsonl" <<'EOF'
import json, statistics, sys
local, ray = ([json.loads(l) for l in open(p) if l.strip()] for p in sys.argv[1:3])
print("| step | local step (s) | ray step (s) | local reward | ray reward | local pg_loss | ray pg_loss |")
print("|---:|---:|---:|---:|---:|---:|---:|")
for a, b in zip(local, ray):
    print(f"| {a['step']} | {a['timing_s/step']:.2f} | {b['timing_s/step']:.2f} | {a.get('reward/mean', float('nan')):.4f} | {b.get('reward/mean', float('nan')):.4f} | {a.get('actor/pg_loss', float('nan')):.4g} | {b.get('actor/pg_loss', float('nan')):.4g} |")
if len(local) > 1 and len(ray) > 1:
    med = lambda rows: statistics.median(r["timing_s/step"] for r in rows[1:])
    print(f"\nmedian step time after the first: local {med(local):.2f} s, ray {med(ray):.2f} s")
EOF
    } > "$out"
    cat "$out"
    if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then  # the device machine's folder that comes back
        cp "$out" "$OUT/" && cp "$RUN_ROOT"/*.log "$OUT/"
        cp "$RUN_ROOT/local/metrics.jsonl" "$OUT/local.metrics.jsonl" && cp "$RUN_ROOT/ray/metrics.jsonl" "$OUT/ray.metrics.jsonl"
    fi
}

[ $# -gt 0 ] || { echo "usage: $0 parts|install|run|report ..."; exit 2; }
for step in "$@"; do "$step"; done
