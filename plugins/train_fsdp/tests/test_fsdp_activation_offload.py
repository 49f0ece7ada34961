"""verl's offload switches on the fsdp backend (issue #37): ``actor.fsdp_config.offload_policy`` (FSDP2's
CPUOffloadPolicy when sharded; on one device param_offload + optimizer_offload) and ``model.enable_activation_offload``
(the activations a training forward saves kept in host copies until backward, rl_train_fsdp.activations).

On the CPU every copy is host to host: these tests check the bookkeeping and that the update is the same bit for bit.
"""

from __future__ import annotations

from types import SimpleNamespace

import attrs
import pytest
import torch
from rl_core.config.sections import evolve_key
from rl_core.backends import WorkerContext
from rl_core_testing.train_conformance import PROMPTS_PER_STEP, default_config, make_step_batch

engine_mod = pytest.importorskip("rl_train_fsdp.engine", reason="needs the rl-train-fsdp plugin installed (pip install -e plugins/train_fsdp)")
CPU = WorkerContext(rank=0, world_size=1, device="cpu")
pytestmark = pytest.mark.usefixtures("one_thread")


def _cfg(model_dir, *, activation_offload=False, **fsdp):
    cfg = default_config(model_dir)
    a = cfg.actor
    actor = attrs.evolve(
        a, ppo_mini_batch_size=PROMPTS_PER_STEP, ppo_micro_batch_size_per_gpu=4, ppo_epochs=1, entropy_coeff=0.0,
        optim=attrs.evolve(a.optim, lr=1e-2, lr_warmup_steps=0, lr_scheduler="constant", grad_clip=0.0),
    )
    actor = evolve_key(actor, "fsdp_config", attrs.evolve(a.fsdp_config, **fsdp))
    return attrs.evolve(cfg, model=attrs.evolve(cfg.model, enable_activation_offload=activation_offload), actor=actor,
                        critic=attrs.evolve(cfg.critic, enable=False))


def test_offload_modes():
    from rl_train_fsdp.offload import offload_modes as modes

    f = SimpleNamespace(param_offload=False, optimizer_offload=False, offload_policy=True)
    assert modes("actor", f, False) == (True, True, False)  # one device: both of rl_train_fsdp.offload's mechanisms
    assert modes("actor", f, True) == (False, False, True)  # sharded: FSDP2's CPUOffloadPolicy
    assert modes("ref", f, True) == (False, False, False)
    f = SimpleNamespace(param_offload=True, optimizer_offload=False, offload_policy=False)
    assert modes("actor", f, False) == (True, False, False) and modes("actor", f, True) == (False, False, True)
    assert modes("critic", f, False) == (True, False, False) and modes("critic", None, False) == (False, False, False)


def test_critic_offload_gives_the_same_update(tiny_model_dir):
    """critic.fsdp_config (verl's critic.fsdp / critic.model.fsdp_config offload switches): the same values and update."""
    model_dir = tiny_model_dir("qwen2", hidden=32, layers=2)
    step = make_step_batch(model_dir)
    base = _cfg(model_dir)
    cfg = attrs.evolve(base, critic=attrs.evolve(base.critic, enable=True))
    off_cfg = evolve_key(cfg, "critic.fsdp_config", attrs.evolve(cfg.critic.fsdp_config, offload_policy=True))
    plain, off = engine_mod.build_engine("critic", cfg, CPU), engine_mod.build_engine("critic", off_cfg, CPU)
    assert off.backend.param_offload and off.backend.optimizer_offload and not plain.backend.param_offload
    assert plain.update(step) == off.update(step)
    assert torch.equal(plain.compute_values(step), off.compute_values(step))


def test_offload_policy_and_activation_offload_give_the_same_update(tiny_model_dir):
    model_dir = tiny_model_dir("qwen2", hidden=32, layers=2)
    step = make_step_batch(model_dir)
    plain = engine_mod.build_engine("actor", _cfg(model_dir), CPU)
    off = engine_mod.build_engine("actor", _cfg(model_dir, activation_offload=True, offload_policy=True), CPU)
    assert off.backend.param_offload and off.backend.optimizer_offload and off.backend.activation_offload
    for _ in range(2):
        assert plain.update(step) == off.update(step)
        hooks = off.backend.last_activations
        # every saved activation went to a host copy and came back once
        assert hooks is not None and hooks.packed > 0 and hooks.unpacked == hooks.packed and hooks.packed_bytes > 0
    sp, so = plain.local_state_dict(), off.local_state_dict()
    for n in sp["model"]:
        assert torch.equal(sp["model"][n], so["model"][n]), n
    off.backend.last_activations = None
    assert torch.equal(plain.compute_log_prob(step)["log_probs"], off.compute_log_prob(step)["log_probs"])
    assert off.backend.last_activations is None  # inference saves nothing: no hooks
