"""A 2-step GRPO job with ``rollout.name=vllm`` and ``train.name=fsdp`` on CPU, through ``rlcore train``.

Same tiny set-up as the core's end-to-end tests (``tests/e2e/helpers.py``),
with a model whose head size the CPU attention kernels support.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from rl_core_testing.tiny_run import write_tiny_run

try:
    import vllm  # noqa: F401
except Exception as exc:  # noqa: BLE001
    pytest.skip(
        "needs the vLLM engine (pip install 'rl-rollout-vllm[gpu]' on GPU; on CPU run "
        f"plugins/rollout_vllm/scripts/install_cpu_engine.sh in a separate venv): {type(exc).__name__}: {exc}",
        allow_module_level=True,
    )
pytest.importorskip("rl_train_fsdp", reason="needs the rl-train-fsdp plugin (pip install -e plugins/train_fsdp)")

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

def write_run(tmp: Path, *, nprocs: int = 1, steps: int = 2) -> Path:
    return write_tiny_run(
        tmp,
        nprocs=nprocs,
        steps=steps,
        model=dict(arch="qwen2", hidden=128, layers=2, heads=2, kv_heads=1),  # head_dim 64: vLLM's CPU kernels
        rollout__name="vllm",
        trainer__test_freq=steps,
        rollout__calculate_log_probs=True,  # the rollout_corr/* gap every step (the default, null, asks on steps 1, 11, ...)
        trainer__val_before_train=True,
    )


def _train(config: Path, *overrides: str, timeout: int = 540, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**(env or os.environ), "RL_CORE_PLUGINS": "", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.run(
        [sys.executable, "-m", "rl_core", "train", "--no-progress", str(config), *overrides],
        capture_output=True, text=True, env=env, timeout=timeout,
    )


def _check_run(tmp: Path, res: subprocess.CompletedProcess) -> list[dict]:
    assert res.returncode == 0, f"rlcore train failed ({res.returncode}):\n{res.stdout[-3000:]}\n{res.stderr[-6000:]}"
    rows = [json.loads(line) for line in (tmp / "out" / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [r for r in rows if r.get("step", 0) >= 1]
    assert [r["step"] for r in steps] == [1, 2], rows
    for row in steps:
        for key in ("reward/mean", "actor/pg_loss", "actor/grad_norm", "timing_s/gen", "timing_s/sync_weights", "response_length/mean",
                    "rollout_corr/log_prob_abs_diff_max", "rollout_corr/log_prob_abs_diff_mean", "rollout_corr/kl", "rollout_corr/log_prob_gap_frac"):
            assert key in row, (key, sorted(row))
            assert math.isfinite(row[key]), (key, row[key])
    assert any("val/reward_mean" in r for r in rows), "validation (greedy vLLM generation) did not run"
    from safetensors.torch import load_file

    before, after = load_file(str(tmp / "model" / "model.safetensors")), load_file(str(tmp / "out" / "hf_final" / "model.safetensors"))
    assert any(not torch.equal(before[k], after[k]) for k in before if k in after), "no weight changed after two updates"
    return steps


def test_two_step_grpo_vllm_fsdp_one_process(tmp_path):
    cfg = write_run(tmp_path)
    res = _train(cfg)
    _check_run(tmp_path, res)


@pytest.mark.dist
def test_two_step_grpo_vllm_fsdp_two_ranks(tmp_path):
    """FSDP over 2 gloo ranks; each rank's vLLM engine is one rollout replica (external launcher)."""
    cfg = write_run(tmp_path, nprocs=2)
    res = _train(cfg)
    _check_run(tmp_path, res)


def test_rollout_log_probs_match_the_fsdp_actor_after_sync(tmp_path):
    """In-process loop: after an update and a weight sync, vLLM's log-probs equal the FSDP actor's."""
    import attrs
    from rl_core.config.load import load_config
    from rl_core.plan.resolver import resolve
    from rl_core.trainer.loop import Trainer

    cfg = write_run(tmp_path, steps=1)
    stack, problems = resolve(load_config(cfg, ["trainer.test_freq=-1"]))
    assert stack is not None, [p.render() for p in problems]
    trainer = Trainer(stack, progress=False)
    try:
        trainer.fit()
        prompts = trainer.train_loader.next_batch()
        params = attrs.evolve(trainer.sampling(step=99), logprobs=True, temperature=0.8)
        gen = trainer.generate(prompts, params)
        parts = trainer._train_call("compute_log_prob", gen, params.temperature, False)
    finally:
        trainer.close()
    actor = torch.cat([p["log_probs"] for p in parts])
    mask = gen["response_mask"].bool()
    gap = (actor[mask] - gen["rollout_log_probs"][mask]).abs().max().item()
    assert gap < 1e-3, f"vLLM log-probs differ from the FSDP actor's by {gap} after the sync"


@pytest.mark.dist
def test_tp_group_across_two_ray_nodes(tmp_path):
    """Rollout TP 2 over two Ray nodes (trainer.nnodes=2 x 1, trainer.placement=ray against a running two-node
    cluster): one vLLM engine whose TP group has a worker on each node (rl-core's ranks), generating, trained, and
    synced with every worker's weights verified (a stale worker stops the run: test_vllm_conformance's TP 2 sync test)."""
    pytest.importorskip("ray", reason="needs Ray in the engine's venv (pip install 'ray==2.60.*'): a real two-node cluster")
    from rl_core_testing.ray_cluster import TwoNodeCluster

    (tmp_path / "ray").mkdir()
    cluster = TwoNodeCluster(tmp_path / "ray")
    try:
        cfg = write_run(tmp_path)
        res = _train(cfg, "trainer.nnodes=2", "trainer.n_gpus_per_node=1", "trainer.placement=ray", f"ray.address={cluster.address}",
                     "rollout.tensor_model_parallel_size=2", timeout=900, env={**cluster.env, "RL_CORE_PLUGINS": ""})
        rows = _check_run(tmp_path, res)
    finally:
        cluster.stop()
    placed = dict(re.findall(r"rank (\d) -> node \S+ \((\w+),", res.stdout + res.stderr))
    assert len(placed) == 2 and placed["0"] != placed["1"], res.stdout[-3000:]  # one rank (one vLLM TP worker) per node
    # vLLM's own engine-config line, forwarded from the Ray workers
    assert "tensor_parallel_size=2," in res.stdout + res.stderr, "the engine did not start with TP 2"
    assert all(r["timing_s/sync_weights"] > 0 for r in rows)
    # step 2 generated with the weights synced after step 1's update: vLLM's log-probs (TP 2, a worker per node) equal
    # the FSDP actor's own, which they would not if either worker had kept its old shard
    for row in rows:
        assert row["rollout_corr/log_prob_abs_diff_max"] < 1e-3, row
