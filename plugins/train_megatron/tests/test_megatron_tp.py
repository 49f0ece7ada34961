"""Model parallelism on 2 CPU processes (gloo): TP 2 and PP 2 against one process and transformers, and checkpoint resumes.

Both ranks of a TP 2 (or PP 2) replica get the whole step (data parallel 1), as the controller dispatches it.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
import torch

pytest.importorskip("megatron.core", reason="needs megatron-core (pip install megatron-core==0.16.1)")

from rl_core.backends import WorkerContext  # noqa: E402
from rl_core_testing.adam_weights import assert_adam_weights_close, zero_grad_in_exact_arithmetic  # noqa: E402
from rl_core_testing.distributed import run_distributed  # noqa: E402
from rl_core_testing.rollout_conformance import reference_model  # noqa: E402
from rl_core_testing.tiny_model import make_tiny_model_dir  # noqa: E402
from rl_core_testing.train_conformance import default_config, make_step_batch  # noqa: E402

pytestmark = pytest.mark.megatron


def _config(model_dir, tp: int, pp: int = 1):
    cfg = default_config(model_dir)
    return attrs.evolve(cfg, train=attrs.evolve(cfg.train, name="megatron", tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp))


def _weights(engine) -> dict[str, torch.Tensor]:
    return {n: t.detach().clone() for n, t in engine.named_weights()}


def run_tp(rank: int, world: int, config, step, workdir: str) -> dict:
    from rl_train_megatron.engine import build_engine

    ctx = WorkerContext(rank=rank, world_size=world, seed=0)
    out = {}
    actor = build_engine("actor", config, ctx)
    out["init_weights"] = _weights(actor)
    out["log_probs"] = actor.compute_log_prob(step, temperature=1.0, with_entropy=True)
    out["metrics"] = actor.update(step)
    out["weights"] = _weights(actor)
    actor.save_checkpoint(str(Path(workdir) / "actor"))
    out["metrics_2"] = actor.update(step)
    out["weights_2"] = _weights(actor)
    actor.shutdown()
    critic = build_engine("critic", config, ctx)
    out["values"] = critic.compute_values(step)
    out["critic_metrics"] = critic.update(step)
    critic.shutdown()
    return out


def run_resume(rank: int, world: int, config, step, workdir: str) -> dict:
    from rl_train_megatron.engine import build_engine

    actor = build_engine("actor", config, WorkerContext(rank=rank, world_size=world, seed=0))
    actor.load_checkpoint(str(Path(workdir) / "actor"))
    out = {"loaded": _weights(actor), "metrics_2": actor.update(step), "weights_2": _weights(actor)}
    actor.shutdown()
    return out


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    # Qwen3 (tied embeddings, per-head q/k norms whose gradients are summed over TP ranks); Qwen2's qkv bias under TP is
    # covered by test_megatron_convert's round trips and the conformance suite
    return make_tiny_model_dir(tmp_path_factory.mktemp("tp_model"), "qwen3", seed=0)


@pytest.fixture(scope="module")
def step(model_dir):
    return make_step_batch(model_dir)


@pytest.fixture(scope="module")
def tp1(model_dir, step, tmp_path_factory):
    return run_tp(0, 1, _config(model_dir, 1), step, str(tmp_path_factory.mktemp("tp1")))


@pytest.fixture(scope="module", params=[(2, 1), (1, 2)], ids=["tp2", "pp2"])
def tp2(request, model_dir, step, tmp_path_factory):
    """TP 2 x PP 1, then TP 1 x PP 2 (one layer per stage; tied embeddings on both stages)."""
    tp, pp = request.param
    work = tmp_path_factory.mktemp(f"tp{tp}pp{pp}")
    outs = run_distributed(run_tp, 2, _config(model_dir, tp, pp), step, str(work), timeout=400)
    resumed = run_distributed(run_resume, 2, _config(model_dir, tp, pp), step, str(work), timeout=400)
    return outs, resumed


def _close(a: float, b: float, what: str) -> None:
    assert abs(a - b) <= 1e-5 * max(1.0, abs(b)), f"{what}: {a} vs {b}"


@pytest.mark.dist
def test_weights_round_trip_exactly_through_the_sharded_model(tp2, model_dir):
    hf = {k: v for k, v in reference_model(model_dir).state_dict().items() if k != "lm_head.weight"}  # tied
    for rank, out in enumerate(tp2[0]):
        assert set(out["init_weights"]) == set(hf), rank
        for name, t in hf.items():
            assert torch.equal(out["init_weights"][name], t), f"rank {rank}: {name}"


@pytest.mark.dist
def test_log_probs_and_entropy_match_transformers(tp2, step, model_dir):
    ref = reference_model(model_dir)
    t = step.tensors
    R = t["responses"].shape[1]
    with torch.no_grad():
        logits = ref(input_ids=t["input_ids"], attention_mask=t["attention_mask"], position_ids=t["position_ids"]).logits[:, -R - 1 : -1].float()
    logp = torch.log_softmax(logits, -1)
    lp = logp.gather(-1, t["responses"].unsqueeze(-1)).squeeze(-1)
    ent = -(logp.exp() * logp).sum(-1)
    mask = t["response_mask"].bool()
    for out in tp2[0]:
        torch.testing.assert_close(out["log_probs"]["log_probs"][mask], lp[mask], atol=1e-5, rtol=0)
        torch.testing.assert_close(out["log_probs"]["entropy"][mask], ent[mask], atol=1e-5, rtol=0)


@pytest.mark.dist
def test_update_equals_one_process(tp2, tp1):
    for out in tp2[0]:
        for key in ("loss", "grad_norm", "lr", "actor/pg_loss", "actor/kl_loss", "actor/entropy"):
            _close(out["metrics"][key], tp1["metrics"][key], key)
            _close(out["metrics_2"][key], tp1["metrics_2"][key], f"{key} (2nd update)")
        for key in ("loss", "grad_norm"):
            _close(out["critic_metrics"][key], tp1["critic_metrics"][key], f"critic {key}")
        torch.testing.assert_close(out["values"], tp1["values"], atol=1e-5, rtol=0)
        for name, w in tp1["weights"].items():
            if zero_grad_in_exact_arithmetic(name):  # Adam amplifies rounding (rl_core_testing.adam_weights)
                continue
            assert_adam_weights_close(out["weights"][name], w, tp1["init_weights"][name], name=name, atol=1e-5, rtol=1e-5)


@pytest.mark.dist
def test_weights_are_identical_on_both_ranks(tp2):
    a, b = tp2[0][0]["weights"], tp2[0][1]["weights"]
    assert list(a) == list(b)
    assert all(torch.equal(a[n], b[n]) for n in a)


@pytest.mark.dist
def test_checkpoint_resume_is_bit_identical(tp2):
    for rank, (before, after) in enumerate(zip(*tp2)):
        for name, w in before["weights"].items():
            assert torch.equal(after["loaded"][name], w), f"rank {rank}: {name}"
        assert after["metrics_2"] == before["metrics_2"]
        for name, w in before["weights_2"].items():
            assert torch.equal(after["weights_2"][name], w), f"rank {rank}: {name}"


def test_checkpoint_holds_only_plain_data(tp1, tmp_path_factory):
    ckpt = next(Path(tmp_path_factory.getbasetemp()).glob("tp1*/actor"))
    state = torch.load(ckpt / "rank0.pt", weights_only=True)
    assert set(state) == {"model", "optim", "scheduler", "rng"}
    assert (ckpt / "megatron.json").is_file()


def test_resuming_with_another_layout_is_a_clear_error(tp1, model_dir, tmp_path_factory):
    import json
    import shutil

    from rl_train_megatron.checkpoint import CheckpointMismatchError
    from rl_train_megatron.engine import build_engine

    src = next(Path(tmp_path_factory.getbasetemp()).glob("tp1*/actor"))
    dst = tmp_path_factory.mktemp("other_layout") / "actor"
    shutil.copytree(src, dst)
    layout = json.loads((dst / "megatron.json").read_text())
    (dst / "megatron.json").write_text(json.dumps({**layout, "tp": 2, "world": 2}))
    engine = build_engine("actor", _config(model_dir, 1), WorkerContext())
    try:
        with pytest.raises(CheckpointMismatchError, match="resume with the same train.tensor_model_parallel_size"):
            engine.load_checkpoint(str(dst))
    finally:
        engine.shutdown()
