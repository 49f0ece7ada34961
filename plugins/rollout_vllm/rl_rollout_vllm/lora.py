"""LoRA adapters in vLLM's own LoRA layers, from tensors in memory (``rollout.lora_sync=adapter``, issue #32).

The engine is built with ``enable_lora`` (one adapter slot, ``max_lora_rank`` the smallest vLLM size that holds
``model.lora_rank``). The trainer sends the frozen base weights once (:meth:`VLLMRollout.load_weights`), then
after each update only the adapters: :func:`add_adapter` runs inside the vLLM worker (``collective_rpc``; the
in-process engine gets the tensors by reference) and builds vLLM's ``LoRAModel`` straight from them
(``LoRAModel.from_lora_tensors``: no adapter folder is written or read), drops the previous version and puts the new
one in the slot. Each version has its own adapter id (``version + 1``) and every generation names it, so a request
can never run with an older adapter: an id vLLM does not hold would make it look for a folder, which fails loudly.

:func:`sample_held` reads back what the engine computes with: elements of the slot's stacked ``lora_a`` / ``lora_b``
buffers (q/k/v and gate/up are slices of vLLM's fused layers) and of the base weights (``qkv_proj`` / ``gate_up_proj``
rows located from the HF shapes), for :mod:`rl_core.weight_sync_check`. Tensor parallel > 1 shards both: each element is
read from the worker holding it (:mod:`rl_rollout_vllm.tp_shards`); with ``fully_sharded_loras`` (another layout)
adapters are not sampled (the adapter sync is then not verified, and the log says so).
"""

from __future__ import annotations

from typing import Any

import torch

from rl_rollout_vllm import experts

#: vLLM's allowed ``max_lora_rank`` values (vllm.config.lora.MaxLoRARanks, 0.32)
MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def lora_engine_kwargs(rank: int) -> dict[str, Any]:
    """``vllm.LLM`` arguments for one in-memory adapter of rank ``rank``."""
    fits = [r for r in MAX_LORA_RANKS if r >= rank]
    if not fits:
        raise ValueError(f"model.lora_rank={rank} is above vLLM's largest max_lora_rank ({MAX_LORA_RANKS[-1]}): "
                         "use a smaller rank or rollout.lora_sync=merged")
    return dict(enable_lora=True, max_lora_rank=fits[0], max_loras=1, max_cpu_loras=1)


def lora_names_mapper(mapper):
    """The model's HF -> vLLM name mapper as vLLM's own LoRA loader uses it: renames kept, q/k/v and gate/up stacking
    dropped (the LoRA manager packs those itself). vLLM 0.32 calls it ``get_rename_mapper``, 0.26 (the GPU build)
    ``get_unstacked_mapper``; None where the model has no mapper."""
    if mapper is None:
        return None
    for name in ("get_rename_mapper", "get_unstacked_mapper"):
        method = getattr(mapper, name, None)
        if method is not None:
            return method()
    raise RuntimeError(f"this vLLM's WeightsMapper has neither get_rename_mapper (0.32) nor get_unstacked_mapper (0.26): "
                       f"rl_rollout_vllm.lora cannot name the adapter's modules; use rollout.lora_sync=merged")


def add_adapter(worker, tensors: dict[str, torch.Tensor], peft_config: dict[str, Any], lora_id: int) -> int:
    """Inside the vLLM worker: replace the held adapter by one built from ``tensors`` (peft names) as id ``lora_id``.

    Returns the number of vLLM modules that received adapter weights. A tensor naming no LoRA module of the model
    is an error (vLLM would silently drop it)."""
    from vllm.lora.lora_model import LoRAModel
    from vllm.lora.peft_helper import PEFTHelper

    manager = worker.model_runner.lora_manager
    models = manager._adapter_manager
    helper = PEFTHelper.from_dict({**peft_config, "vllm_max_position_embeddings": manager.max_position_embeddings})
    helper.validate_legal(manager.lora_config)
    model = models.model
    mapper = getattr(model, "hf_to_vllm_mapper", None)
    # tensors already on the accelerator (the in-process engine, colocated) stay there: with device="cpu" vLLM would
    # copy each to the host and pin it, then copy it back into its LoRA slots
    first = next(iter(tensors.values()), None)
    device = first.device if first is not None and first.device.type != "cpu" else "cpu"
    lora = LoRAModel.from_lora_tensors(
        lora_model_id=lora_id, tensors=tensors, peft_helper=helper, device=device, dtype=manager.lora_config.lora_dtype,
        model_vocab_size=manager.vocab_size, weights_mapper=lora_names_mapper(mapper),
        skip_prefixes=getattr(model, "lora_skip_prefixes", None),
    )
    unknown = sorted(name for name in lora.loras if _slot_module(models, name) is None)
    if unknown:
        raise ValueError(f"LoRA adapter: {len(unknown)} adapted module(s) are not LoRA layers of the vLLM model: {unknown[:4]}")
    for old in list(manager.list_adapters()):
        manager.remove_adapter(old)
    models.add_adapter(lora)
    models.activate_adapter(lora_id)
    return len(lora.loras)


def reload_base_weights(worker, weights_iterator) -> None:
    """Inside the vLLM worker: ``reload_weights`` with the model's LoRA layers unwrapped for the duration.

    vLLM wraps every LoRA-capable layer (``QKVParallelLinear`` -> ``MergedQKVParallelLinearWithLoRA``), so the base
    tensors live at ``<layer>.base_layer.weight``. vLLM 0.32's reload resolves names through the wrappers; 0.26's (the
    GPU build) walks module names and fails on the first wrapped layer ("no module or parameter named
    'layers.0.self_attn.qkv_proj.weight'"). The wrapper's base layer is the same module object either way: putting it in
    the wrapper's place while the checkpoint-format names load, then putting the wrapper back, writes the same
    tensors the wrapper computes with on both versions."""
    from vllm.lora.layers import BaseLayerWithLoRA

    model = worker.model_runner.get_model()
    swapped = [(parent, name, child) for parent in model.modules() for name, child in parent.named_children()
               if isinstance(child, BaseLayerWithLoRA)]
    for parent, name, child in swapped:
        setattr(parent, name, child.base_layer)
    try:
        worker.reload_weights(weights_iterator=weights_iterator, is_checkpoint_format=True)
    finally:
        for parent, name, child in swapped:
            setattr(parent, name, child)


def adapter_dtype(worker) -> torch.dtype:
    """Inside the vLLM worker: the dtype its LoRA slots hold adapters in (``lora_dtype``, the model's by default)."""
    dtype = worker.model_runner.lora_manager.lora_config.lora_dtype
    return dtype if isinstance(dtype, torch.dtype) else getattr(torch, str(dtype))


def _slot_module(models, module: str) -> tuple[Any, int] | None:
    """vLLM's LoRA layer holding HF module ``module`` and its slice (q_proj -> (qkv_proj layer, 0)); None if none."""
    layer = models.modules.get(module)
    if layer is not None:
        return layer, 0
    prefix, _, last = module.rpartition(".")
    for fused, parts in (getattr(models, "packed_modules_mapping", None) or {}).items():
        if last in parts and f"{prefix}.{fused}" in models.modules:
            return models.modules[f"{prefix}.{fused}"], parts.index(last)
    return None


def sample_held(worker, positions: dict[str, torch.Tensor], hf_shapes: dict[str, tuple[int, ...]] | None,
                lora_id: int | None, rank: int) -> dict[str, torch.Tensor] | None:
    """Inside the vLLM worker: the elements the engine holds at flat ``positions`` of HF-named base weights and
    peft-named adapter tensors (adapter ``lora_id``'s slot); a name the engine does not hold is left out. With
    tensor parallel > 1 every worker of the TP group takes part and each element comes from the worker holding it
    (:mod:`rl_rollout_vllm.tp_shards`); None for adapters of ``fully_sharded_loras`` (not sampled)."""
    from vllm.distributed import get_tensor_model_parallel_world_size

    runner = worker.model_runner
    model = runner.get_model()
    params = dict(model.named_parameters())
    manager = getattr(runner, "lora_manager", None)
    models = getattr(manager, "_adapter_manager", None) if manager is not None else None
    if get_tensor_model_parallel_world_size() > 1 or _expert_group() is not None:
        return _sample_sharded(model, params, models, positions, hf_shapes or {}, lora_id, rank)
    out: dict[str, torch.Tensor] = {}
    for name, pos in positions.items():
        pos = pos.long()
        if name.endswith((".lora_A.weight", ".lora_B.weight")):
            held = _adapter_tensor(models, name, lora_id, rank)
            values = None if held is None else held.reshape(-1)[pos.to(held.device)]
        else:
            values = _base_values(model, params, name, pos, hf_shapes or {})
        if values is not None:
            out[name] = values.detach().cpu()
    return out


def _sample_sharded(model, params, models, positions: dict[str, torch.Tensor], hf_shapes: dict[str, tuple[int, ...]],
                    lora_id: int | None, rank: int) -> dict[str, torch.Tensor] | None:
    """:func:`sample_held` with TP > 1 or expert parallel: this worker's share of each tensor (rl_rollout_vllm.tp_shards),
    combined over the TP group (experts: over the expert-parallel group); None (not sampled) for adapters of ``fully_sharded_loras``, whose layout differs."""
    from rl_rollout_vllm.tp_shards import base_local, combine

    mine = {}
    for name, pos in positions.items():
        if not name.endswith((".lora_A.weight", ".lora_B.weight")):
            got = base_local(model, params, name, pos, hf_shapes)
        elif models is None or lora_id is None or lora_id not in models.lora_index_to_id:
            got = None
        elif getattr(models.lora_config, "fully_sharded_loras", False):
            return None
        else:
            got = _adapter_local(models, name, pos, lora_id, rank, hf_shapes)
        if got is not None:
            mine[name] = got
    moe = [name for name in positions if experts.prefix(name) is not None]
    held = combine({k: v for k, v in mine.items() if k not in moe}, [n for n in positions if n not in moe])
    # experts over the expert-parallel group (each rank some experts), else the TP group (intermediate blocks)
    held.update(combine({k: mine[k] for k in moe if k in mine}, moe, group=_expert_group()))
    return held


def _expert_group():
    """vLLM's expert-parallel group when experts are spread over more than the TP group's ranks, else None."""
    from vllm.distributed import parallel_state

    try:
        group = parallel_state.get_ep_group()
    except (AssertionError, AttributeError):
        return None
    from vllm.distributed import get_tensor_model_parallel_world_size

    return group if group.world_size > get_tensor_model_parallel_world_size() else None


def _adapter_local(models, name: str, pos: torch.Tensor, lora_id: int, rank: int, hf_shapes: dict[str, tuple[int, ...]]):
    from vllm.lora.utils import parse_fine_tuned_lora_name

    from rl_rollout_vllm.tp_shards import adapter_local

    module, is_a = parse_fine_tuned_lora_name(name)
    found, base_shape = _slot_module(models, module), hf_shapes.get(f"{module}.weight")
    if found is None or base_shape is None:
        return None
    layer, part = found
    return adapter_local(layer, part, is_a, models.lora_index_to_id.index(lora_id), rank, base_shape, pos)


def _adapter_tensor(models, name: str, lora_id: int | None, rank: int) -> torch.Tensor | None:
    if models is None or lora_id is None or lora_id not in models.lora_index_to_id:
        return None
    from vllm.lora.utils import parse_fine_tuned_lora_name

    module, is_a = parse_fine_tuned_lora_name(name)
    found = _slot_module(models, module)
    if found is None:
        return None
    layer, index = found
    slot = models.lora_index_to_id.index(lora_id)
    if is_a:
        return layer.lora_a_stacked[index][slot, 0, :rank, :]
    return layer.lora_b_stacked[index][slot, 0, :, :rank]


def _base_values(model, params: dict[str, torch.Tensor], name: str, pos: torch.Tensor, hf_shapes: dict[str, tuple[int, ...]]) -> torch.Tensor | None:
    """The engine's elements of HF weight ``name`` at flat ``pos``: from the vLLM parameter holding it (rows of a
    fused q/k/v or gate/up one), or, where vLLM's CPU kernels packed a linear weight away (the parameter is left
    empty), from the layer's own GEMM run on one-hot inputs without bias (``x = e_j`` gives column ``j`` exactly)."""
    from rl_core.weight_sync_check import cut_rows, fused_location

    shape = hf_shapes.get(name)
    if shape is not None and experts.prefix(name) is not None:  # a fused-MoE layer's: all of it on this one worker
        got = experts.local(model, params, name, pos, shape)
        return None if got is None or not bool(got[1].all()) else got[0]
    found = fused_location(params, name, hf_shapes, getattr(model, "packed_modules_mapping", None))
    if found is None or shape is None:
        return None
    target, held, offset = found
    if held.numel():
        cut = cut_rows(held, offset, shape)
        return cut.reshape(-1)[pos.to(cut.device)]
    layer = model.get_submodule(target)
    layer = getattr(layer, "base_layer", layer)
    gemm = getattr(layer, "cpu_linear", None)
    if gemm is None or len(shape) != 2:
        return None
    rows, cols = pos // shape[1], pos % shape[1]
    unique, which = torch.unique(cols, return_inverse=True)
    probe = torch.zeros(len(unique), shape[1], dtype=held.dtype)
    probe[torch.arange(len(unique)), unique] = 1
    with torch.no_grad():
        out = gemm(probe, layer.weight, None)
    return out[which, offset + rows]
