"""Megatron offload between phases and TransformerConfig pass-through (verl's megatron.*_offload,
optimizer_cpu_offload and override_transformer_config.recompute_*; issue #37), on the CPU.

On the CPU every "move" is host to host, so these check the bookkeeping (what moves where and back, how many
tensors, the optimizer stepped on the host or in chunks) and that the results are the same as without offload and
without recomputation. What it does on a GPU (memory freed between phases) was not run here.
"""

from __future__ import annotations

import attrs
import pytest
import torch

pytest.importorskip("megatron.core", reason="needs megatron-core (pip install megatron-core==0.16.1)")

from rl_core.backends import WorkerContext  # noqa: E402
from rl_core_testing.tiny_model import make_tiny_model_dir  # noqa: E402
from rl_core_testing.train_conformance import default_config, make_step_batch  # noqa: E402

pytestmark = pytest.mark.megatron

RECOMPUTE = {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}


def _config(model_dir, **options):
    cfg = default_config(model_dir)
    return attrs.evolve(cfg, train=attrs.evolve(cfg.train, name="megatron", options=options))


def _run(role, config, step, chunk_bytes=None):
    from rl_train_megatron.engine import build_engine

    engine = build_engine(role, config, WorkerContext())
    try:
        b = engine.backend
        if chunk_bytes:
            b.offload_chunk_bytes = chunk_bytes
        out = {"log": b.offload_log}
        out["log_probs"] = engine.compute_log_prob(step, temperature=1.0, with_entropy=False)["log_probs"]
        if role == "actor":
            out["metrics"] = [engine.update(step) for _ in range(2)]
            out["weights"] = {n: p.detach().clone() for n, p in b.model.named_parameters()}
            out["grads_left"] = sum(p.grad is not None for p in b.model.parameters())
            out["config"] = b.model.config
            out["n_params"] = sum(1 for _ in b.model.parameters())
        cache = getattr(b.model, "_rl_host_copies", {})  # param_offload: the parameters are its host buffers between phases
        out["in_host_buffers"] = bool(cache) and all(p.data_ptr() == cache[("p", i)].data_ptr() for i, p in enumerate(b.model.parameters()))
        return out
    finally:
        engine.shutdown()


def test_gradient_checkpointing_is_layer_recomputation():
    from rl_train_megatron.options import LAYER_CHECKPOINTING, megatron_options, transformer_overrides

    cfg = default_config("/nowhere")
    ckpt = attrs.evolve(cfg, model=attrs.evolve(cfg.model, enable_gradient_checkpointing=True))
    assert transformer_overrides(cfg, megatron_options(cfg)) == {}
    assert transformer_overrides(ckpt, megatron_options(ckpt)) == LAYER_CHECKPOINTING
    given = attrs.evolve(ckpt, train=attrs.evolve(ckpt.train, options={"transformer_config": {"recompute_granularity": "selective"}}))
    assert transformer_overrides(given, megatron_options(given)) == {"recompute_granularity": "selective"}  # the user's own wins


def test_offload_and_recompute_give_the_same_results(tmp_path):
    model_dir = make_tiny_model_dir(tmp_path, "qwen2", seed=0)
    step = make_step_batch(model_dir)
    plain = _run("actor", _config(model_dir), step)
    cpu = _run("actor", _config(model_dir, param_offload=True, grad_offload=True, optimizer_cpu_offload=True, transformer_config=RECOMPUTE), step)
    chunked = _run("actor", _config(model_dir, optimizer_offload=True), step, chunk_bytes=4096)
    # megatron-core's optimizer_offload_fraction: the first parameters up to half the numel step on the host
    half = _run("actor", _config(model_dir, optimizer_cpu_offload=True, optimizer_offload_fraction=0.5), step)
    ref = _run("ref", _config(model_dir, ref_param_offload=True), step)

    assert plain["log"] == [] and plain["config"].recompute_granularity is None
    assert cpu["config"].recompute_granularity == "full" and cpu["config"].recompute_num_layers == 1  # passed to the model
    for run in (cpu, chunked, half):
        assert run["metrics"] == plain["metrics"]
        for n, w in plain["weights"].items():
            assert torch.equal(w, run["weights"][n]), n
        assert torch.equal(run["log_probs"], plain["log_probs"]) and run["grads_left"] == 0
    n = plain["n_params"]
    # param + grad offload: to host buffers at build; for each of the 3 phases (a log-prob pass, two updates) to the
    # device and back; no gradients are left between phases (cleared at every step), so the grad moves carry none
    log = cpu["log"]
    assert log[0] == ("params", "cpu", n) and cpu["in_host_buffers"] and not plain["in_host_buffers"]
    assert [e for e in log[1:] if e[0] != "optimizer step"] == [("params", "cpu", n), ("grads", "cpu", 0)] * 6
    stepped = [e for e in log if e[0] == "optimizer step"]  # AdamW stepped on the host (megatron-core's optimizer_cpu_offload)
    assert len(stepped) >= 2 and all(e[1] == "cpu" and 0 < e[2] <= n for e in stepped)
    sizes = [w.numel() for w in plain["weights"].values()]  # the optimizer's order is the model's
    first = next(i for i in range(len(sizes)) if sum(sizes[: i + 1]) >= sum(sizes) / 2) + 1
    assert 0 < first < n and [e[2] for e in half["log"]] == [first] * len(stepped), (half["log"], first)
    assert len(chunked["log"]) == len(stepped) and all(what == "optimizer state" and chunks > 1 for what, _, chunks in chunked["log"])
    assert torch.equal(ref["log_probs"], plain["log_probs"]) and ref["in_host_buffers"]
    assert ref["log"] == [("params", "cpu", n)] * 3  # to host at build; to the device and back for its log-prob pass
