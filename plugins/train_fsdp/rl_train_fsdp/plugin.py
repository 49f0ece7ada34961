"""Registers the ``fsdp`` train backend (imports nothing heavy)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from rl_core import hookimpl
from rl_core.cards import CheckCard, ConfigSectionCard, TrainCard
from rl_core.plan.long_context import model_config
from rl_core.problems import Problem, nearest_divisors

SP_KEY = "actor.ulysses_sequence_parallel_size"


def check_hybrid_sharding(config) -> list[Problem]:
    """actor.fsdp_config.fsdp_size (verl's hybrid sharding, HSDP): a divisor of the world size."""
    size, world = config.actor.fsdp_config.fsdp_size, config.trainer.nnodes * config.trainer.n_gpus_per_node
    if size == -1 or size == world:
        return []
    key = "actor.fsdp_config.fsdp_size"
    if world % size or size > world:
        return [Problem(key=key, what=f"is {size}, which does not divide the {world} ranks (trainer.nnodes x trainer.n_gpus_per_node) into model copies",
                        fix=f"set it to a divisor of {world}, or -1 to shard over all ranks")]
    return []


def check_expert_parallel(config) -> list[Problem]:
    """train.expert_model_parallel_size on the fsdp backend (rl_train_fsdp.experts): no expert TP, no LoRA with it."""
    t = config.train
    if t.expert_model_parallel_size == 1:
        return []
    if (t.expert_tensor_parallel_size or 1) > 1:
        return [Problem(key="train.expert_tensor_parallel_size", what=f"is {t.expert_tensor_parallel_size}: the fsdp backend splits the experts over "
                        "EP ranks, not within an expert (no tensor parallelism)", fix="set it to 1 (or null), or use train.name=megatron")]
    ep = t.expert_model_parallel_size
    if config.model.lora_rank > 0:
        return [Problem(key="train.expert_model_parallel_size", what=f"is {ep} with LoRA (model.lora_rank="
                        f"{config.model.lora_rank}): the fsdp backend does not build the two together", fix="set one of them off")]
    try:  # the model's config.json, when the path is a local folder
        data = json.loads((Path(os.path.expanduser(config.model.path)) / "config.json").read_text())
    except (OSError, ValueError, TypeError):
        return []
    data = {**data, **(config.model.override_config or {})} if isinstance(data, dict) else {}
    experts = data.get("num_experts", data.get("num_local_experts"))  # transformers 5 writes num_local_experts
    if not isinstance(experts, int) or experts < 2:
        return [Problem(key="train.expert_model_parallel_size", what=f"is {ep}, but {config.model.path!r} is not an MoE model (no num_experts in "
                        f"its config.json, model_type {data.get('model_type')!r}): there are no experts to spread over ranks",
                        fix="set train.expert_model_parallel_size=1")]
    if experts % ep:
        return [Problem(key="train.expert_model_parallel_size", what=f"EP {ep} does not divide the model's {experts} experts ({experts} % {ep} = {experts % ep})",
                        why="expert parallelism gives every rank of an EP group an equal share of each MoE layer's experts",
                        fix=f"set it to a divisor of {experts}: {', '.join(map(str, nearest_divisors(ep, experts)))}")]
    return []


def sequence_parallel_problems(config, registry=None) -> list[Problem]:
    """Ulysses (``actor.ulysses_sequence_parallel_size`` > 1, rl_train_fsdp.ulysses) runs on packed sequences: packing
    not turned off, a model the packed attention serves, and a size dividing the attention heads (the all-to-all gives
    each rank ``heads / size`` query heads; key / value heads it does not divide are repeated, as verl does)."""
    sp = int(config.actor.ulysses_sequence_parallel_size)
    if sp <= 1:
        return []
    problems = []
    if config.actor.use_remove_padding is False:
        problems.append(Problem(key="actor.use_remove_padding", what=f"is false but {SP_KEY}={sp}: Ulysses runs on packed sequences",
                                fix=f"remove actor.use_remove_padding (or set it true), or set {SP_KEY}=1"))
    cfg = model_config(config)
    if cfg is None:
        return problems  # the model folder's own problems are reported by the model-path probe
    from rl_train_fsdp.packing import PACKABLE_TYPES

    heads = cfg.get("num_attention_heads")
    kv = cfg.get("num_key_value_heads") or heads
    mtype = cfg.get("model_type")
    if mtype not in PACKABLE_TYPES:
        problems.append(Problem(key=SP_KEY, what=f"is {sp} but the model type {mtype!r} is not one the packed attention serves ({', '.join(sorted(PACKABLE_TYPES))})",
                                fix=f"set {SP_KEY}=1"))
    if isinstance(heads, int) and heads % sp:
        ok = [d for d in range(1, heads + 1) if heads % d == 0]
        problems.append(Problem(
            key=SP_KEY,
            what=f"is {sp} but the model has {heads} attention heads ({kv} key / value heads), and {heads} % {sp} = {heads % sp}: "
                 f"the all-to-all gives each rank heads / {sp} query heads",
            fix=f"choose a size that divides {heads} (and the number of devices): one of {ok}",
        ))
    return problems


FSDP_CARD = TrainCard(
    name="fsdp",
    factory="rl_train_fsdp.engine:FSDPBackend",
    description="torch FSDP2 (fully_shard) data-parallel sharding of any HF causal LM; bf16 mixed precision on GPU",
    devices={"cpu", "cuda"},
    # Ulysses sequence parallelism (actor.ulysses_sequence_parallel_size, rl_train_fsdp.ulysses); ep: an MoE model's
    # experts spread over train.expert_model_parallel_size ranks, tokens exchanged by all-to-all (rl_train_fsdp.experts)
    parallelism={"dp", "fsdp", "ulysses", "ep"},
    roles={"actor", "critic", "ref"},
    export_formats={"hf"},
    on_policy_without_old_log_probs=True,
    router_replay=True,  # MoE routing replay R2 / R3 in the actor's forwards (rl-routing-replay)
    images=True,  # prompts with images: the actor / ref forwards read them (rl-multimodal)
    state_sharding="data",  # FSDP2 shards parameters, gradients and optimizer state over every rank
    default=True,  # the train backend of a config without train.name
    lora=True,  # the actor's LoRA adapters (peft), the reference = adapters off (rl_lora)
    offload=True,  # actor.fsdp_config.param_offload / optimizer_offload on one device (rl_train_fsdp.offload)
    exact=True,  # rollout.exact: the actor / ref forwards are the Plan's LogProbForwardCard's (rl_train_fsdp.forward)
    engine="torch",
    engine_versions=">=2.6",
    options="rl_core.card_options:Options",  # train.options: none (a Megatron option given with train.name=fsdp is refused)
    checks=(check_hybrid_sharding, check_expert_parallel),
)


@hookimpl
def rl_core_register_train_backends(register):
    register(FSDP_CARD)


@hookimpl
def rl_core_register_checks(register) -> None:
    register(CheckCard(name="sequence_parallel", stage="files", order=40, factory=f"{__name__}:sequence_parallel_problems",
                       description="Ulysses sequence parallelism and packing on the model's attention"))


@hookimpl
def rl_core_register_config_sections(register):
    register(ConfigSectionCard(name="actor.fsdp_config", factory="rl_train_fsdp.config:FsdpConfig",
                               description="the actor's offload switches, gradient reduce dtype, hybrid sharding size, pad_to_length bucket (verl's names)"))
    register(ConfigSectionCard(name="critic.fsdp_config", factory="rl_train_fsdp.config:CriticFsdpConfig",
                               description="the critic's offload switches (verl's names)"))
