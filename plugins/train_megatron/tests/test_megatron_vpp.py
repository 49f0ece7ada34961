"""Virtual (interleaved) pipeline stages: PP 2 x VPP 2 on 2 CPU processes (gloo) against one process, and the refusals.

A 4-layer Qwen3 (tied embeddings, per-head q / k norms): each stage holds 2 model chunks of one layer, interleaved as
megatron-core lays them out (stage 0: layers 0 and 2, stage 1: layers 1 and 3), the embedding on stage 0's first chunk,
the final norm and the LM head (the tied embedding's copy) on stage 1's last chunk.
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
from rl_core_testing.tiny_model import make_tiny_model_dir  # noqa: E402
from rl_core_testing.train_conformance import default_config, make_step_batch  # noqa: E402
import test_megatron_tp as tp_suite  # noqa: E402  (a module, so its tests are not collected here; its runs are pickled by name)
from test_megatron_tp import _close, _weights, run_resume, run_tp  # noqa: E402

pytestmark = pytest.mark.megatron

VPP_KEY = "train.options.virtual_pipeline_model_parallel_size"


def _config(model_dir, pp: int = 1, vpp: int | None = None, **transformer_config):
    cfg = default_config(model_dir)
    options = {"virtual_pipeline_model_parallel_size": vpp, "transformer_config": transformer_config}
    return attrs.evolve(cfg, train=attrs.evolve(cfg.train, name="megatron", pipeline_model_parallel_size=pp, options=options))


def run_vpp(rank: int, world: int, config, step, workdir: str) -> dict:
    """test_megatron_tp's run (actor: log-probs, two updates with a checkpoint between; critic: values, an update),
    then the checkpoint after the first update reloaded: the chunks' layers and ends, and its HF export."""
    from rl_train_megatron.engine import build_engine

    out = run_tp(rank, world, config, step, workdir)
    actor = build_engine("actor", config, WorkerContext(rank=rank, world_size=world, seed=0))
    # the global layer numbers megatron-core gave each chunk's layers (its own offset rule), and the chunk ends
    out["layers"] = [[layer.layer_number - 1 for layer in chunk.decoder.layers] for chunk in actor.backend.chunks]
    out["ends"] = [(chunk.pre_process, chunk.post_process) for chunk in actor.backend.chunks]
    actor.load_checkpoint(str(Path(workdir) / "actor"))
    actor.save_hf(str(Path(workdir) / "hf"))
    actor.shutdown()
    return out


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_tiny_model_dir(tmp_path_factory.mktemp("vpp_model"), "qwen3", layers=4, seed=0)


@pytest.fixture(scope="module")
def step(model_dir):
    return make_step_batch(model_dir)


@pytest.fixture(scope="module")
def one(model_dir, step, tmp_path_factory):
    return run_vpp(0, 1, _config(model_dir), step, str(tmp_path_factory.mktemp("one")))


@pytest.fixture(scope="module")
def vpp2(model_dir, step, tmp_path_factory):
    work = tmp_path_factory.mktemp("pp2vpp2")
    outs = run_distributed(run_vpp, 2, _config(model_dir, 2, 2), step, str(work), timeout=400)
    resumed = run_distributed(run_resume, 2, _config(model_dir, 2, 2), step, str(work), timeout=400)
    return outs, resumed, work


@pytest.mark.dist
def test_chunks_hold_megatron_cores_interleaved_layers(vpp2):
    stage0, stage1 = vpp2[0]
    assert stage0["layers"] == [[0], [2]] and stage1["layers"] == [[1], [3]]
    assert stage0["ends"] == [(True, False), (False, False)]  # the embedding on the first chunk of the first stage
    assert stage1["ends"] == [(False, False), (False, True)]  # the final norm and LM head on the last chunk of the last stage


def _same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert set(a) == set(b)
    for name, t in b.items():
        assert torch.equal(a[name], t), name


# the PP 2 tests' checks (test_megatron_tp), on PP 2 x VPP 2
@pytest.mark.dist
def test_weights_round_trip_exactly_through_the_chunks(vpp2, model_dir):
    tp_suite.test_weights_round_trip_exactly_through_the_sharded_model(vpp2, model_dir)


@pytest.mark.dist
def test_log_probs_match_transformers_and_one_process(vpp2, one, step, model_dir):
    tp_suite.test_log_probs_and_entropy_match_transformers(vpp2, step, model_dir)
    for out in vpp2[0]:
        torch.testing.assert_close(out["log_probs"]["log_probs"], one["log_probs"]["log_probs"], atol=1e-5, rtol=0)


@pytest.mark.dist
def test_update_equals_one_process(vpp2, one):
    tp_suite.test_update_equals_one_process(vpp2, one)  # actor and critic: losses, grad norms, values, updated weights
    tp_suite.test_weights_are_identical_on_both_ranks(vpp2)


@pytest.mark.dist
def test_exported_hf_folder_holds_the_updated_weights(vpp2, one):
    from safetensors.torch import load_file

    folder = vpp2[2] / "hf"
    saved = {}
    for f in sorted(folder.glob("*.safetensors")):
        saved.update(load_file(str(f)))
    mine = vpp2[0][0]["weights"]
    assert set(saved) - {"lm_head.weight"} == set(mine)
    for name, w in mine.items():
        assert torch.equal(saved[name], w), name
    for name, w in one["weights"].items():
        if not zero_grad_in_exact_arithmetic(name):
            assert_adam_weights_close(saved[name], w, one["init_weights"][name], name=name, atol=1e-5, rtol=1e-5)


@pytest.mark.dist
def test_checkpoint_resume_is_bit_identical(vpp2):
    import json

    assert json.loads((vpp2[2] / "actor" / "megatron.json").read_text())["vpp"] == 2
    tp_suite.test_checkpoint_resume_is_bit_identical(vpp2[:2])


# ------------------------------------------------------------------ refusals
def _problems(config, check):
    return [p for p in check(config) if p.severity == "error"]


@pytest.mark.parametrize("pp, vpp, fix", [(2, 3, "1, 2"), (1, 2, "train.pipeline_model_parallel_size > 1")])
def test_virtual_stages_that_do_not_split_the_layers_are_refused(model_dir, pp, vpp, fix):
    from rl_train_megatron.plugin import check_parallel_sizes

    problems = _problems(_config(model_dir, pp, vpp), check_parallel_sizes)
    assert [p.key for p in problems] == [VPP_KEY]
    assert fix in problems[0].fix
    assert "virtual_pipeline_model_parallel_size" in problems[0].what


def test_an_even_virtual_split_passes_the_check(model_dir):
    from rl_train_megatron.plugin import check_parallel_sizes, check_transformer_config

    config = _config(model_dir, 2, 2)
    assert _problems(config, check_parallel_sizes) == [] and _problems(config, check_transformer_config) == []
    config = _config(model_dir, 2, 2, virtual_pipeline_model_parallel_size=2)  # verl may repeat it in override_transformer_config
    assert _problems(config, check_transformer_config) == []


def test_uneven_stages_with_virtual_stages_are_refused(model_dir):
    from rl_train_megatron.plugin import check_parallel_sizes, check_transformer_config

    config = _config(model_dir, 2, 2, num_layers_in_first_pipeline_stage=1)
    problems = _problems(config, check_parallel_sizes) + _problems(config, check_transformer_config)
    assert [p.key for p in problems] == ["train.options.transformer_config.num_layers_in_first_pipeline_stage"]
    assert VPP_KEY in problems[0].fix


def test_a_transformer_config_vpp_other_than_the_options_is_refused(model_dir):
    from rl_train_megatron.plugin import check_transformer_config

    problems = _problems(_config(model_dir, 2, None, virtual_pipeline_model_parallel_size=2), check_transformer_config)
    assert [p.key for p in problems] == ["train.options.transformer_config.virtual_pipeline_model_parallel_size"]
    assert VPP_KEY in problems[0].fix


def test_the_engine_refuses_virtual_stages_without_pipeline_stages(model_dir):
    from rl_train_megatron.engine import build_engine
    from rl_train_megatron.model import ParallelSizeError

    with pytest.raises(ParallelSizeError, match=VPP_KEY.replace(".", r"\.") + ".*train.pipeline_model_parallel_size is 1"):
        build_engine("actor", _config(model_dir, 1, 2), WorkerContext())


@pytest.mark.dist
def test_tp2_sequence_parallel_with_virtual_stages_equals_one_process(model_dir, step, one, tmp_path):
    """TP 2 (Megatron sequence parallelism: stages exchange each rank's half of the columns) x PP 2 x VPP 2 on 4 processes."""
    config = _config(model_dir, 2, 2, sequence_parallel=True)
    config = attrs.evolve(config, train=attrs.evolve(config.train, tensor_model_parallel_size=2))
    four = run_distributed(run_tp, 4, config, step, str(tmp_path), timeout=400)
    tp_suite.test_update_equals_one_process((four,), one)
    for out in four:
        torch.testing.assert_close(out["log_probs"]["log_probs"], one["log_probs"]["log_probs"], atol=1e-5, rtol=0)


# ------------------------------------------------------------------ MoE
@pytest.mark.dist
def test_moe_layers_across_virtual_stages_equal_one_process(tmp_path_factory):
    """A 4-layer Qwen3-MoE with router aux / z losses on PP 2 x VPP 2 (2 processes): the routers' losses of all four chunks
    enter the gradient and the metrics; log-probs, losses, grad norm, both router-loss metrics after two updates and the
    weights equal one process's (test_megatron_moe's run and check)."""
    from test_megatron_moe import _assert_two_updates_equal, _left_padded, run_ep
    from test_megatron_moe import _config as moe_config

    model = make_tiny_model_dir(tmp_path_factory.mktemp("vpp_moe"), "qwen3_moe", hidden=32, layers=4, seed=0)
    step = _left_padded(make_step_batch(model), 16)
    one = run_ep(0, 1, moe_config(model), step)
    config = moe_config(model, pp=2)
    config = attrs.evolve(config, train=attrs.evolve(config.train, options={**config.train.options, "virtual_pipeline_model_parallel_size": 2}))
    two = run_distributed(run_ep, 2, config, step, timeout=400)
    assert one["layers"] == 4 and [o["layers"] for o in two] == [2, 2]
    assert one["metrics"]["actor/moe/load_balancing_loss"] > 0 and one["metrics"]["actor/moe/z_loss"] > 0
    _assert_two_updates_equal(two, one)


# ------------------------------------------------------------------ custom pipeline layout
def run_layout(rank: int, world: int, config, step) -> dict:
    from rl_train_megatron.engine import build_engine

    actor = build_engine("actor", config, WorkerContext(rank=rank, world_size=world, seed=0))
    out = {"layers": [[layer.layer_number - 1 for layer in chunk.decoder.layers] for chunk in actor.backend.chunks],
           "init_weights": _weights(actor), "log_probs": actor.compute_log_prob(step, temperature=1.0, with_entropy=True),
           "metrics": actor.update(step), "weights": _weights(actor)}
    actor.shutdown()
    return out


@pytest.mark.dist
@pytest.mark.parametrize("layout, layers", [
    ("Et|t*3L", [[[0]], [[1, 2, 3]]]),  # uneven stages: 1 + 3 layers
    ("Et|t|t|tL", [[[0], [2]], [[1], [3]]]),  # 4 stages over PP 2: two model chunks per stage (VPP 2 from the layout)
], ids=["uneven", "virtual"])
def test_a_custom_pipeline_layout_equals_one_process(model_dir, step, one, layout, layers):
    outs = run_distributed(run_layout, 2, _config(model_dir, 2, pipeline_model_parallel_layout=layout), step, timeout=400)
    assert [o["layers"] for o in outs] == layers  # megatron-core built each chunk's layers by the layout
    for out in outs:
        _same_weights(out["init_weights"], one["init_weights"])
        torch.testing.assert_close(out["log_probs"]["log_probs"], one["log_probs"]["log_probs"], atol=1e-5, rtol=0)
        for key in ("loss", "grad_norm", "actor/pg_loss"):
            _close(out["metrics"][key], one["metrics"][key], key)
        for name, w in one["weights"].items():
            if not zero_grad_in_exact_arithmetic(name):
                assert_adam_weights_close(out["weights"][name], w, one["init_weights"][name], name=name, atol=1e-5, rtol=1e-5)


def test_layouts_the_backend_cannot_run_are_refused_by_key(model_dir):
    from rl_train_megatron.plugin import check_parallel_sizes, check_transformer_config

    key = "train.options.transformer_config.pipeline_model_parallel_layout"
    for layout, what in (("Et|t*2L", "places 3 decoder layers"), ("E|t*4L", "without decoder layers"), ("Et|t*3mL", "(MTP)"),
                         ("tEt|t*2L", "'E') once, first"), ("Et|t|tL", "not a layout megatron-core reads")):
        config = _config(model_dir, 2, pipeline_model_parallel_layout=layout)
        problems = _problems(config, check_parallel_sizes) + _problems(config, check_transformer_config)
        assert [p.key for p in problems] == [key], layout
        assert what in problems[0].what, (layout, problems[0].what)
    problems = _problems(_config(model_dir, 1, pipeline_model_parallel_layout="Et|t*3L"), check_parallel_sizes)
    assert [p.key for p in problems] == [key] and "train.pipeline_model_parallel_size is 1" in problems[0].what
    assert _problems(_config(model_dir, 1, pipeline_model_parallel_layout="Et*4L"), check_parallel_sizes) == []  # one stage: the whole model
    problems = _problems(_config(model_dir, 2, 3, pipeline_model_parallel_layout="Et|t|t|tL"), check_parallel_sizes)
    assert [p.key for p in problems] == [VPP_KEY] and "2 model chunk(s) per stage" in problems[0].what
