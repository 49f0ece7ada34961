#!/usr/bin/env bash
# Build the wheel set that puts verl + vLLM on the GPU machine (no package registry there), as parts small enough
# to travel one per device call (the working tree that travels is at most 64 MiB).
#
# Run here, in the repository root (a machine WITH registry access):
#   bash bench/verl/build_parts.sh [PART_MB]        # default 56
# Writes, all under the git-ignored .gpu/:
#   .gpu/vllm/wheels/        vLLM 0.26.0's closure (../shared/gpu/vllm-0.26-wheels.txt; the rollout_vllm script fetches it)
#   .gpu/verl/wheels/        bench/verl/wheels-verl-0.9.1.txt (verl, Ray, hydra, ...)
#   .gpu/verl/wheels.tar     both sets and MANIFEST ("GROUP FILE" a line), then split into
#   .gpu/vp00/ .gpu/vp01/ ...  one part a folder (carry one per call); the last one also holds wheels.tar.sha256
# On the GPU machine: bench/verl/run_verl_gpu.sh (its header says how the parts are carried).
set -euo pipefail
PART_MB=${1:-56}
VLLM_LIST=${VLLM_LIST:-../shared/gpu/vllm-0.26-wheels.txt}
VERL_LIST=${VERL_LIST:-bench/verl/wheels-verl-0.9.1.txt}
PY=${PYTHON:-python3}
[[ -f $VLLM_LIST ]] || VLLM_LIST=/work/shared/gpu/vllm-0.26-wheels.txt
mkdir -p .gpu/vllm .gpu/verl/wheels

# vLLM's closure: the rollout plugin's script downloads and checks each file by name.
bash plugins/rollout_vllm/scripts/gpu/build_parts.sh "$VLLM_LIST" .gpu/vllm 58 >/dev/null

# verl's set: each file by name and version, for the tags in its file name.
tags=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
      --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
      --platform manylinux1_x86_64)
sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$VERL_LIST" | while read -r group file; do
    [[ -f .gpu/verl/wheels/$file ]] && continue
    IFS=- read -r -a f <<<"${file%.whl}"
    dist=${f[0]}; version=${f[1]}
    if [[ $dist == antlr4_python3_runtime ]]; then   # source release only: build the pure-Python wheel
        "$PY" -m pip wheel -q --no-deps -w .gpu/verl/wheels "antlr4-python3-runtime==$version"
    else
        "$PY" -m pip download -q --no-deps "${tags[@]}" -d .gpu/verl/wheels "$dist==$version" 2>&1 | grep -v '^WARNING: Location' || true
    fi
    [[ -f .gpu/verl/wheels/$file ]] || { echo "[verl parts] pip did not save $file" >&2; exit 1; }
done

# one tarball: MANIFEST + every listed file, then parts
work=.gpu/verl/tar && rm -rf "$work" && mkdir -p "$work"
{ sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$VERL_LIST"
  sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' -e 's/^/site /' "$VLLM_LIST"; } >"$work/MANIFEST"
while read -r group file; do
    src=.gpu/verl/wheels/$file; [[ -f $src ]] || src=.gpu/vllm/wheels/$file
    ln -f "$src" "$work/$file"
done <"$work/MANIFEST"
tar -C "$work" -cf .gpu/verl/wheels.tar .
rm -rf "$work" .gpu/verl/part-* .gpu/vp[0-9][0-9]
split -b "${PART_MB}m" -d -a 2 .gpu/verl/wheels.tar .gpu/verl/part-
for p in .gpu/verl/part-*; do
    n=${p##*-}; mkdir -p ".gpu/vp$n" && ln -f "$p" ".gpu/vp$n/"
done
(cd .gpu/verl && sha256sum wheels.tar | cut -d' ' -f1 >"../vp$n/wheels.tar.sha256")
echo "[verl parts] $(tar -tf .gpu/verl/wheels.tar | grep -c whl) wheels, tarball: $(du -h .gpu/verl/wheels.tar | cut -f1), $(ls -d .gpu/vp[0-9][0-9] | wc -l) parts (.gpu/vp00 .. .gpu/vp$n)"
