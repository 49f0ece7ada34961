"""LoRA and CPU offload on a sharded model (FSDP2 over 2 gloo processes, issue #32).

Sharded LoRA: the same update as unsharded LoRA on the concatenated batch. Sharded offload (either
``actor.fsdp_config.*_offload`` switch): FSDP2's ``CPUOffloadPolicy``, the same update as without it, bit for bit.
"""

from __future__ import annotations

import attrs
import pytest
import torch
from rl_core.config.sections import evolve_key
from rl_core.backends import WorkerContext
from rl_core_testing.distributed import run_distributed
from rl_core_testing.train_conformance import PROMPTS_PER_STEP, default_config, make_step_batch, rank_shard, single_rank_order
from rl_train_fsdp.engine import build_engine

pytest.importorskip("peft", reason="LoRA needs peft (pip install rl-lora)")
pytestmark = [pytest.mark.dist, pytest.mark.usefixtures("one_thread")]


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir):
    return tiny_model_dir("qwen2", hidden=32, layers=2)


def _cfg(model_dir, *, rank=0, offload=False):
    cfg = default_config(model_dir)
    a = cfg.actor
    actor = attrs.evolve(
        a, ppo_mini_batch_size=PROMPTS_PER_STEP, ppo_epochs=1, entropy_coeff=0.0,
        optim=attrs.evolve(a.optim, lr=1e-2, lr_warmup_steps=0, lr_scheduler="constant", grad_clip=0.0),
    )
    actor = evolve_key(actor, "fsdp_config", attrs.evolve(a.fsdp_config, param_offload=offload, optimizer_offload=offload))
    return attrs.evolve(cfg, model=attrs.evolve(cfg.model, lora_rank=rank, lora_alpha=2.0 * rank), actor=actor,
                        critic=attrs.evolve(cfg.critic, enable=False))


def _two_updates(model_dir, cfg, rank, world):
    step = make_step_batch(model_dir)
    actor = build_engine("actor", cfg, WorkerContext(rank=rank, world_size=world))
    shard = rank_shard(step, rank, world)
    metrics = [actor.update(shard), actor.update(shard)]
    state = actor.model._get_fsdp_state()._fsdp_param_group
    weights = {n: t.detach().clone() for n, t in actor.named_weights()}
    return {"metrics": metrics, "weights": weights, "policy": type(state.offload_policy).__name__,
            "trainable": sum(p.numel() for p in actor.model.parameters() if p.requires_grad)}


def _ranks(rank, world, model_dir):
    return {name: _two_updates(model_dir, _cfg(model_dir, **kw), rank, world)
            for name, kw in (("lora", dict(rank=4)), ("lora_offload", dict(rank=4, offload=True)), ("full", {}), ("full_offload", dict(offload=True)))}


def test_sharded_lora_and_sharded_offload(model_dir):
    outs = run_distributed(_ranks, 2, model_dir, timeout=300)
    step = make_step_batch(model_dir)
    single = build_engine("actor", _cfg(model_dir, rank=4), WorkerContext())
    order = single_rank_order(step, 2, 2)
    ref = [single.update(order), single.update(order)]
    ref_weights = dict(single.named_weights())
    for o in outs:
        assert o["lora"]["policy"] == o["full"]["policy"] == "OffloadPolicy"  # FSDP2's no-offload policy
        assert o["lora_offload"]["policy"] == o["full_offload"]["policy"] == "CPUOffloadPolicy"
        assert o["lora"]["trainable"] < o["full"]["trainable"] / 4  # only the adapters train
        for name, w in o["lora"]["weights"].items():  # sharded LoRA == unsharded LoRA on the whole batch
            torch.testing.assert_close(w, ref_weights[name], rtol=1e-4, atol=1e-5)
        for got, want in zip(o["lora"]["metrics"], ref):
            assert got["loss"] == pytest.approx(want["loss"], rel=1e-4, abs=1e-6)
            assert got["grad_norm"] == pytest.approx(want["grad_norm"], rel=1e-3), (o["lora"]["metrics"], ref, o["full"]["metrics"])
        for plain, offloaded in (("lora", "lora_offload"), ("full", "full_offload")):  # offload changes nothing
            assert o[offloaded]["metrics"] == o[plain]["metrics"]
            for name, w in o[plain]["weights"].items():
                assert torch.equal(o[offloaded]["weights"][name], w), (offloaded, name)
    for name, w in outs[0]["full_offload"]["weights"].items():
        assert torch.equal(outs[1]["full_offload"]["weights"][name], w)
