"""The card's native / reference list (rl_train_megatron.native) and `rlcore check`'s use of it: a GPU run is warned of
each reference path it enables and refused virtual stages without an interleaving schedule; a CPU run is not warned."""

from __future__ import annotations

import pytest
from rl_core.cards import TrainCard
from rl_core.problems import errors
from rl_train_megatron.native import FEATURES, WHY
from rl_train_megatron.plugin import MEGATRON_CARD
from test_megatron_plugin import _model, _resolve, engines  # noqa: F401 - the fixture

KEYS = {"tensor_parallel", "expert_parallel", "pipeline_schedule", "virtual_stages", "distributed_optimizer", "context_parallel",
        "fused_adam", "fused_rmsnorm", "fused_rope", "fused_cross_entropy", "transformer_engine"}


def _warnings(problems):
    return [p for p in problems if p.severity == "warning"]


def test_the_card_lists_every_feature_as_native_or_reference():
    assert set(MEGATRON_CARD.features) == KEYS == set(WHY)
    assert MEGATRON_CARD.features == FEATURES
    assert MEGATRON_CARD.features["tensor_parallel"] == "native" and MEGATRON_CARD.features["pipeline_schedule"] == "native"
    assert MEGATRON_CARD.features["virtual_stages"] == MEGATRON_CARD.features["distributed_optimizer"] == "reference"
    assert "source distribution" in WHY["transformer_engine"]


def test_the_card_field_takes_only_the_three_words():
    TrainCard(name="x", factory="m:f", features={"a": "emulated"})
    with pytest.raises(ValueError):
        TrainCard(name="x", factory="m:f", features={"a": "fast"})
    hash(MEGATRON_CARD)  # (a dict field left out of the frozen card's hash)


def test_a_cpu_run_has_no_native_warnings(tmp_path, engines):  # noqa: F811
    stack, problems = _resolve(_model(tmp_path, layers=4), "train.pipeline_model_parallel_size=2", "trainer.n_gpus_per_node=4",
                               "train.distributed_optimizer=true")
    assert stack is not None, [p.render() for p in problems]
    assert not any("path on GPUs" in p.what or "fused kernels" in p.what for p in problems)


def test_a_gpu_run_is_warned_of_each_reference_path(tmp_path, engines):  # noqa: F811
    stack, problems = _resolve(_model(tmp_path, layers=4), "trainer.device=cuda", "train.pipeline_model_parallel_size=2",
                               "trainer.n_gpus_per_node=8", "train.distributed_optimizer=true")
    assert stack is not None, [p.render() for p in errors(problems)]
    warned = {p.key for p in _warnings(problems) if "path on GPUs" in p.what or "reference pipeline" in p.what}
    assert warned == {"train.distributed_optimizer"}  # TP 2 and PP 2 (megatron-core's 1F1B for a dense model) are native
    kernels = [p for p in _warnings(problems) if "without fused kernels" in p.what]
    assert len(kernels) == 1 and "fused_rmsnorm" in kernels[0].what and "transformer_engine" in kernels[0].what


def test_virtual_stages_on_a_gpu_run_are_refused(tmp_path, engines):  # noqa: F811
    model = _model(tmp_path, layers=4)
    more = ("train.pipeline_model_parallel_size=2", "trainer.n_gpus_per_node=4", "+train.options.virtual_pipeline_model_parallel_size=2")
    stack, problems = _resolve(model, "trainer.device=cuda", *more)
    refused = [p for p in errors(problems) if p.key == "train.options.virtual_pipeline_model_parallel_size"]
    assert stack is None and len(refused) == 1 and "only cost time" in refused[0].what, [p.render() for p in problems]
    stack, problems = _resolve(model, "trainer.device=cpu", *more)  # the CPU conformance run keeps them
    assert not [p for p in problems if "only cost time" in p.what or "path on GPUs" in p.what], [p.render() for p in problems]


_SHIM_PROBE = r"""
import json, sys, torch
device = sys.argv[1]
if device == "cuda":  # CUDA "visible": what the backend asks torch before it picks a device
    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: 1
import megatron.core.tensor_parallel as tp_mod
tp_mod.model_parallel_cuda_manual_seed = lambda seed: None  # (needs a real GPU; it is megatron-core's, no shim)
import rl_train_megatron.engine  # noqa: F401 - every module of the backend
from rl_train_megatron import cpu_shims, parallel
from rl_train_megatron.native import FEATURES
before = cpu_shims.installed()
parallel.acquire(1, 1, torch.device(device))
cpu_shims.install_moe(torch.device(device))  # what the engine calls for MoE / sequence-parallel models
print("SHIMS", json.dumps([before, cpu_shims.installed()]))
"""


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_no_cpu_shim_is_installed_when_cuda_is_used(device):
    """Importing the backend installs nothing; setting up the parallel state (where the engine installs the shims) for a
    CUDA device installs none of them; for the CPU all of them (so the probe can tell)."""
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _SHIM_PROBE, device], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("SHIMS"))
    before, after = json.loads(line[len("SHIMS"):])
    assert before == []
    if device == "cuda":
        assert after == []
    else:
        assert {"rng_tracker", "memory_buffer", "cuda_rng_state", "router_gating"} <= set(after)


def test_pipeline_stages_that_fall_back_to_the_reference_loop_are_warned(tmp_path, engines):  # noqa: F811
    stack, problems = _resolve(_model(tmp_path, layers=4), "trainer.device=cuda", "train.pipeline_model_parallel_size=2",
                               "train.context_parallel_size=2", "trainer.n_gpus_per_node=8")
    assert stack is not None, [p.render() for p in errors(problems)]
    loop = [p for p in _warnings(problems) if "reference pipeline loop" in p.what]
    assert len(loop) == 1 and loop[0].key == "train.pipeline_model_parallel_size" and "train.context_parallel_size" in loop[0].what
    assert any(p.key == "train.context_parallel_size" and "path on GPUs" in p.what for p in _warnings(problems))
