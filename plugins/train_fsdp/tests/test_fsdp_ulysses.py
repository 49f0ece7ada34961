"""Ulysses sequence parallelism in the fsdp backend on the CPU (gloo, 2 processes): SP 2 equals SP 1; a GRPO job runs."""

from __future__ import annotations

import subprocess
import sys

import attrs
import pytest
import torch
from rl_core.config.sections import evolve_key
from rl_core.backends import WorkerContext
from rl_core_testing.distributed import run_distributed
from rl_core_testing.mixed_lengths import loss_and_grads, mixed_length_batch
from rl_core_testing.tiny_run import read_metrics, write_tiny_run
from rl_core_testing.train_conformance import default_config
from rl_train_fsdp.engine import FSDPBackend

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPTS = [2, 30, 11]
RESPONSES = [90, 3, 41]  # packed: 177 tokens, padded to 178 for 2 ranks (an odd total: the padding segment is exercised)


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir):
    # 4 query heads, 1 key / value head: SP 2 splits the query heads and repeats the key / value head (as verl does)
    return tiny_model_dir("llama", heads=4, kv_heads=1)


def _cfg(model_dir, sp: int, fsdp_size: int = -1):
    cfg = default_config(model_dir)
    fsdp = attrs.evolve(cfg.actor.fsdp_config, fsdp_size=fsdp_size)
    return evolve_key(attrs.evolve(cfg, actor=attrs.evolve(cfg.actor, ulysses_sequence_parallel_size=sp)), "actor.fsdp_config", fsdp)


def _sp_rank(rank, world, model_dir, role, fsdp_size=-1):
    backend = FSDPBackend(role, _cfg(model_dir, 2, fsdp_size), WorkerContext(rank=rank, world_size=world))
    assert backend.seq_parallel is not None and backend.seq_parallel.size == 2
    if fsdp_size > 0:  # hybrid sharding: world / fsdp_size model copies
        assert tuple(next(backend.model.parameters()).device_mesh.shape) == (world // fsdp_size, fsdp_size)
    loss, grads, heads = loss_and_grads(backend, mixed_length_batch(PROMPTS, RESPONSES, seed=3))
    return {"loss": loss, "grads": grads, "heads": {k: getattr(heads, k) for k in ("log_probs", "entropy", "values")}}


@pytest.mark.dist
@pytest.mark.parametrize("role, fsdp_size", [("actor", -1), ("critic", -1), ("actor", 1)], ids=["actor", "critic", "actor-hsdp"])
def test_sp2_equals_sp1(model_dir, role, fsdp_size):
    outs = run_distributed(_sp_rank, 2, model_dir, role, fsdp_size)
    batch = mixed_length_batch(PROMPTS, RESPONSES, seed=3)
    loss, grads, heads = loss_and_grads(FSDPBackend(role, _cfg(model_dir, 1), WorkerContext()), batch)
    mask = batch.tensors["response_mask"].bool()
    for out in outs:  # every rank of the group holds the whole micro-batch's heads and loss
        torch.testing.assert_close(out["loss"], loss, rtol=1e-5, atol=1e-6)
        for field, ref in (("log_probs", heads.log_probs), ("entropy", heads.entropy), ("values", heads.values)):
            if ref is not None:
                torch.testing.assert_close(out["heads"][field].detach()[mask], ref.detach()[mask], rtol=1e-4, atol=1e-5, msg=lambda m: f"{field}: {m}")
        for name, g in grads.items():
            torch.testing.assert_close(out["grads"][name], g, rtol=1e-4, atol=1e-6, msg=lambda m: f"{name}: {m}")


@pytest.mark.slow
@pytest.mark.dist
def test_two_step_grpo_job_with_sp2(tmp_path):
    cfg = write_tiny_run(tmp_path, nprocs=2, steps=2, actor__ulysses_sequence_parallel_size=2)
    check = subprocess.run([sys.executable, "-m", "rl_core", "check", str(cfg)], capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "2 / 2 (tp*pp*sp) = 1" in check.stdout, check.stdout  # one data-parallel rank: the SP group shares its data
    run = subprocess.run([sys.executable, "-m", "rl_core", "train", str(cfg), "--no-progress"], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rows = read_metrics(tmp_path / "out")
    assert [r["step"] for r in rows] == [1, 2]
    assert all(torch.isfinite(torch.tensor(r["actor/grad_norm"])) for r in rows if "actor/grad_norm" in r)


def test_check_refuses_a_head_count_sp_does_not_divide(tmp_path):
    # the tiny model has 4 heads: SP 3 cannot split them
    cfg = write_tiny_run(tmp_path, nprocs=3, steps=1, actor__ulysses_sequence_parallel_size=3, data__train_batch_size=3)
    check = subprocess.run([sys.executable, "-m", "rl_core", "check", str(cfg)], capture_output=True, text=True, timeout=300)
    assert check.returncode != 0
    text = check.stdout + check.stderr
    assert "actor.ulysses_sequence_parallel_size" in text and "4 attention heads" in text and "[1, 2, 4]" in text, text
