"""rl_rollout_vllm.experts without vLLM: the trainer's fused experts split into vLLM's per-expert checkpoint names, and
this worker's share of sampled elements read back from a fused-MoE layout built by hand (TP shards, EP expert map)."""

from __future__ import annotations

import pytest
import torch
from rl_rollout_vllm import experts

E, I, H = 4, 6, 5
PREFIX = "model.layers.0.mlp.experts"


@pytest.fixture
def trainer():
    g = torch.Generator().manual_seed(0)
    return {f"{PREFIX}.gate_up_proj": torch.randn(E, 2 * I, H, generator=g), f"{PREFIX}.down_proj": torch.randn(E, H, I, generator=g)}


def test_split_gives_per_expert_views_as_transformers_computes_them(trainer):
    gate_up, down = trainer[f"{PREFIX}.gate_up_proj"], trainer[f"{PREFIX}.down_proj"]
    pieces = dict(experts.split(f"{PREFIX}.gate_up_proj", gate_up)) | dict(experts.split(f"{PREFIX}.down_proj", down))
    assert len(pieces) == 3 * E
    x = torch.randn(H)
    for e in range(E):
        gate, up = (gate_up[e] @ x).chunk(2)  # transformers 5: linear(x, gate_up_proj[e]).chunk(2, dim=-1)
        torch.testing.assert_close(pieces[f"{PREFIX}.{e}.gate_proj.weight"] @ x, gate)
        torch.testing.assert_close(pieces[f"{PREFIX}.{e}.up_proj.weight"] @ x, up)
        assert torch.equal(pieces[f"{PREFIX}.{e}.down_proj.weight"], down[e])
    assert all(t.untyped_storage().data_ptr() in (gate_up.untyped_storage().data_ptr(), down.untyped_storage().data_ptr()) for t in pieces.values())
    assert not experts.is_fused(f"{PREFIX}.0.down_proj.weight", (H, I)) and not experts.is_fused("model.layers.0.mlp.down_proj.weight", (H, I))


def test_per_expert_shapes_adds_checkpoint_names(trainer):
    shapes = experts.per_expert_shapes({k: tuple(v.shape) for k, v in trainer.items()} | {"model.norm.weight": (H,)})
    assert shapes[f"{PREFIX}.3.gate_proj.weight"] == (I, H) and shapes[f"{PREFIX}.3.down_proj.weight"] == (H, I)
    assert shapes[f"{PREFIX}.gate_up_proj"] == (E, 2 * I, H) and shapes["model.norm.weight"] == (H,)
    assert len(shapes) == 3 + 3 * E


class _Config:
    def __init__(self, tp_rank, tp_size):
        self.tp_rank, self.tp_size = tp_rank, tp_size


class _FusedMoE(torch.nn.Module):
    """vLLM's layout of the trainer's experts on one worker: w13 = gate block over up block, w2 = down's column block."""

    def __init__(self, trainer, tp_rank, tp_size, held_experts):
        super().__init__()
        b = I // tp_size
        rows = slice(tp_rank * b, (tp_rank + 1) * b)
        gate_up, down = trainer[f"{PREFIX}.gate_up_proj"], trainer[f"{PREFIX}.down_proj"]
        self.w13_weight = torch.nn.Parameter(torch.stack([torch.cat([gate_up[e, :I][rows], gate_up[e, I:][rows]]) for e in held_experts]))
        self.w2_weight = torch.nn.Parameter(torch.stack([down[e][:, rows] for e in held_experts]))
        self.moe_config = _Config(tp_rank, tp_size)
        self._local = {e: i for i, e in enumerate(held_experts)}

    def _map_global_expert_id_to_local_expert_id(self, e):
        return self._local.get(e, -1)


def _model(layer):
    model = torch.nn.Module()
    model.add_module("m", torch.nn.Module())
    experts_module = torch.nn.Module()
    experts_module.add_module("routed_experts", layer)
    path = torch.nn.Module()
    path.add_module("experts", experts_module)
    layers = torch.nn.ModuleList([torch.nn.Module()])
    layers[0].add_module("mlp", path)
    model.m.add_module("layers", layers)
    return model


@pytest.mark.parametrize(("tp_size", "held"), [(1, [0, 1, 2, 3]), (2, [0, 1, 2, 3]), (3, [0, 1, 2, 3]), (1, [2, 3])])
def test_workers_shares_cover_every_element_once(trainer, tp_size, held):
    """TP ranks (intermediate blocks) and EP ranks (experts) together hold each sampled element once, equal to the
    trainer's, in both HF forms (fused and per-expert)."""
    named = dict(trainer) | dict(experts.split(f"{PREFIX}.gate_up_proj", trainer[f"{PREFIX}.gate_up_proj"]))
    named |= dict(experts.split(f"{PREFIX}.down_proj", trainer[f"{PREFIX}.down_proj"]))
    ep_groups = [held, sorted(set(range(E)) - set(held))] if len(held) < E else [held]
    for name, tensor in named.items():
        full = f"m.{name}".replace("model.", "", 1)
        pos = torch.arange(tensor.numel())
        seen = torch.zeros(len(pos), dtype=torch.long)
        got = torch.zeros(len(pos))
        for group in ep_groups:
            for rank in range(tp_size):
                model = _model(_FusedMoE(trainer, rank, tp_size, group))
                values, mask = experts.local(model, dict(model.named_parameters()), full, pos, tuple(tensor.shape))
                seen += mask.long()
                got[mask] = values[mask]
        assert seen.eq(1).all(), name
        assert torch.equal(got, tensor.reshape(-1)), name


def test_other_names_are_not_experts(trainer):
    model = _model(_FusedMoE(trainer, 0, 1, [0, 1, 2, 3]))
    params = dict(model.named_parameters())
    assert experts.local(model, params, "m.layers.0.mlp.gate.weight", torch.arange(3), (E, H)) is None
    assert experts.local(model, params, "m.layers.0.mlp.shared_expert.down_proj.weight", torch.arange(3), (H, I)) is None
