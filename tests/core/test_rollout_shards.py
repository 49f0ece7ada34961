"""How the trainer hands prompts to rollout replicas (one replica = one rollout TP group).

An engine whose ranks step in lockstep (a data-parallel engine of several TP groups: each of them a replica with
prompts of its own) needs every one of its ranks to make the same engine calls, so every replica must get as many
prompts as every other. Worked by hand: 7 prompts over 4 replicas are padded to 8 with a copy of the first prompt and
cut into [0, 1], [2, 3], [4, 5], [6, 0]; the padding is dropped again when the rollouts come back.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from rl_core.backends import SamplingParams
from rl_core.batch import Batch
from rl_core.config.load import load_config
from rl_core.config.normalize import normalize
from rl_core.trainer.loop import Trainer

SHARDS = [[0, 1], [2, 3], [4, 5], [6, 0]]


def _sizes(gpus: int, tp: int):
    cfg = load_config(None, ["model.path=Qwen/Qwen2.5-0.5B", "trainer.device=cuda", f"trainer.n_gpus_per_node={gpus}",
                             f"rollout.tensor_model_parallel_size={tp}", "data.train_batch_size=8", "actor.ppo_mini_batch_size=8"])
    _, sizes, problems = normalize(cfg)
    assert problems == [], [p.render() for p in problems]
    return sizes


@pytest.mark.parametrize("gpus, tp", [(4, 1), (8, 2)])
def test_every_replica_gets_as_many_prompts(gpus, tp):
    """4 replicas (TP 1 on 4 ranks, TP 2 on 8): each rollout rank gets 2 prompts, the ranks of a TP group the same 2."""
    trainer = SimpleNamespace(sizes=_sizes(gpus, tp))
    prompts = Batch({"input_ids": torch.arange(7).unsqueeze(1)})
    args, pad = Trainer._rollout_args(trainer, prompts, SamplingParams())
    assert pad == 1 and len(args) == gpus
    assert [args[rank][0].tensors["input_ids"].flatten().tolist() for rank in range(gpus)] == [s for s in SHARDS for _ in range(tp)]


@pytest.mark.parametrize("gpus, tp", [(4, 1), (8, 2)])
def test_rollouts_come_back_in_order_without_the_padding(gpus, tp):
    """Each replica's answer once (not once per TP rank), its counters summed over replicas and its durations the
    slowest replica's (the engines sync / sleep at the same time), the padded row dropped."""
    trainer = SimpleNamespace(sizes=_sizes(gpus, tp))
    params = SamplingParams(n=2)
    args, pad = Trainer._rollout_args(trainer, Batch({"input_ids": torch.arange(7).unsqueeze(1)}), params)
    # each rank answers its prompts n = 2 times; each replica reports one empty response
    results = [Batch({"input_ids": shard.tensors["input_ids"].repeat_interleave(2, dim=0)},
                     meta={"rollout/empty_responses": 1, "rollout/weight_sync_s": 0.5 + rank // tp, "rollout/weight_sync_calls": 1})
               for rank, (shard, _) in enumerate(args)]
    out = Trainer._merge_rollouts(trainer, results, pad, params)
    assert out.tensors["input_ids"].flatten().tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6]
    assert out.meta["rollout/empty_responses"] == 4 and out.meta["rollout/weight_sync_calls"] == 4
    assert out.meta["rollout/weight_sync_s"] == 3.5  # replica 3's, the slowest of 0.5, 1.5, 2.5, 3.5
