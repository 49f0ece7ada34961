"""Registers the ``fsdp`` train backend (imports nothing heavy)."""

from __future__ import annotations

from rl_core import hookimpl
from rl_core.cards import TrainCard
from rl_core.problems import Problem


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


FSDP_CARD = TrainCard(
    name="fsdp",
    factory="rl_train_fsdp.engine:FSDPBackend",
    description="torch FSDP2 (fully_shard) data-parallel sharding of any HF causal LM; bf16 mixed precision on GPU",
    devices={"cpu", "cuda"},
    parallelism={"dp", "fsdp", "ulysses"},  # Ulysses sequence parallelism (actor.ulysses_sequence_parallel_size, rl_train_fsdp.ulysses)
    roles={"actor", "critic", "ref"},
    export_formats={"hf"},
    on_policy_without_old_log_probs=True,
    state_sharding="data",  # FSDP2 shards parameters, gradients and optimizer state over every rank
    default=True,  # the train backend of a config without train.name
    lora=True,  # the actor's LoRA adapters (peft), the reference = adapters off (rl_core.lora)
    offload=True,  # actor.fsdp_config.param_offload / optimizer_offload on one device (rl_train_fsdp.offload)
    engine="torch",
    engine_versions=">=2.6",
    options="rl_core.card_options:Options",  # train.options: none (a Megatron option given with train.name=fsdp is refused)
    checks=(check_hybrid_sharding,),
)


@hookimpl
def rl_core_register_train_backends(register):
    register(FSDP_CARD)
