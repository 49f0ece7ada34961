"""Context parallelism (train.context_parallel_size) on the Megatron engine: CP 2 on 2 gloo processes against one process.

Both CP ranks get the whole step (one replica), as the controller dispatches it; each holds half of every sequence's
columns (chunks r and 3 - r of 4). The step's sequences are not a multiple of 2 x CP long, so the right padding of the
split is exercised too.
"""

from __future__ import annotations

import attrs
import pytest
import torch

pytest.importorskip("megatron.core", reason="needs megatron-core (pip install megatron-core==0.16.1)")

from rl_core.backends import WorkerContext  # noqa: E402
from rl_core_testing.distributed import run_distributed  # noqa: E402
from rl_core_testing.tiny_model import make_tiny_model_dir  # noqa: E402
from rl_core_testing.train_conformance import default_config, make_step_batch  # noqa: E402

pytestmark = pytest.mark.megatron


def _config(model_dir, cp: int):
    cfg = default_config(model_dir)
    return attrs.evolve(cfg, train=attrs.evolve(cfg.train, name="megatron", context_parallel_size=cp))


def run_cp(rank: int, world: int, config, step) -> dict:
    """Log-probs and entropy, one update (the gradients the optimizer steps with, captured), critic values."""
    from rl_train_megatron.engine import build_engine

    ctx = WorkerContext(rank=rank, world_size=world, seed=0)
    out = {}
    actor = build_engine("actor", config, ctx)
    backend = actor.backend
    real_step, grads = backend.step, {}

    def step_and_keep_grads():
        grads.update({n: p.grad.detach().clone() for n, p in backend.model.named_parameters() if p.grad is not None})
        real_step()

    backend.step = step_and_keep_grads
    out["log_probs"] = actor.compute_log_prob(step, temperature=1.0, with_entropy=True)
    out["metrics"] = actor.update(step)
    out["grads"] = grads
    out["layout"] = (backend.topo.cp, backend.topo.cp_rank, backend.topo.dp)
    actor.shutdown()
    critic = build_engine("critic", config, ctx)
    out["values"] = critic.compute_values(step)
    critic.shutdown()
    return out


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_tiny_model_dir(tmp_path_factory.mktemp("cp_model"), "qwen3", seed=0)


@pytest.fixture(scope="module")
def step(model_dir):
    return make_step_batch(model_dir, rows=4)


@pytest.fixture(scope="module")
def runs(model_dir, step):
    one = run_cp(0, 1, _config(model_dir, 1), step)
    two = run_distributed(run_cp, 2, _config(model_dir, 2), step, timeout=240)
    return one, two


def test_split_is_megatrons_load_balanced_chunks():
    from rl_train_megatron.context_parallel import SeqSplit, gathered_order

    a, b = SeqSplit.of(7, 2, 0, "cpu"), SeqSplit.of(7, 2, 1, "cpu")  # 7 columns -> padded to 8, chunks of 2
    assert (a.s_pad, a.columns.tolist(), b.columns.tolist()) == (8, [0, 1, 6, 7], [2, 3, 4, 5])
    assert torch.cat([a.columns, b.columns])[gathered_order(8, 2)].tolist() == list(range(8))
    mask = a.mask(torch.tensor([[0, 1, 1, 1, 1, 1, 1]]))[0, 0]  # left padding in column 0; column 7 is the split's padding
    assert mask[0].tolist() == [True] * 8  # query column 0 sees only itself, a padding key
    assert mask[2].tolist() == [True, False, False, False, False, False, False, True]  # query column 6: columns 1..6


@pytest.mark.dist
def test_cp2_gives_the_one_process_log_probs_loss_and_gradients(runs, step):
    one, two = runs
    mask = step.tensors["response_mask"].bool()
    assert [o["layout"] for o in two] == [(2, 0, 1), (2, 1, 1)]
    for rank, out in enumerate(two):
        for key in ("log_probs", "entropy"):
            torch.testing.assert_close(out["log_probs"][key][mask], one["log_probs"][key][mask], atol=1e-5, rtol=0, msg=lambda m: f"rank {rank} {key}: {m}")
        for key in ("loss", "grad_norm", "actor/pg_loss", "actor/entropy"):
            a, b = out["metrics"][key], one["metrics"][key]
            assert abs(a - b) <= 1e-5 * max(1.0, abs(b)), f"rank {rank} {key}: {a} vs {b}"
        assert set(out["grads"]) == set(one["grads"]) and one["grads"]
        for name, g in one["grads"].items():
            torch.testing.assert_close(out["grads"][name], g, atol=1e-6, rtol=1e-4, msg=lambda m: f"rank {rank} grad {name}: {m}")
        torch.testing.assert_close(out["values"][mask], one["values"][mask], atol=1e-5, rtol=0, msg=lambda m: f"rank {rank} values: {m}")
