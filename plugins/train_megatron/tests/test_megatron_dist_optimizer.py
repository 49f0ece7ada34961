"""megatron-core's DistributedOptimizer (rl_train_megatron.dist_optimizer) against rl-core's ZeRO-1 (zero.py), on the CPU.

megatron-core 0.16.1 allocates its gradient buffers and a few flags on ``torch.cuda.current_device()`` / ``device='cuda'``
and checks parameter types by their CUDA names; :func:`_cuda_names_on_the_cpu` points those at the CPU for the duration
of one rank's run (test only: the engine never patches megatron-core, and on the CPU it runs ZeRO-1). Everything else
is megatron-core's own code: DistributedDataParallel's buffers and bucketed reduce-scatter (gloo), the
DistributedOptimizer's shards, its gradient norm and clipping, the parameter all-gather. Two updates (two optimizer
steps) must give ZeRO-1's losses, gradient norms and weights on one process and on two data-parallel processes with
``train.options.ddp_config.overlap_grad_reduce`` (the reduce-scatter started in the last micro-batch's backward).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from unittest import mock

import attrs
import pytest
import torch

pytest.importorskip("megatron.core", reason="needs megatron-core (pip install megatron-core==0.16.1)")

from rl_core_testing.adam_weights import assert_adam_weights_close  # noqa: E402
from rl_core_testing.distributed import run_distributed  # noqa: E402
from rl_core_testing.tiny_model import make_tiny_model_dir  # noqa: E402
from rl_core_testing.train_conformance import default_config, make_step_batch  # noqa: E402

pytestmark = pytest.mark.megatron


class _TorchOnTheCpu:
    """``torch`` as megatron-core's optimizer modules see it in this test: ``device='cuda'`` tensors made on the CPU."""

    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    def tensor(*a, device=None, **k):
        return torch.tensor(*a, device="cpu" if device == "cuda" else device, **k)

    @staticmethod
    def zeros(*a, device=None, **k):
        return torch.zeros(*a, device="cpu" if device == "cuda" else device, **k)


@contextlib.contextmanager
def _cuda_names_on_the_cpu():
    import megatron.core.optimizer.clip_grads as clip_grads
    import megatron.core.optimizer.distrib_optimizer as distrib_optimizer
    import megatron.core.optimizer.optimizer as optimizer
    import megatron.core.utils as utils

    tensor_type = torch.Tensor.type

    def cuda_type(self, *a, **k):  # the DistributedOptimizer accepts torch.cuda.FloatTensor parameters by name
        out = tensor_type(self, *a, **k)
        return out.replace("torch.", "torch.cuda.", 1) if not a and not k and isinstance(out, str) and ".cuda." not in out else out

    with contextlib.ExitStack() as stack:
        for module in (optimizer, clip_grads, distrib_optimizer, utils):
            stack.enter_context(mock.patch.object(module, "torch", _TorchOnTheCpu()))
        stack.enter_context(mock.patch.object(torch.Tensor, "type", cuda_type))
        stack.enter_context(mock.patch("torch.cuda.current_device", lambda: "cpu"))
        yield


def _run(rank: int, world: int, path: str, native: bool, overlap: bool) -> dict:
    from rl_core.backends import WorkerContext
    from rl_train_megatron import dist_optimizer
    from rl_train_megatron.engine import build_engine

    cfg = default_config(Path(path))
    options = {"ddp_config": {"overlap_grad_reduce": True, "bucket_size": 4096}} if overlap else {}
    cfg = attrs.evolve(cfg, train=attrs.evolve(cfg.train, name="megatron", distributed_optimizer=True, options=options))
    step = make_step_batch(Path(path))
    with _cuda_names_on_the_cpu() if native else contextlib.nullcontext():
        if native:  # what problem() would say on a GPU with ENABLED: nothing (the CPU is the only reason here)
            dist_optimizer.ENABLED = True
            dist_optimizer.problem = lambda backend, config: None
        engine = build_engine("actor", cfg, WorkerContext(rank=rank, world_size=world, seed=0))
        b = engine.backend
        out = {"native": b.native_optimizer is not None, "zero": b.zero is not None,
               "overlap": b.runs_micro_batches(), "init": {n: t.detach().clone() for n, t in engine.named_weights()}}
        out["metrics"] = [engine.update(step), engine.update(step)]
        out["weights"] = {n: t.detach().clone() for n, t in engine.named_weights()}
        engine.shutdown()
    return out


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(make_tiny_model_dir(tmp_path_factory.mktemp("distopt"), "qwen2", seed=0))


@pytest.mark.parametrize("world,overlap", [(1, False), (2, True)])
def test_megatron_cores_distributed_optimizer_gives_zero1s_updates(model_dir, world, overlap):
    ref = run_distributed(_run, world, model_dir, False, False, timeout=600)
    nat = run_distributed(_run, world, model_dir, True, overlap, timeout=600)
    assert all(r["zero"] and not r["native"] for r in ref)
    assert all(r["native"] and not r["zero"] and r["overlap"] == overlap for r in nat)
    for r, n in zip(ref, nat):  # every rank: the same numbers
        for m_ref, m_nat in zip(r["metrics"], n["metrics"]):
            for key in ("loss", "grad_norm", "actor/pg_loss", "actor/kl_loss", "lr"):
                assert m_nat[key] == pytest.approx(m_ref[key], rel=1e-5, abs=1e-6), key
        for name, w in r["weights"].items():
            assert_adam_weights_close(n["weights"][name], w, r["init"][name], name=name, atol=1e-6, rtol=1e-5)


def test_where_it_runs():
    """On the CPU (and anywhere before a device run enabled it) the engine says why it runs ZeRO-1."""
    from types import SimpleNamespace

    from rl_train_megatron import dist_optimizer

    topo = SimpleNamespace(pp=1, tp=1, cp=1)
    shape = SimpleNamespace(moe=False, qk_norm=False)
    backend = SimpleNamespace(topo=topo, vpp=1, shape=shape, sp=False, device=torch.device("cpu"), compute_dtype=torch.float32, router_replay=None)
    config = SimpleNamespace(train=SimpleNamespace(options={}))
    why = dist_optimizer.problem(backend, config)
    assert "the CPU" in why and ("not enabled" in why) == (not dist_optimizer.ENABLED)
    gpu = SimpleNamespace(**{**vars(backend), "device": torch.device("cuda")})
    with mock.patch.object(dist_optimizer, "ENABLED", True):
        assert dist_optimizer.problem(gpu, config) is None
        assert "pipeline stages" in dist_optimizer.problem(SimpleNamespace(**{**vars(gpu), "vpp": 2}), config)
        assert "offload" in dist_optimizer.problem(gpu, SimpleNamespace(train=SimpleNamespace(options={"param_offload": True})))


def test_ddp_config_keys_are_checked():
    from rl_train_megatron.options import ddp_config_problems

    assert ddp_config_problems({"overlap_grad_reduce": True, "bucket_size": 40_000_000}) == []
    bad = dict(ddp_config_problems({"overlap_param_gather": True, "bucket_size": 0, "overlap_grad_reduce": "yes", "nccl_ub": True}))
    assert set(bad) == {"overlap_param_gather", "bucket_size", "overlap_grad_reduce", "nccl_ub"}
    assert "not built here" in bad["overlap_param_gather"]
