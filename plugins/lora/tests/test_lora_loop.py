"""A LoRA GRPO job end to end on CPU (issue #32): the reference is the actor with adapters off (no ref model is
built), every sync to the hf rollout is verified, the rollout samples the trained policy, hf_final is the adapter folder."""

from __future__ import annotations

import pytest
from rl_core.config.load import load_config
from rl_core.plan.resolver import resolve
from rl_core.trainer.loop import Trainer
from rl_core_testing.tiny_run import read_metrics, write_tiny_run

pytest.importorskip("peft")


def test_two_step_lora_job(tmp_path):
    cfg_path = write_tiny_run(tmp_path, **{"model.lora_rank": 8, "model.lora_alpha": 16.0, "actor.optim.lr": 1e-2,
                                          "actor.use_kl_loss": True, "actor.kl_loss_coef": 0.1})
    stack, problems = resolve(load_config(cfg_path))
    assert stack is not None, [p.render() for p in problems]
    assert stack.config.ref.enable
    trainer = Trainer(stack, progress=False)
    worker = getattr(getattr(trainer.cluster, "main", trainer.cluster), "_local", None)
    from rl_lora.sync import sync_adapters

    # rollout.lora_sync=auto with the hf rollout: rl-lora's weight_sync hook, the frozen base sent once (at start-up)
    assert worker is not None and worker._feature_sync is sync_adapters and worker._base_sent
    sent = []
    engine_load = worker.rollout.load_weights
    worker.rollout.load_weights = lambda *a, **k: sent.append(1) or engine_load(*a, **k)
    try:
        trainer.fit()
        assert not sent, "after start-up only the adapters go to the hf rollout"
        from tests.e2e.test_loop import _rollout_matches_actor

        gap = _rollout_matches_actor(trainer)
    finally:
        trainer.close()
    rows = read_metrics(tmp_path / "out")
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["actor/kl_loss"] >= 0 for r in rows) and rows[1]["actor/kl_loss"] > 0  # the adapters moved away from the reference
    assert gap < 1e-4, f"rollout log-probs differ from the actor's by {gap} after sync"
    final = tmp_path / "out" / "hf_final"  # a PEFT adapter folder (trainer.save_merged_lora=false)
    assert (final / "adapter_config.json").is_file() and not (final / "config.json").exists() and not (final / "merged").exists()
    from safetensors.torch import load_file

    adapters = load_file(str(final / "adapter_model.safetensors"))
    assert adapters and all(".lora_" in k for k in adapters)
    assert any(k.endswith("lora_B.weight") and v.abs().sum() > 0 for k, v in adapters.items())  # B starts at zero: trained
