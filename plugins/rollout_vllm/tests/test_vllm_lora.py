"""LoRA GRPO with the vLLM engine, adapter-only sync (issue #32): base weights once, then adapters through vLLM's
LoRA layers in memory; every sync verified (rl_core.weight_sync_check), a stale adapter stops the run.

One engine start for the whole module (a 2-step job in-process, then checks on the same worker).
"""

from __future__ import annotations

import attrs
import pytest
import torch

try:
    import vllm  # noqa: F401
except Exception as exc:  # noqa: BLE001
    pytest.skip(
        "needs the vLLM engine (on CPU: plugins/rollout_vllm/scripts/install_cpu_engine.sh in a separate venv): "
        f"{type(exc).__name__}: {exc}",
        allow_module_level=True,
    )
pytest.importorskip("rl_train_fsdp", reason="needs the rl-train-fsdp plugin (pip install -e plugins/train_fsdp)")
pytest.importorskip("peft", reason="LoRA needs peft (pip install rl-lora; peft==0.21.2 in the engine's venv)")

from rl_core.weight_sync_check import StaleWeightsError, load_verified  # noqa: E402
from rl_lora.sync import load_adapter_verified  # noqa: E402
from rl_core_testing.tiny_run import write_tiny_run  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def _worker(trainer):
    cluster = getattr(trainer.cluster, "main", trainer.cluster)
    worker = getattr(cluster, "_local", None)
    assert worker is not None, "expected the in-process worker of a one-rank local run"
    return worker


@pytest.fixture(scope="module")
def lora_job(tmp_path_factory):
    """A 2-step LoRA GRPO job through the Trainer with rollout.name=vllm (lora_sync auto -> adapter)."""
    from rl_core.config.load import load_config
    from rl_core.plan.resolver import resolve
    from rl_core.trainer.loop import Trainer

    tmp = tmp_path_factory.mktemp("vllm_lora")
    cfg = write_tiny_run(
        tmp, steps=2, model=dict(arch="qwen2", hidden=128, layers=2, heads=2, kv_heads=1),  # head_dim 64: vLLM's CPU kernels
        rollout__name="vllm", rollout__calculate_log_probs=True, trainer__test_freq=-1,
        model__lora_rank=8, model__lora_alpha=16, actor__optim__lr=1e-2,  # large steps: the adapters move visibly
    )
    stack, problems = resolve(load_config(cfg, []))
    assert stack is not None, [p.render() for p in problems]
    trainer = Trainer(stack, progress=False)
    worker = _worker(trainer)
    calls = {"load_weights": 0, "load_adapter": 0}
    engine = worker.rollout
    for method in calls:
        original = getattr(engine, method)

        def counted(*args, _original=original, _name=method, **kwargs):
            calls[_name] += 1
            return _original(*args, **kwargs)

        setattr(engine, method, counted)
    try:
        trainer.fit()
        yield trainer, worker, calls
    finally:
        trainer.close()


def test_adapter_only_sync_and_rollout_log_probs_match_the_trainer(lora_job):
    trainer, worker, calls = lora_job
    from rl_lora.sync import sync_adapters

    assert worker._feature_sync is sync_adapters
    # base weights went once (at start-up, before the counters); each update sent only the adapters
    assert calls["load_weights"] == 0 and calls["load_adapter"] >= 2, calls
    assert worker.rollout._lora_request.lora_int_id == worker._weight_version + 1
    prompts = trainer.train_loader.next_batch()
    params = attrs.evolve(trainer.sampling(step=99), logprobs=True, temperature=0.8)
    gen = trainer.generate(prompts, params)
    actor = torch.cat([p["log_probs"] for p in trainer._train_call("compute_log_prob", gen, params.temperature, False)])
    base = worker.actor.compute_log_prob(gen, temperature=params.temperature, reference=True)["log_probs"]  # adapters off
    mask = gen["response_mask"].bool()
    gap = (actor[mask] - gen["rollout_log_probs"][mask]).abs().max().item()
    moved = (actor[mask] - base[mask]).abs().max().item()
    assert gap < 1e-3, f"vLLM's log-probs differ from the trainer's LoRA policy by {gap}"
    assert moved > 10 * max(gap, 1e-4), f"the adapters hardly change the policy ({moved}): the test would not see a lost adapter"


def test_a_stale_or_missing_adapter_stops_the_run(lora_job):
    _, worker, _ = lora_job
    engine = worker.rollout
    old, config = worker.actor.lora_adapter()
    new = {name: t + 0.01 for name, t in old.items()}  # the next version's adapters
    version = worker._weight_version + 1

    class Stale:  # an engine that keeps the previous adapter under the new version
        def load_adapter(self, tensors, peft_config, v):
            engine.load_adapter(old, peft_config, v)

        def sample_weights(self, positions):
            return engine.sample_weights(positions)

    with pytest.raises(StaleWeightsError, match=rf"weight version {version}: the rollout engine 'vllm' \(its LoRA adapter of weight version {version}\) kept stale"):
        load_adapter_verified(Stale(), new, config, engine_name="vllm", version=version)

    class Lost(Stale):  # the adapter never arrives: the engine still generates with the previous one
        def load_adapter(self, tensors, peft_config, v):
            pass

    with pytest.raises(StaleWeightsError, match=rf"LoRA adapter of weight version {version + 1}\) kept stale weights: \d+ of {len(new)} tensors differ"):
        load_adapter_verified(Lost(), new, config, engine_name="vllm", version=version + 1)
    assert load_adapter_verified(engine, new, config, engine_name="vllm", version=version + 2) == len(new)


def test_merged_fallback_is_verified_against_the_trainer(lora_job):
    """rollout.lora_sync=merged's path (W + scale*B@A through load_weights) on the same engine: the engine's linear
    weights (packed away by vLLM's CPU kernels) are read back by probing its GEMMs, and compared with the trainer's view."""
    _, worker, _ = lora_job
    n = load_verified(worker.rollout, worker.actor.named_weights(), worker.actor.sample_weights, engine_name="vllm", version=99)
    assert n is not None and n > 10
    # a merged sync of the base weights without the adapters is not the trained policy
    with pytest.raises(StaleWeightsError, match="not the policy being trained"):
        load_verified(worker.rollout, worker.actor.named_base_weights(), worker.actor.sample_weights, engine_name="vllm", version=100)
