"""Registers the ``megatron`` train backend and its checks (imports neither torch nor megatron-core).

The checks read the model's ``config.json`` (with ``model.override_config``)
and report, one problem per key, a tensor-parallel size that does not divide
the attention heads, key/value heads, MLP width or vocabulary, and a
pipeline size that does not divide the layers. Architectures the conversion
cannot handle are declared on the card, so the resolver rejects them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from rl_core import hookimpl
from rl_core.cards import TrainCard
from rl_core.problems import Problem, nearest_divisors

ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM")


def _model_config(config) -> dict[str, Any] | None:
    if not config.model.path:
        return None
    try:
        data = json.loads((Path(os.path.expanduser(config.model.path)) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return {**data, **(config.model.override_config or {})} if isinstance(data, dict) else None


def check_parallel_sizes(config) -> list[Problem]:
    """TP must divide heads, KV heads, intermediate size and vocabulary; PP the layers."""
    data = _model_config(config)
    if data is None:
        return []
    problems = []
    tp, pp = config.train.tensor_model_parallel_size, config.train.pipeline_model_parallel_size
    heads = data.get("num_attention_heads")
    dims = [
        ("attention heads (num_attention_heads)", heads),
        ("key/value heads (num_key_value_heads)", data.get("num_key_value_heads") or heads),
        ("MLP width (intermediate_size)", data.get("intermediate_size")),
        ("vocabulary (vocab_size)", data.get("vocab_size")),
    ]
    for what, n in dims:
        if tp > 1 and isinstance(n, int) and n % tp:
            problems.append(
                Problem(
                    key="train.tensor_model_parallel_size",
                    what=f"Megatron TP {tp} does not divide the model's {n} {what} ({n} % {tp} = {n % tp})",
                    why="tensor parallelism gives every rank an equal share of the heads, the MLP and the vocabulary",
                    fix=f"set train.tensor_model_parallel_size to a divisor of {n}: {', '.join(map(str, nearest_divisors(tp, n)))}",
                )
            )
            break
    layers = data.get("num_hidden_layers")
    if pp > 1 and isinstance(layers, int) and layers % pp:
        problems.append(
            Problem(
                key="train.pipeline_model_parallel_size",
                what=f"Megatron PP {pp} does not divide the model's {layers} layers ({layers} % {pp} = {layers % pp})",
                why="each pipeline stage holds an equal share of the decoder layers",
                fix=f"set train.pipeline_model_parallel_size to a divisor of {layers}: {', '.join(map(str, nearest_divisors(pp, layers)))}",
            )
        )
    return problems


def check_unsupported_options(config) -> list[Problem]:
    """Train-side options of the HF models (and FSDP settings) that the Megatron GPT model does not have."""
    out = []
    if config.model.compile:
        out.append(Problem(
            key="model.compile",
            what="is not supported by the megatron train backend (it compiles HF decoder layers, which Megatron does not run)",
            fix="set model.compile=false with train.name=megatron, or use train.name=fsdp",
        ))
    if getattr(config.model, "enable_activation_offload", False):
        out.append(Problem(
            key="model.enable_activation_offload",
            what="is true, but the megatron train backend does not offload activations to host memory",
            fix="set model.enable_activation_offload=false with train.name=megatron (recomputation: train.options.transformer_config."
                "recompute_granularity), or use train.name=fsdp",
        ))
    if getattr(config.actor.fsdp_config, "fsdp_size", -1) != -1:
        out.append(Problem(
            key="actor.fsdp_config.fsdp_size",
            what=f"is {config.actor.fsdp_config.fsdp_size}, an FSDP setting (hybrid sharding): the megatron train backend lays out ranks by "
                 "train.tensor_model_parallel_size x pipeline_model_parallel_size x data parallelism",
            fix="set actor.fsdp_config.fsdp_size=-1 with train.name=megatron, or use train.name=fsdp",
        ))
    if getattr(config.actor.fsdp_config, "reduce_dtype", "float32") != "float32":
        out.append(Problem(
            key="actor.fsdp_config.reduce_dtype",
            what=f"is {config.actor.fsdp_config.reduce_dtype!r}, an FSDP setting: the megatron train backend reduces gradients in float32",
            fix="set actor.fsdp_config.reduce_dtype=float32 with train.name=megatron, or use train.name=fsdp",
        ))
    return out


MEGATRON_CARD = TrainCard(
    name="megatron",
    factory="rl_train_megatron.engine:MegatronBackend",
    description="megatron-core GPT models from HF Llama / Qwen2 configs; tensor (vocab-parallel log-probs) x pipeline x data parallelism",
    devices={"cpu", "cuda"},
    parallelism={"dp", "tp", "pp"},
    roles={"actor", "critic", "ref"},
    export_formats={"hf"},
    architectures=ARCHITECTURES,
    on_policy_without_old_log_probs=True,
    state_sharding="model",  # each rank holds its tensor x pipeline shard; data-parallel replicas hold copies
    engine="megatron-core",
    engine_versions=">=0.16,<0.17",
    checks=(check_parallel_sizes, check_unsupported_options),
)


@hookimpl
def rl_core_register_train_backends(register):
    register(MEGATRON_CARD)
