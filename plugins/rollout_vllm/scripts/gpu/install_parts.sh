#!/usr/bin/env bash
# On the GPU machine: reassemble the parts from build_parts.sh and install the wheels.
#
#   bash install_parts.sh PARTS_DIR [TARGET]
# PARTS_DIR  holds part-00, part-01, ... (and vllm-wheels.tar.sha256 if you copied it)
# TARGET     default /tmp/site: installed with --target, so the image's own packages (torch, ...) stay as
#            they are; then `export PYTHONPATH=TARGET`. TARGET=--user or a venv's site-packages work too.
# Offline: --no-index --no-deps, the set is the closure. Prints `import vllm` and torch versions at the end.
set -euo pipefail
PARTS=${1:?usage: install_parts.sh PARTS_DIR [TARGET]}
TARGET=${2:-/tmp/site}
PY=${PYTHON:-python3}
work=$(mktemp -d)
cat "$PARTS"/part-* >"$work/vllm-wheels.tar"
if [[ -f "$PARTS/vllm-wheels.tar.sha256" ]]; then
    (cd "$work" && sha256sum -c "$PARTS/vllm-wheels.tar.sha256" --status) \
        || { echo "[install_parts] checksum mismatch: a part is missing or truncated" >&2; exit 1; }
fi
mkdir -p "$work/wheels"
tar -xf "$work/vllm-wheels.tar" -C "$work/wheels"
"$PY" -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target "$TARGET" "$work"/wheels/*.whl
rm -rf "$work"
PYTHONPATH="$TARGET${PYTHONPATH:+:$PYTHONPATH}" "$PY" -c \
    'import torch, vllm; print(f"[install_parts] ok: vllm {vllm.__version__}, torch {torch.__version__}, cuda {torch.version.cuda}")'
