"""MoE routing replay in the parallel combination of verl's examples/grpo_trainer/run_deepseek_v4_flash_megatron.sh
(PP with a custom ``pipeline_model_parallel_layout``, EP, TP 1, CP 1, full uniform recomputation, param / grad /
optimizer offload, dynamic batch size, R3), scaled to 4 CPU processes: PP 2 (layout ``Et*3|tL``: 3 decoder layers on the
first stage, 1 on the last) x DP 2 with EP 2 over DP.

- the old-log-prob pass's recording (R2) and the replay of a random routing give one process's routing and log-probs
  (megatron-core numbers each stage's routers by the layout; dynamic micro-batches pick rows, the routing follows them);
- a 2-step ``rlcore train`` GRPO with the hf rollout recording the routing (R3): each step's old log-probs are the
  rollout's own.
"""

from __future__ import annotations

import attrs
import pytest
import torch

pytest.importorskip("megatron.core", reason="needs megatron-core (pip install megatron-core==0.16.1)")

from rl_core_testing.distributed import run_distributed  # noqa: E402
from rl_core_testing.tiny_model import make_tiny_model_dir  # noqa: E402
from rl_core_testing.tiny_run import read_metrics, write_tiny_run  # noqa: E402
from rl_core_testing.train_conformance import make_step_batch  # noqa: E402
from test_megatron_router_replay import _config, _random_routing, run_layout  # noqa: E402

pytestmark = [pytest.mark.megatron, pytest.mark.dist]

LAYOUT = "Et*3|tL"
RECOMPUTE = {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}
OFFLOAD = {"param_offload": True, "grad_offload": True, "optimizer_offload": True}


def _dsv4_like(config, *, layout: bool):
    """``config`` with the script's recomputation, offload and dynamic batch size (and, ``layout``, its custom layout)."""
    tc = {**config.train.options["transformer_config"], **RECOMPUTE, **({"pipeline_model_parallel_layout": LAYOUT} if layout else {})}
    train = attrs.evolve(config.train, options={**config.train.options, **OFFLOAD, "transformer_config": tc})
    actor = attrs.evolve(config.actor, use_dynamic_bsz=True, ppo_max_token_len_per_gpu=48)  # (several micro-batches of whole rows)
    return attrs.evolve(config, train=train, actor=actor)


def test_the_scripts_layout_records_and_replays_as_one_process(tmp_path):
    path = make_tiny_model_dir(tmp_path / "m", "qwen3_moe", hidden=32, layers=4, seed=0)
    step = make_step_batch(path)
    t = step.tensors
    routed = _random_routing((*t["input_ids"].shape, 4), 4, 2, t["attention_mask"])
    one = run_layout(0, 1, _dsv4_like(_config(path), layout=False), step, routed)
    assert (one["replayed"] - one["log_probs"]).abs().max() > 1e-3  # the random routing moves the log-probs
    config = _dsv4_like(_config(path, pp=2, ep=2), layout=True)
    outs = run_distributed(run_layout, 4, config, step, routed, False, timeout=500)
    for out in outs:
        sel = out["rows"]
        assert torch.equal(out["recorded"], one["recorded"][sel])
        torch.testing.assert_close(out["log_probs"], one["log_probs"][sel], atol=1e-5, rtol=0)
        torch.testing.assert_close(out["replayed"], one["replayed"][sel], atol=1e-5, rtol=0)


@pytest.mark.slow
def test_two_step_r3_grpo_in_the_scripts_layout(tmp_path):
    """``rlcore train``: the plan names R3, 2 steps run, and each step's old log-probs (the actor replaying the rollout's
    routing over 2 stages and 2 expert ranks) are the hf rollout's own."""
    import os
    import subprocess
    import sys

    from rl_core_testing.bounded_run import communicate_bounded

    options = {**OFFLOAD, "transformer_config": {**RECOMPUTE, "pipeline_model_parallel_layout": LAYOUT}}
    cfg = write_tiny_run(tmp_path, nprocs=4, steps=2, model={"arch": "qwen3_moe", "layers": 4, "hidden": 32}, train__name="megatron",
                         train__pipeline_model_parallel_size=2, train__expert_model_parallel_size=2, train__expert_tensor_parallel_size=1,
                         train__options=options, actor__router_replay="R3", actor__use_dynamic_bsz=True, actor__ppo_max_token_len_per_gpu=64,
                         rollout__return_routed_experts=True, rollout__calculate_log_probs=True, trainer__val_before_train=False)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.Popen([sys.executable, "-m", "rl_core", "train", str(cfg), "--no-progress"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    out = communicate_bounded(proc, timeout=900)
    assert proc.returncode == 0, out[-6000:]
    assert "MoE routing replay: R3: the " in out
    rows = read_metrics(tmp_path / "out")
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert row["rollout_corr/log_prob_abs_diff_max"] < 1e-4, row
        assert torch.isfinite(torch.tensor(row["actor/grad_norm"]))
