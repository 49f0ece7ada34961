"""Fully sharded data parallelism (``train.options.fully_shard``; verl's ``megatron.use_megatron_fsdp``) on CPU processes (gloo).

DP 2 (2 processes) and TP 2 x DP 2 with sequence parallelism (4 processes; verl's megatron default) against one process
without sharding, on the same step (each data-parallel replica takes its half, as the controller dispatches it):
log-probs, loss, grad norm and the weights after two optimizer steps; each rank's parameter + AdamW bytes are its
1 / DP share of the unsharded ones (the shards of a data-parallel group add up to them exactly); a checkpoint resumes
bit for bit; the weights for the rollout sync and the HF export are whole and equal; the reference model too.
"""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest
import torch

pytest.importorskip("megatron.core", reason="needs megatron-core (pip install megatron-core==0.16.1)")

from rl_core.backends import WorkerContext  # noqa: E402
from rl_core_testing.adam_weights import assert_adam_weights_close, zero_grad_in_exact_arithmetic  # noqa: E402
from rl_core_testing.distributed import run_distributed  # noqa: E402
from rl_core_testing.tiny_model import make_tiny_model_dir  # noqa: E402
from rl_core_testing.train_conformance import PROMPTS_PER_STEP, TrainConformance, default_config, make_step_batch  # noqa: E402

pytestmark = pytest.mark.megatron


def _config(model_dir, tp: int = 1, fully_shard: bool = False, recompute: bool = False, **options):
    cfg = default_config(model_dir)
    # one mini-batch per epoch: each replica's half of the step then makes the same global mini-batch as one process's whole step
    cfg = attrs.evolve(cfg, actor=attrs.evolve(cfg.actor, ppo_mini_batch_size=PROMPTS_PER_STEP),
                       critic=attrs.evolve(cfg.critic, ppo_mini_batch_size=PROMPTS_PER_STEP),
                       model=attrs.evolve(cfg.model, enable_gradient_checkpointing=recompute))
    opts = {**dict(cfg.train.options or {}), **options, **({"fully_shard": True} if fully_shard else {})}
    return attrs.evolve(cfg, train=attrs.evolve(cfg.train, name="megatron", tensor_model_parallel_size=tp, options=opts))


def _weights(engine) -> dict[str, torch.Tensor]:
    return {n: t.detach().clone() for n, t in engine.named_weights()}


def _unsharded_bytes(backend) -> int:
    """What this rank would hold without sharding: every parameter whole (its TP shard) and AdamW's two moments of it."""
    return sum(p.numel() * p.element_size() for p in backend.model.parameters()) * 3


def run(rank: int, world: int, config, step, workdir: str) -> dict:
    from rl_train_megatron import fully_sharded
    from rl_train_megatron.engine import build_engine

    t = config.train
    mp = t.tensor_model_parallel_size  # a replica's ranks are consecutive (the controller's dispatch)
    half = len(step) // (world // mp)
    mine = step.index(torch.arange((rank // mp) * half, (rank // mp + 1) * half))
    ctx = WorkerContext(rank=rank, world_size=world, seed=0)
    out: dict = {}
    ref = build_engine("ref", config, ctx)
    out["ref_log_probs"] = ref.compute_log_prob(mine, temperature=1.0)["log_probs"]
    ref.shutdown()
    actor = build_engine("actor", config, ctx)
    b = actor.backend
    out["sharded"] = b.stage is not None
    out["layout"] = (b.topo.tp, b.topo.dp, b.sp, b.chunks[0].config.recompute_granularity)
    out["init_weights"] = _weights(actor)
    out["log_probs"] = actor.compute_log_prob(mine, temperature=1.0, with_entropy=True)
    out["metrics"] = actor.update(mine)
    out["bytes"], out["unsharded_bytes"] = fully_sharded.local_bytes(b.model, b.optimizer), _unsharded_bytes(b)
    out["weights"] = _weights(actor)
    actor.save_checkpoint(str(Path(workdir) / "actor"))
    out["metrics_2"] = actor.update(mine)
    out["weights_2"] = _weights(actor)
    actor.save_hf(str(Path(workdir) / "hf"))
    actor.shutdown()
    actor = build_engine("actor", config, ctx)
    actor.load_checkpoint(str(Path(workdir) / "actor"))
    out["resumed_weights"] = _weights(actor)
    out["resumed_metrics_2"] = actor.update(mine)
    out["resumed_weights_2"] = _weights(actor)
    actor.shutdown()
    critic = build_engine("critic", config, ctx)
    out["values"] = critic.compute_values(mine)
    out["critic_metrics"] = critic.update(mine)
    critic.shutdown()
    return out


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    # Qwen3: tied embeddings (one tensor in the root unit for embedding and LM head) and per-head q/k norms (summed over TP)
    return make_tiny_model_dir(tmp_path_factory.mktemp("fsdp_model"), "qwen3", seed=0)


@pytest.fixture(scope="module")
def step(model_dir):
    return make_step_batch(model_dir)


@pytest.fixture(scope="module")
def one(model_dir, step, tmp_path_factory):
    return run(0, 1, _config(model_dir), step, str(tmp_path_factory.mktemp("one")))


@pytest.fixture(scope="module", params=[(1, 2), (2, 4)], ids=["dp2", "tp2_dp2_sp_recompute"])
def sharded(request, model_dir, step, tmp_path_factory):
    """DP 2 on 2 processes; TP 2 x DP 2 on 4, with Megatron sequence parallelism (verl's megatron default) and each layer
    recomputed in the backward (model.enable_gradient_checkpointing: megatron-core's recomputation calls the FSDP unit again)."""
    tp, world = request.param
    work = tmp_path_factory.mktemp(f"fsdp_tp{tp}")
    extra = {"transformer_config": {"sequence_parallel": True}} if tp > 1 else {}
    outs = run_distributed(run, world, _config(model_dir, tp, fully_shard=True, recompute=tp > 1, **extra), step, str(work), timeout=600)
    return tp, world, outs, work


def _close(a: float, b: float, what: str) -> None:
    assert abs(a - b) <= 1e-5 * max(1.0, abs(b)), f"{what}: {a} vs {b}"


def _replicas(tp: int, outs: list[dict]) -> list[dict]:
    """One rank of each data-parallel replica, in order (the step's halves)."""
    return outs[::tp]


@pytest.mark.dist
def test_log_probs_loss_grad_norm_and_weights_equal_one_process(sharded, one):
    tp, _, outs, _ = sharded
    assert all(o["sharded"] for o in outs) and not one["sharded"]
    assert {o["layout"] for o in outs} == ({(1, 2, False, None)} if tp == 1 else {(2, 2, True, "full")})
    for key in ("log_probs", "entropy"):
        got = torch.cat([o["log_probs"][key] for o in _replicas(tp, outs)])
        torch.testing.assert_close(got, one["log_probs"][key], atol=1e-5, rtol=0)
    torch.testing.assert_close(torch.cat([o["ref_log_probs"] for o in _replicas(tp, outs)]), one["ref_log_probs"], atol=1e-5, rtol=0)
    torch.testing.assert_close(torch.cat([o["values"] for o in _replicas(tp, outs)]), one["values"], atol=1e-5, rtol=0)
    for out in outs:
        for key in ("loss", "grad_norm", "actor/pg_loss", "actor/kl_loss", "actor/entropy"):
            _close(out["metrics"][key], one["metrics"][key], key)
            _close(out["metrics_2"][key], one["metrics_2"][key], f"{key} (2nd update)")
        for key in ("loss", "grad_norm"):
            _close(out["critic_metrics"][key], one["critic_metrics"][key], f"critic {key}")
        assert set(out["weights_2"]) == set(one["weights_2"])
        for name in one["weights_2"]:
            assert torch.equal(out["init_weights"][name], one["init_weights"][name]), name
            if zero_grad_in_exact_arithmetic(name):  # Adam amplifies rounding (rl_core_testing.adam_weights)
                continue
            for k in ("weights", "weights_2"):
                assert_adam_weights_close(out[k][name], one[k][name], one["init_weights"][name], name=f"{k} {name}", atol=1e-5, rtol=1e-5)


@pytest.mark.dist
def test_each_rank_holds_its_share_of_parameters_and_adamw_state(sharded, one):
    tp, world, outs, _ = sharded
    dp = world // tp
    assert one["bytes"] == one["unsharded_bytes"]  # the reference count: unsharded, every byte on the one rank
    for r, out in enumerate(outs):
        assert out["bytes"] <= out["unsharded_bytes"] / dp * 1.1, (r, out["bytes"], out["unsharded_bytes"])
    for t in range(tp):  # the shards of one TP slice over its data-parallel group add up to it, nothing held twice
        group = outs[t::tp]
        assert sum(o["bytes"] for o in group) == group[0]["unsharded_bytes"]


@pytest.mark.dist
def test_weights_for_the_sync_are_whole_and_the_same_on_every_rank(sharded, one):
    _, _, outs, _ = sharded
    for out in outs:
        assert {n: tuple(w.shape) for n, w in out["weights"].items()} == {n: tuple(w.shape) for n, w in one["weights"].items()}
        assert all(torch.equal(out["weights_2"][n], outs[0]["weights_2"][n]) for n in out["weights_2"])


@pytest.mark.dist
def test_hf_export_holds_the_trained_weights(sharded):
    from safetensors.torch import load_file

    _, _, outs, work = sharded
    files = sorted((work / "hf").glob("*.safetensors"))
    assert files and (work / "hf" / "config.json").is_file()
    saved = {}
    for f in files:
        saved.update(load_file(str(f)))
    expected = outs[0]["weights_2"]
    assert set(saved) == set(expected)
    for name, w in expected.items():
        assert torch.equal(saved[name].float(), w), name


@pytest.mark.dist
def test_checkpoint_resume_is_bit_identical(sharded):
    _, world, outs, work = sharded
    assert json.loads((work / "actor" / "megatron.json").read_text())["fully_shard"] is True
    assert sorted(p.name for p in (work / "actor").glob("rank*.pt")) == sorted(f"rank{r}.pt" for r in range(world))
    for r, out in enumerate(outs):
        for name, w in out["weights"].items():
            assert torch.equal(out["resumed_weights"][name], w), f"rank {r}: {name}"
        assert out["resumed_metrics_2"] == out["metrics_2"]
        for name, w in out["weights_2"].items():
            assert torch.equal(out["resumed_weights_2"][name], w), f"rank {r}: {name}"


class TestFullyShardedConformance(TrainConformance):
    """The shared train conformance suite with ``train.options.fully_shard`` on (1 process, and DP 2 on 2)."""

    factory = "rl_train_megatron.engine:MegatronBackend"
    rollout_factory = "rl_core.rollout.hf:factory"
    logprob_atol = 1e-5
    sync_atol = 1e-4

    def make_config(self, model_dir, **overrides):
        cfg = default_config(model_dir, **overrides)
        return attrs.evolve(cfg, train=attrs.evolve(cfg.train, options={**dict(cfg.train.options or {}), "fully_shard": True}))
