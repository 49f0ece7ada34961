"""Where a tensor-parallel vLLM worker holds the elements of an HF weight: the weight-sync check with TP > 1.

With TP > 1 every worker of a TP group (one rl-core rank each, possibly on different nodes) holds a shard of most
weights, laid out by vLLM's parallel layers (``vllm.model_executor.layers.linear`` / ``vocab_parallel_embedding``):

- column-parallel (``ColumnParallelLinear``; the fused ``MergedColumnParallelLinear`` gate/up and
  ``QKVParallelLinear`` q/k/v): each part of the fused output is cut into TP contiguous row blocks, rank ``r``
  holding block ``r`` of every part after the earlier parts' local blocks; k / v heads fewer than TP are
  replicated, rank ``r`` holding block ``r // num_kv_head_replicas``; a column-parallel bias the same rows;
- row-parallel (``RowParallelLinear``): column blocks, its bias whole on every rank;
- vocabulary-parallel (``VocabParallelEmbedding``, ``ParallelLMHead``): rank ``r`` holds rows
  ``[org_vocab_start_index, org_vocab_end_index)`` of the (padded) vocabulary;
- anything else (norms, a replicated linear): whole on every rank.

:func:`locate` maps HF rows / columns of one weight to this worker's ``(held, local row, local column)`` from those
attributes of the layer; :func:`base_local` reads the held elements (from the parameter, or through the layer's
GEMM where vLLM's CPU kernels packed the weight away; :func:`adapter_local` a LoRA adapter's from vLLM's LoRA slots);
:func:`combine` exchanges them over the TP group's CPU group and returns, on every rank, each element from the first
rank holding it. Where the ranks holding an element disagree (one worker
kept a stale copy), the element reads NaN, which equals nothing the trainer sent: every worker's copy is checked.
"""

from __future__ import annotations

import torch

from rl_rollout_vllm import experts


def _parts(layer, part: int) -> tuple[int, int, int] | None:
    """``(local size of the part, offset of its local block in the local parameter, shard index this rank holds)``
    for column-parallel layers, None for others."""
    from vllm.model_executor.layers.linear import ColumnParallelLinear, MergedColumnParallelLinear, QKVParallelLinear

    if not isinstance(layer, ColumnParallelLinear):
        return None
    rank, size = int(layer.tp_rank), int(layer.tp_size)
    if isinstance(layer, QKVParallelLinear):
        sizes = [layer.num_heads * layer.head_size, layer.num_kv_heads * layer.head_size, layer.num_kv_heads * layer.v_head_size]
        shard = rank if part == 0 else rank // int(layer.num_kv_head_replicas)
        return sizes[part], sum(sizes[:part]), shard
    if isinstance(layer, MergedColumnParallelLinear):
        sizes = [int(s) // size for s in layer.output_sizes]
        return sizes[part], sum(sizes[:part]), rank
    return int(layer.output_size_per_partition), 0, rank


def locate(layer, leaf: str, part: int, shape: tuple[int, ...], pos: torch.Tensor):
    """This worker's ``(held mask, local rows, local columns or None)`` for flat positions ``pos`` of an HF weight of
    ``shape`` that vLLM keeps as part ``part`` of ``layer``'s parameter ``leaf`` ("weight" / "bias")."""
    from vllm.model_executor.layers.linear import RowParallelLinear
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding

    pos = pos.long()
    rows, cols = (pos // shape[1], pos % shape[1]) if len(shape) == 2 else (pos, None)
    everywhere = torch.ones_like(pos, dtype=torch.bool)
    column = _parts(layer, part)
    if column is not None:
        local, offset, shard = column
        return rows // local == shard, offset + rows % local, cols
    if isinstance(layer, RowParallelLinear):
        if leaf != "weight" or cols is None:
            return everywhere, rows, cols  # its bias is added once, whole on every rank
        local = int(layer.input_size_per_partition)
        return cols // local == int(layer.tp_rank), rows, cols % local
    if isinstance(layer, VocabParallelEmbedding):
        idx = layer.shard_indices
        return (rows >= idx.org_vocab_start_index) & (rows < idx.org_vocab_end_index), rows - idx.org_vocab_start_index, cols
    return everywhere, rows, cols


def _read(layer, held: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor | None) -> torch.Tensor | None:
    """Elements ``(rows, cols)`` of this worker's local parameter ``held``; for a linear weight vLLM's CPU kernels
    packed away (``held`` empty), through the layer's own GEMM on one-hot inputs (``x = e_j`` gives column ``j``)."""
    if held.numel():
        return held[rows.to(held.device)] if cols is None else held[rows.to(held.device), cols.to(held.device)]
    gemm = getattr(layer, "cpu_linear", None)
    if gemm is None or cols is None:
        return None
    # a ReplicatedLinear (an MoE router) has no input_size_per_partition, and its packed weight no width
    width = int(getattr(layer, "input_size_per_partition", 0) or getattr(layer, "input_size", 0) or layer.weight.shape[-1])
    unique, which = torch.unique(cols, return_inverse=True)
    probe = torch.zeros(len(unique), width, dtype=held.dtype)
    probe[torch.arange(len(unique)), unique] = 1
    with torch.no_grad():
        out = gemm(probe, layer.weight, None)
    return out[which, rows]


def _where(model, params: dict[str, torch.Tensor], name: str, packed: dict[str, list[str]]):
    """``(layer, its parameter, leaf, part)`` holding HF weight ``name`` in vLLM's model, None when it has none."""
    from rl_core.weight_sync_check import FUSED

    module, _, leaf = name.rpartition(".")
    prefix, _, last = module.rpartition(".")
    places = [(module, 0)] + [(f"{prefix}.{fused}", parts.index(last)) for fused, parts in (packed or FUSED).items() if last in parts]
    for target, part in places:
        for key in (f"{target}.{leaf}", f"{target}.base_layer.{leaf}"):
            if key in params:
                layer = model.get_submodule(key.rpartition(".")[0])
                return layer, params[key].detach(), leaf, part
    return None


def base_local(model, params: dict[str, torch.Tensor], name: str, pos: torch.Tensor, hf_shapes: dict[str, tuple[int, ...]]):
    """This worker's ``(values, held mask)`` of HF weight ``name`` at flat ``pos`` (zeros where not held); None when
    the engine has no such weight or cannot read it."""
    shape = hf_shapes.get(name)
    if shape is not None and experts.prefix(name) is not None:  # a fused-MoE layer's (rl_rollout_vllm.experts)
        return experts.local(model, params, name, pos, shape)
    found = _where(model, params, name, getattr(model, "packed_modules_mapping", None))
    if shape is None or found is None:
        return None
    layer, held, leaf, part = found
    mask, rows, cols = locate(layer, leaf, part, shape, pos)
    values = torch.zeros(len(pos), dtype=held.dtype)
    if mask.any():
        got = _read(layer, held, rows[mask], None if cols is None else cols[mask])
        if got is None:
            return None
        values[mask] = got.detach().to("cpu", values.dtype)
    return values, mask


def adapter_local(layer, part: int, is_a: bool, slot: int, rank: int, base_shape: tuple[int, ...], pos: torch.Tensor):
    """This worker's ``(values, held mask)`` of a peft adapter tensor at flat ``pos``: ``lora_A`` ``[rank, in]`` or
    ``lora_B`` ``[out, rank]`` of the HF linear of ``base_shape`` ``(out, in)`` held in slice ``part`` of vLLM's LoRA
    layer ``layer``, adapter slot ``slot``. vLLM shards them as the base layer (not ``fully_sharded_loras``): a
    column-parallel layer's B by output rows (its A whole), a row-parallel layer's A by input columns (its B whole)."""
    from vllm.model_executor.layers.linear import RowParallelLinear

    base = getattr(layer, "base_layer", layer)
    shape = (rank, base_shape[1]) if is_a else (base_shape[0], rank)
    pos = pos.long()
    rows, cols = pos // shape[1], pos % shape[1]
    mask = torch.ones_like(pos, dtype=torch.bool)
    column = _parts(base, part)
    if column is not None and not is_a:
        local, _, shard = column
        mask, rows = rows // local == shard, rows % local
    elif isinstance(base, RowParallelLinear) and is_a:
        local = int(base.input_size_per_partition)
        mask, cols = cols // local == int(base.tp_rank), cols % local
    stacked = (layer.lora_a_stacked if is_a else layer.lora_b_stacked)[part][slot, 0]  # A: [rank, in], B: [out, rank]
    values = torch.zeros(len(pos), dtype=stacked.dtype)
    if mask.any():
        values[mask] = stacked[rows[mask].to(stacked.device), cols[mask].to(stacked.device)].detach().cpu()
    return values, mask


def combine(mine: dict[str, tuple[torch.Tensor, torch.Tensor]], names, group=None) -> dict[str, torch.Tensor]:
    """Inside one TP worker (every worker of the group calls it with the same ``names``): exchange each worker's
    ``(values, held mask)`` over the TP group's CPU group; each element from the first worker holding it, NaN where
    the holders disagree. A name some worker could not read, or an element no worker holds, is left out. ``group``:
    another vLLM group (expert parallel) instead of the TP group."""
    from vllm.distributed.parallel_state import get_tp_group

    group = group or get_tp_group()
    everyone: list = [None] * group.world_size
    torch.distributed.all_gather_object(everyone, mine, group=group.cpu_group)
    out: dict[str, torch.Tensor] = {}
    for name in names:
        seen = [r[name] for r in everyone if name in r]
        if len(seen) < len(everyone):
            continue  # some worker cannot report it: left out, so the check names it
        values = torch.stack([v for v, _ in seen])
        masks = torch.stack([m for _, m in seen])
        if not bool(masks.any(0).all()):
            continue
        first = values[masks.int().argmax(0), torch.arange(values.shape[1])]
        agree = ((values == first) | ~masks).all(0)
        out[name] = torch.where(agree, first, torch.full_like(first, float("nan")))
    return out
