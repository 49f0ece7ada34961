#!/usr/bin/env bash
# Build the wheel set that puts vLLM on a GPU machine with no package registry, in parts.
#
# Run on a machine WITH registry access (any OS/CPU: pip downloads for the target's tags):
#   bash build_parts.sh [LIST] [OUT_DIR] [PART_MB]
# LIST     one wheel file name a line (default: vllm-0.26-cu130-py312.txt beside this script: vLLM 0.26.0's
#          closure for CPython 3.12 / torch 2.11 / CUDA 13, minus what that GPU image already has)
# OUT_DIR  default ./vllm-gpu-parts; gets wheels/ (the files), vllm-wheels.tar and part-00, part-01, ...
# PART_MB  default 58: each part stays under a 64 MiB transfer limit
#
# Every wheel is fetched by name and version for the list's tags (--no-deps: the list is the closure), and
# the file pip saved must be the one named in the list, so a changed index cannot slip another build in.
# Then: copy the parts to the GPU machine (one per transfer if you must) and run install_parts.sh there.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
LIST=$(realpath "${1:-$HERE/vllm-0.26-cu130-py312.txt}")
OUT=${2:-./vllm-gpu-parts}
PART_MB=${3:-58}
PY=${PYTHON:-python3}
PYVER=${RL_WHEELS_PYTHON_VERSION:-3.12}
mkdir -p "$OUT/wheels"
missing=0
while IFS= read -r file || [[ -n "$file" ]]; do
    file=${file%%#*}; file=${file//[[:space:]]/}
    [[ -z "$file" ]] && continue
    [[ -f "$OUT/wheels/$file" ]] && continue
    # {dist}-{version}(-{build})?-{python}-{abi}-{platform}.whl: ask pip for exactly those tags
    stem=${file%.whl}
    IFS=- read -r -a f <<<"$stem"
    dist=${f[0]}; version=${f[1]}; pytag=${f[-3]}; abi=${f[-2]}; plat=${f[-1]}
    tags=()
    for p in ${plat//./ }; do tags+=(--platform "$p"); done
    for v in ${pytag//./ }; do [[ $v == cp3* ]] && tags+=(--implementation cp); break; done
    [[ $abi != none ]] && tags+=(--abi "$abi")
    echo "[build_parts] $dist==$version"
    "$PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
        --python-version "$PYVER" "${tags[@]}" -d "$OUT/wheels" "$dist==$version" 2>&1 | grep -v '^WARNING: Location' || true
    if [[ ! -f "$OUT/wheels/$file" ]]; then
        echo "[build_parts] pip did not save $file (it saved: $(ls -t "$OUT/wheels" | head -1))" >&2
        missing=1
    fi
done <"$LIST"
[[ $missing == 0 ]] || { echo "[build_parts] some wheels differ from the list; fix the list or the tags" >&2; exit 1; }

# Only the listed files go into the tarball (a re-run with another list must not mix sets).
(cd "$OUT/wheels" && \
 sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' "$LIST" | tar -cf ../vllm-wheels.tar -T -)
rm -f "$OUT"/part-*
split -b "${PART_MB}m" -d -a 2 "$OUT/vllm-wheels.tar" "$OUT/part-"
(cd "$OUT" && sha256sum vllm-wheels.tar > vllm-wheels.tar.sha256)
echo "[build_parts] $(wc -l < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$LIST")) wheels, $(du -h "$OUT/vllm-wheels.tar" | cut -f1), parts:"
ls -l "$OUT"/part-*
