#!/usr/bin/env bash
# The numerics-heavy tests under other CPU kernel choices, on one machine (issue 55: a compiled-vs-eager test passed on
# the developers' CPUs and failed on an Intel CPU with AMX). Usage, in a venv with the project installed:
#     bash .ci/kernels.sh [CHOICE...] [-- PYTEST_ARGS...]      CHOICE: avx2 (the default: avx2 default), default,
#                                                             avx512 (AVX-512 without AMX), native (nothing forced)
# A choice sets what torch 2.13 and its libraries read at start-up:
#   ATEN_CPU_CAPABILITY   eager ATen's vectorised kernels (default = scalar, avx2, avx512; never above the CPU's) and
#                         inductor's generated C++ (it picks its vector ISA from the same variable: default = none)
#   MKL_ENABLE_INSTRUCTIONS  oneMKL's float32 GEMM kernels (SSE4_2, AVX2, AVX512)
#   ONEDNN_MAX_CPU_ISA    oneDNN's kernels (bfloat16 matmuls: AMX where allowed; SSE41, AVX2, AVX512_CORE_BF16)
# Each choice runs with its own inductor cache (TORCHINDUCTOR_CACHE_DIR, removed after): torch 2.13 reuses a kernel
# compiled under another ATEN_CPU_CAPABILITY from a shared cache (seen: NaN losses under avx2 after an avx512 run).
# The tests' tolerances come from the dtype and the reduction size (tests/numerics.py), so any of these passes.
set -euo pipefail
cd "$(dirname "$0")/.."
# the files whose tests compare two computations of the same numbers with tolerances tighter than their dtype's
# worst case: compiled vs eager, kernels vs reference, micro-batched / packed / shared-prompt vs plain; and the
# tolerances' own float64 AdamW reference against torch's (fused) AdamW kernels
FILES=(
    tests/infra/test_numerics_helpers.py
    plugins/train_fsdp/tests/test_fsdp_lora.py
    plugins/train_fsdp/tests/test_fsdp_compile_layers.py
    tests/core/test_logprobs.py
    plugins/lora/tests/test_lora.py
    tests/core/test_micro_batches.py
    tests/core/test_shared_prompt.py
    tests/core/test_loss_scale.py
    plugins/train_fsdp/tests/test_fsdp_packing.py
    plugins/train_fsdp/tests/test_fsdp_engine.py::test_compiled_decoder_layers_give_the_same_update
)
choices=() args=()
while (($#)); do
    if [ "$1" = -- ]; then shift; args=("$@"); break; fi
    choices+=("$1"); shift
done
((${#choices[@]})) || choices=(avx2 default)
for choice in "${choices[@]}"; do
    case $choice in
        default) env=(ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2 ONEDNN_MAX_CPU_ISA=SSE41) ;;
        avx2) env=(ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2) ;;
        avx512) env=(ATEN_CPU_CAPABILITY=avx512 MKL_ENABLE_INSTRUCTIONS=AVX512 ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16) ;;
        native) env=() ;;
        *) echo "kernels.sh: unknown kernel choice '$choice'; use default, avx2, avx512 or native" >&2; exit 2 ;;
    esac
    cache=$(mktemp -d "${TMPDIR:-/tmp}/rl-core-inductor-$choice.XXXXXX")
    t=$SECONDS
    seen=$(env "${env[@]}" python -c 'import torch; print(torch.backends.cpu.get_cpu_capability())')
    echo "[kernels] $choice (${env[*]:-nothing forced}; torch reports $seen)"
    rc=0
    env "${env[@]}" TORCHINDUCTOR_CACHE_DIR="$cache" python -m pytest -q -p no:cacheprovider "${FILES[@]}" "${args[@]}" || rc=$?
    rm -rf "$cache"
    echo "[kernels] $choice took $((SECONDS - t)) s (exit $rc)"
    ((rc == 0)) || exit "$rc"
done
