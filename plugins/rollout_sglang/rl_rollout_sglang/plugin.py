"""Entry point of rl-rollout-sglang: the ``sglang`` rollout card and its checks.

Light on purpose: the resolver reads this module for every ``rlcore check``,
so nothing here imports SGLang (or torch) at import time. The engine is
imported by the factory, :func:`rl_rollout_sglang.engine.build`, inside a
worker; :func:`check_engine_kwargs` imports SGLang's argument list only when
``rollout.engine_kwargs`` holds keys it must look up.

What the core resolver checks from the card alone, and is not repeated here:
the engine is installed (``sglang``; the problem names the package to
install), its version is in ``engine_versions`` (outside it: an error, or a
warning with ``RL_CORE_ALLOW_UNTESTED_ENGINE=1``), devices, TP that divides
the devices and stays within ``max_tp``, and weight formats.
"""

from __future__ import annotations

from rl_core import hookimpl
from rl_core.cards import RolloutCard
from rl_core.problems import Problem
from rl_core.rollout.engine_kwargs import bucket_size_problems, engine_kwargs_problems

#: ``rollout.engine_kwargs`` keys of this plugin (taken out before the rest goes to ``sglang.Engine``).
ADAPTER_KEYS = ("weight_sync_bucket_mb", "server_url", "server_timeout_s", "share_prefill")
#: ``sglang.Engine`` arguments rl-core sets from its own config.
FROM_CONFIG = {
    "model_path": "model.path",
    "tokenizer_path": "model.tokenizer_path",
    "dtype": "model.dtype",
    "trust_remote_code": "model.trust_remote_code",
    "json_model_override_args": "model.override_config",
    "random_seed": "trainer.seed",
    "tp_size": "rollout.tensor_model_parallel_size",
    "ep_size": "rollout.expert_parallel_size",
    "enable_memory_saver": "rollout.enable_sleep",
    "device": "trainer.device",
}


def sglang_argument_names() -> set[str] | None:
    """What ``sglang.Engine(**kwargs)`` accepts in the installed SGLang (its ServerArgs; None when not importable here)."""
    try:
        import inspect

        from sglang.srt.server_args import ServerArgs

        return set(inspect.signature(ServerArgs).parameters)
    except Exception:  # noqa: BLE001 - not installed or broken: the resolver reports the engine itself
        return None


def check_engine_kwargs(config) -> list[Problem]:
    """The server URL and the weight-sync bucket size in range; the rest arguments of the installed SGLang."""
    problems = []
    kwargs = dict(config.rollout.engine_kwargs or {})
    url = kwargs.get("server_url")
    if url is not None and not (isinstance(url, str) and url.startswith(("http://", "https://"))):
        problems.append(
            Problem(
                key="rollout.engine_kwargs.server_url",
                what=f"{url!r} is not an http(s) URL",
                fix="set it to the running SGLang server's address, e.g. http://127.0.0.1:30000, or remove it to start the engine in each worker",
            )
        )
    if url and config.trainer.nnodes > 1:
        problems.append(
            Problem(
                key="rollout.engine_kwargs.server_url",
                what=f"one SGLang server at {url} cannot serve {config.trainer.nnodes} nodes",
                why="weight sync hands tensors to the server through the operating system, so it must run on the worker's machine",
                fix="remove rollout.engine_kwargs.server_url (each worker then starts its own engine), or train on one node",
            )
        )
    problems += bucket_size_problems(kwargs)
    if "share_prefill" in kwargs and not isinstance(kwargs["share_prefill"], bool):
        problems.append(Problem(key="rollout.engine_kwargs.share_prefill", what=f"must be true or false, got {kwargs['share_prefill']!r}",
                                why="true prefills each prompt once before its n samples are sent, so they share it through the radix cache",
                                fix="rollout.engine_kwargs.share_prefill=true (the default)"))
    rest = {k: v for k, v in kwargs.items() if k not in ADAPTER_KEYS}
    if not url:  # a running server was started with its own arguments: nothing here goes to an engine
        unknown = [k for k in rest if k not in FROM_CONFIG]
        accepted = sglang_argument_names() if unknown else None  # importing SGLang takes seconds: only when needed
        problems += engine_kwargs_problems(rest, accepted, engine="SGLang", own=ADAPTER_KEYS, from_config=FROM_CONFIG)
    return problems


SGLANG_ROLLOUT = RolloutCard(
    name="sglang",
    factory="rl_rollout_sglang.engine:build",
    fp8=True,  # rollout.precision=fp8: quantization="fp8", kv_cache_dtype="fp8_e4m3" (rl_rollout_correction.precision)
    description="SGLang offline engine in each worker (or a running server); TP by SGLang; memory release / resume on GPU",
    devices={"cpu", "cuda"},
    max_tp=8,
    weight_formats={"hf"},
    logprobs=True,
    memory_fraction=True,  # reserves rollout.gpu_memory_utilization of the GPU
    lora_adapters=True,  # LoRA through SGLang's load_lora_adapter_from_tensors (rl_rollout_sglang.lora)
    moe_parallel={"ep"},  # SGLang's ep_size (rollout.expert_parallel_size = TP); DP attention (attn_dp_size) not run
    engine="sglang",
    engine_versions="==0.5.17||==0.5.23",  # 0.5.17: H100 bf16 (test_sglang_gpu.py); 0.5.23: CPU
    engine_install=(
        "GPU: pip install 'sglang==0.5.17' (the release tested on an H100, torch 2.11); CPU: PyPI has no CPU build (pip install sglang pulls ~4 GB of CUDA wheels "
        "that do not run there): follow the rl-rollout-sglang README's CPU install (scripts/install_cpu_engine.sh)"
    ),
    checks=(check_engine_kwargs,),
)


@hookimpl
def rl_core_register_rollout_backends(register):
    register(SGLANG_ROLLOUT)
