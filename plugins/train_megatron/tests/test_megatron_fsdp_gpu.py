"""``train.options.fully_shard`` on 2 GPUs over NCCL (the lead's device run; skipped without 2 CUDA devices).

What the CPU tests (tests/test_megatron_fsdp.py, gloo) cannot show: FSDP2's NCCL reduce-scatter / all-gather with the
sum this engine asks for, CUDA memory, and bf16 autocast over the gathered fp32 parameters. DP 2 fully sharded against
DP 2 plain on the same GPUs and the same halves of the step:

- float32: log-probs, loss, grad norm and the weights after two optimizer steps equal (1e-4: GPU kernels differ a little);
- the CUDA memory held after the update (parameters + AdamW state; gradients freed) is about half the plain run's;
- bfloat16 (``model.dtype``): the same losses to bf16 accuracy, finite, every weight trained.

    PYTHONPATH=/tmp/site:core:plugins/train_megatron python -m pytest -q plugins/train_megatron/tests/test_megatron_fsdp_gpu.py
"""

from __future__ import annotations

import attrs
import pytest
import torch

pytest.importorskip("megatron.core", reason="needs megatron-core (pip install megatron-core==0.16.1)")
if torch.cuda.device_count() < 2:
    pytest.skip("needs 2 CUDA devices (NCCL)", allow_module_level=True)

from rl_core.backends import WorkerContext  # noqa: E402
from rl_core_testing.distributed import run_distributed  # noqa: E402
from rl_core_testing.tiny_model import make_tiny_model_dir  # noqa: E402
from rl_core_testing.train_conformance import PROMPTS_PER_STEP, default_config, make_step_batch  # noqa: E402

pytestmark = [pytest.mark.megatron, pytest.mark.gpu]


def _config(model_dir, dtype: str, fully_shard: bool):
    cfg = default_config(model_dir)
    cfg = attrs.evolve(cfg, actor=attrs.evolve(cfg.actor, ppo_mini_batch_size=PROMPTS_PER_STEP), model=attrs.evolve(cfg.model, dtype=dtype))
    return attrs.evolve(cfg, train=attrs.evolve(cfg.train, name="megatron", options={"fully_shard": fully_shard}))


def run(rank: int, world: int, config, step, device: str = "cuda") -> dict:
    from rl_train_megatron import fully_sharded
    from rl_train_megatron.engine import build_engine

    half = len(step) // world
    mine = step.index(torch.arange(rank * half, (rank + 1) * half))
    actor = build_engine("actor", config, WorkerContext(rank=rank, world_size=world, device=device, seed=0))
    b = actor.backend
    out = {"sharded": b.stage is not None, "init": {n: w.detach().cpu().clone() for n, w in actor.named_weights()}}
    out["log_probs"] = actor.compute_log_prob(mine, temperature=1.0)["log_probs"].cpu()
    out["metrics"] = actor.update(mine)
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        out["allocated"] = torch.cuda.memory_allocated()
    out["bytes"] = fully_sharded.local_bytes(b.model, b.optimizer)
    out["weights"] = {n: w.detach().cpu().clone() for n, w in actor.named_weights()}
    actor.shutdown()
    return out


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_tiny_model_dir(tmp_path_factory.mktemp("fsdp_gpu_model"), "qwen2", hidden=512, layers=4, heads=8, kv_heads=2, seed=0)


@pytest.fixture(scope="module")
def step(model_dir):
    return make_step_batch(model_dir)


@pytest.fixture(scope="module", params=["float32", "bfloat16"])
def runs(request, model_dir, step):
    return request.param, {on: run_distributed(run, 2, _config(model_dir, request.param, on), step, backend="nccl", timeout=600) for on in (False, True)}


def test_fully_sharded_equals_plain_data_parallelism_on_nccl(runs):
    dtype, by = runs
    plain, sharded = by[False], by[True]
    assert [o["sharded"] for o in sharded] == [True, True] and [o["sharded"] for o in plain] == [False, False]
    tol = 1e-4 if dtype == "float32" else 2e-2
    for p, s in zip(plain, sharded):
        torch.testing.assert_close(s["log_probs"], p["log_probs"], atol=tol, rtol=0)
        for key in ("loss", "grad_norm"):
            assert s["metrics"][key] == pytest.approx(p["metrics"][key], rel=tol, abs=tol), key
        for name, w in p["weights"].items():
            assert torch.isfinite(s["weights"][name]).all(), name
            if dtype == "float32":
                torch.testing.assert_close(s["weights"][name], w, atol=1e-4, rtol=1e-4, msg=lambda m, name=name: f"{name}: {m}")
            else:
                assert not torch.equal(s["weights"][name], s["init"][name]) or name.endswith("norm.weight"), f"{name} was not trained"


def test_each_gpu_holds_about_half_the_state(runs):
    _, by = runs
    for p, s in zip(by[False], by[True]):
        assert s["bytes"] <= 0.55 * p["bytes"], (s["bytes"], p["bytes"])
        assert s["allocated"] <= 0.7 * p["allocated"], (s["allocated"], p["allocated"])
