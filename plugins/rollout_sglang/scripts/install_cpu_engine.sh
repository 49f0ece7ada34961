#!/usr/bin/env bash
# Install the SGLang engine for CPU into the *active* virtual environment.
#
# PyPI has no CPU build of SGLang: a plain `pip install sglang` pulls ~4.3 GB of CUDA wheels
# (sglang-kernel, flashinfer, torch 2.14). Following the project's ENVIRONMENT.md (SGLang row):
#   1. torch==2.13.0 first: on these machines the +cpu build is a local wheel.
#   2. sglang==0.5.23 with --no-deps, then the pure-Python requirements a CPU run imports,
#      in one pip call pinned to that torch (nothing CUDA: no sglang-kernel, flashinfer,
#      flash-attn, torchvision, torchaudio, torchcodec, nvidia-*).
#   3. torchvision must not be importable (PyPI's builds are CUDA and break `import transformers`
#      on the CPU torch): removed if something pulled it in.
# SGLang then imports `sgl_kernel` and `torchvision` at module level; the plugin's tests provide
# import-only stand-ins for both (plugins/rollout_sglang/tests/cpu_shims, put on PYTHONPATH by
# tests/conftest.py). This script does not install them: they are test support.
#
# Usage: source /path/to/venv/bin/activate && bash install_cpu_engine.sh
#        (PYTHON=/path/to/venv/bin/python to name the interpreter instead)
set -euo pipefail

PY=${PYTHON:-python}
if ! "$PY" -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)' && [[ "${RL_SGLANG_ALLOW_SYSTEM:-0}" != 1 ]]; then
    echo "install_cpu_engine.sh: $($PY -c 'import sys; print(sys.executable)') is not in a virtual environment;" \
         "activate one first (SGLang pins its own torch and transformers), or set RL_SGLANG_ALLOW_SYSTEM=1" >&2
    exit 2
fi
TORCH_VERSION=${RL_SGLANG_TORCH_VERSION:-2.13.0}
SGLANG_VERSION=${RL_SGLANG_VERSION:-0.5.23}
PIP=("$PY" -m pip install --disable-pip-version-check --no-compile)  # no byte-compiling ~300 MB of Python: imports compile what they use
[[ "${CI:-}" == "true" || -n "${RL_SGLANG_QUIET:-}" ]] && PIP+=(-q)

# What sglang 0.5.23 declares, minus CUDA-only kernels and media packages, with its pins.
REQUIREMENTS=(
    aiohttp "anthropic>=0.20.0" "blobfile==3.0.0" "compressed-tensors==0.18.0" dill distro easydict einops
    fastapi gguf interegular IPython "llguidance>=1.7.6,<2.0.0" "mistral_common>=1.11.5" msgspec ninja
    "numba==0.65.1" numpy nvidia-ml-py "openai==2.8.0" "openai-harmony==0.0.4" orjson "outlines==0.1.11"
    packaging partial_json_parser pillow "prometheus-client>=0.20.0" psutil pybase64 pydantic
    "python-dateutil<3" python-multipart "pyzmq>=25.1.2" regex requests scipy "sentencepiece==0.2.1"
    setproctitle soundfile tiktoken "tokenizers==0.23.2" tqdm "transformers==5.19.0" "uvicorn>=0.51"
    uvloop watchfiles "xgrammar==0.2.7" xxhash zstandard
)

echo "[install_cpu_engine] torch==${TORCH_VERSION} (CPU wheel)"
"${PIP[@]}" "torch==${TORCH_VERSION}"
echo "[install_cpu_engine] sglang==${SGLANG_VERSION} (--no-deps) and its pure-Python requirements"
"${PIP[@]}" --no-deps "sglang==${SGLANG_VERSION}"
"${PIP[@]}" "torch==${TORCH_VERSION}" "${REQUIREMENTS[@]}"
"$PY" -m pip uninstall -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true

# Smoke test: torch is still the CPU build, and SGLang's engine module imports with the stand-ins.
SHIMS="$(cd "$(dirname "$0")/../tests/cpu_shims" && pwd)"
SGLANG_USE_CPU_ENGINE=1 PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$SHIMS" "$PY" - <<'PYEOF'
import importlib.metadata as md
import torch
from sglang.srt.entrypoints.engine import Engine  # noqa: F401
assert torch.__version__.startswith("2.13.0"), torch.__version__
print(f"[install_cpu_engine] ok: sglang {md.version('sglang')}, torch {torch.__version__}")
PYEOF
