"""PP 2 training steps through megatron-core's own schedule (rl_train_megatron.core_pipeline) on 2 CPU processes (gloo):
megatron-core's 1F1B function is the one that runs, and the updates (actor and critic: losses, grad norms, metrics,
weights) equal the reference loop's (rl_train_megatron.pipeline, one micro-batch at a time) and one process's (PP 1)."""

from __future__ import annotations

import attrs
import pytest
import torch

pytest.importorskip("megatron.core", reason="needs megatron-core (pip install megatron-core==0.16.1)")

from rl_core_testing.adam_weights import assert_adam_weights_close, zero_grad_in_exact_arithmetic  # noqa: E402
from rl_core_testing.distributed import run_distributed  # noqa: E402
from rl_core_testing.tiny_model import make_tiny_model_dir  # noqa: E402
from rl_core_testing.train_conformance import default_config, make_step_batch  # noqa: E402
from test_megatron_tp import _close, run_tp  # noqa: E402

pytestmark = pytest.mark.megatron


def _config(model_dir, pp: int, vpp: int | None = None):
    cfg = default_config(model_dir)
    # 2 micro-batches per mini-batch (the step batch's 8 rows in 2 mini-batches, 2 rows per micro-batch): 1F1B has a warm-up
    actor = attrs.evolve(cfg.actor, ppo_micro_batch_size_per_gpu=2)
    options = {"virtual_pipeline_model_parallel_size": vpp} if vpp else {}
    return attrs.evolve(cfg, actor=actor, train=attrs.evolve(cfg.train, name="megatron", pipeline_model_parallel_size=pp, options=options))


def run_pipeline(rank: int, world: int, config, step, workdir: str, core: bool) -> dict:
    """test_megatron_tp's run (actor log-probs + two updates, critic values + an update), megatron-core's schedule on or
    off; which schedule function ran, counted by wrapping megatron-core's own."""
    from megatron.core import pipeline_parallel
    from megatron.core.pipeline_parallel import schedules
    from rl_train_megatron.engine import MegatronBackend

    MegatronBackend.core_pipeline = core
    ran: list[str] = []
    out_micro: list[int] = []
    for name in ("forward_backward_pipelining_without_interleaving", "forward_backward_pipelining_with_interleaving"):
        def counted(*args, _real=getattr(schedules, name), _name=name, **kwargs):
            ran.append(_name)
            out_micro.append(kwargs["num_microbatches"])
            return _real(*args, **kwargs)

        counted.__name__ = name
        setattr(schedules, name, counted)
        setattr(pipeline_parallel.schedules, name, counted)
    out = run_tp(rank, world, config, step, workdir)
    out["ran"], out["micro_batches"] = ran, out_micro
    return out


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_tiny_model_dir(tmp_path_factory.mktemp("core_pp_model"), "qwen3", layers=2, seed=0)


@pytest.fixture(scope="module")
def step(model_dir):
    return make_step_batch(model_dir)


@pytest.fixture(scope="module")
def one(model_dir, step, tmp_path_factory):
    return run_pipeline(0, 1, _config(model_dir, 1), step, str(tmp_path_factory.mktemp("one")), True)


@pytest.fixture(scope="module")
def runs(model_dir, step, tmp_path_factory):
    core = run_distributed(run_pipeline, 2, _config(model_dir, 2), step, str(tmp_path_factory.mktemp("core")), True, timeout=400)
    ref = run_distributed(run_pipeline, 2, _config(model_dir, 2), step, str(tmp_path_factory.mktemp("ref")), False, timeout=400)
    return core, ref


@pytest.fixture(scope="module")
def vruns(tmp_path_factory):
    """PP 2 x VPP 2 on a 4-layer model: megatron-core's interleaved schedule vs the reference loop vs one process."""
    model = make_tiny_model_dir(tmp_path_factory.mktemp("core_vpp_model"), "qwen3", layers=4, seed=0)
    step = make_step_batch(model)
    core = run_distributed(run_pipeline, 2, _config(model, 2, 2), step, str(tmp_path_factory.mktemp("vcore")), True, timeout=400)
    ref = run_distributed(run_pipeline, 2, _config(model, 2, 2), step, str(tmp_path_factory.mktemp("vref")), False, timeout=400)
    return core, ref, run_pipeline(0, 1, _config(model, 1), step, str(tmp_path_factory.mktemp("vone")), True)


@pytest.mark.dist
@pytest.mark.skip(reason="megatron-core's interleaved schedule hung on gloo (PP 2 x VPP 2, variable micro-batch shapes): "
                         "CorePipeline.interleaved is off, virtual stages run the reference loop (test_megatron_vpp)")
def test_virtual_stages_run_megatron_cores_interleaved_schedule_with_the_same_updates(vruns):
    core, ref, one = vruns
    assert core[0]["ran"] == core[1]["ran"] and len(core[0]["ran"]) >= 3
    assert set(core[0]["ran"]) == {"forward_backward_pipelining_with_interleaving"}
    assert [out["ran"] for out in ref] == [[], []]
    _same_updates(core, ref)
    _same_updates(core, [one, one])


@pytest.mark.dist
def test_megatron_cores_1f1b_runs_each_training_step(runs, one):
    core, ref = runs
    # one run per mini-batch of the actor's 2 updates and the critic's update, the same on both stages; none in the
    # reference loop / PP 1
    assert core[0]["ran"] == core[1]["ran"] and len(core[0]["ran"]) >= 3
    assert set(core[0]["ran"]) == {"forward_backward_pipelining_without_interleaving"}
    assert max(core[0]["micro_batches"]) >= 2  # (a warm-up forward on stage 0, then 1F1B)
    assert [out["ran"] for out in ref] == [[], []] and one["ran"] == []


@pytest.mark.dist
@pytest.mark.parametrize("against", ["reference_loop", "one_process"])
def test_updates_equal_the_reference_loop_and_one_process(runs, one, against):
    core, ref = runs
    _same_updates(core, ref if against == "reference_loop" else [one, one])


def _same_updates(core: list[dict], others: list[dict]) -> None:
    for out, other in zip(core, others):
        for key in ("loss", "grad_norm", "lr", "actor/pg_loss", "actor/kl_loss", "actor/entropy"):
            _close(out["metrics"][key], other["metrics"][key], key)
            _close(out["metrics_2"][key], other["metrics_2"][key], f"{key} (2nd update)")
        for key in ("loss", "grad_norm"):
            _close(out["critic_metrics"][key], other["critic_metrics"][key], f"critic {key}")
        for name, w in other["weights_2"].items():
            if zero_grad_in_exact_arithmetic(name):
                continue
            assert_adam_weights_close(out["weights_2"][name], w, other["init_weights"][name], name=name, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(out["values"], other["values"], atol=1e-5, rtol=0)
