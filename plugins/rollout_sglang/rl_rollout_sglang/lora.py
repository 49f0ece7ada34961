"""LoRA adapters in SGLang's own LoRA layers, from tensors in memory (``rollout.lora_sync=adapter``, issue #32).

The engine starts with ``enable_lora`` (one adapter slot per batch, ``max_lora_rank`` = ``model.lora_rank``, the
adapted modules as ``lora_target_modules``; on CPU the ``torch_native`` LoRA backend). The trainer sends the frozen
base weights once (:meth:`SGLangRollout.load_weights`, as for any sync), then after each update only the adapters:
:meth:`SGLangRollout.load_adapter` unloads the previous version and loads the new one through SGLang's
``load_lora_adapter_from_tensors`` (no adapter folder is written or read) under a name of its own per version
(:func:`adapter_name`), and every later request names it (``lora_path``), so no request can run with an older one.

The sync check reads back what SGLang holds (:mod:`rl_rollout_sglang.held`): base weights through SGLang's LoRA
wrappers (``<layer>.base_layer.weight``), and the adapter as SGLang's ``LoRAManager`` keeps it for every batch that
names it, after its own stacking (q/k/v into ``qkv_proj``, gate/up into ``gate_up_proj``: :func:`stacked_location`).
The manager is found through an AFTER hook on its ``__init__`` (:func:`remember_manager`), registered by this
distribution's SGLang plugin with the read-back hook.
"""

from __future__ import annotations

import re
from typing import Any

import torch

#: The linear layers of a llama / qwen2 block (rl_lora.memory's list): what ``all-linear`` adapts there.
ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
#: SGLang's stacked LoRA modules: peft module -> (stacked module, index of its part)
STACKED = {"q_proj": ("qkv_proj", 0), "k_proj": ("qkv_proj", 1), "v_proj": ("qkv_proj", 2),
           "gate_proj": ("gate_up_proj", 0), "up_proj": ("gate_up_proj", 1)}
PARTS = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}
MANAGER_HOOK_TARGET = "sglang.srt.lora.lora_manager.LoRAManager.__init__"
_MANAGERS: list[Any] = []  # in SGLang's scheduler process: the LoRAManager(s) it built


def adapter_name(version: int) -> str:
    return f"rlcore-policy-v{int(version)}"


def lora_engine_args(config, device_type: str) -> dict[str, Any]:
    """``sglang.Engine`` arguments for one in-memory adapter of ``model.lora_rank`` on the adapted modules."""
    m = config.model
    targets = m.target_modules
    names = list(ALL_LINEAR) if targets == "all-linear" else [t for t in targets]
    names = [n for n in names if n not in set(m.exclude_modules or ())]
    args: dict[str, Any] = dict(enable_lora=True, max_lora_rank=int(m.lora_rank), lora_target_modules=names, max_loras_per_batch=1)
    if device_type == "cpu":
        args["lora_backend"] = "torch_native"  # the default (csgmv) runs Triton kernels
    return args


def peft_config_for_sglang(peft_config: dict[str, Any]) -> dict[str, Any]:
    """The adapter config SGLang's LoRAConfig reads (``peft_type`` is required there)."""
    return {**peft_config, "peft_type": "LORA", "target_modules": list(peft_config.get("target_modules", ()))}


# ------------------------------------------------------------- in SGLang's scheduler process
def remember_manager(result, manager, *args, **kwargs):
    """AFTER hook of ``LoRAManager.__init__``: keep the manager, for :func:`held_adapter_rows`."""
    _MANAGERS.append(manager)
    return result


def _held_adapter(name: str):
    """SGLang's loaded adapter named ``name`` (a ``LoRAAdapter``), or None."""
    for manager in _MANAGERS:
        for lora_id, ref in getattr(manager, "lora_refs", {}).items():
            if getattr(ref, "lora_name", None) == name and lora_id in manager.loras:
                return manager.loras[lora_id]
    return None


def stacked_location(peft_name: str, shapes: dict[str, tuple[int, ...]], rank: int) -> tuple[str, int] | None:
    """Where SGLang keeps peft tensor ``peft_name`` (``...<module>.lora_A.weight``): ``(its held name, first row)``.

    q/k/v and gate/up adapters are stacked along rows: ``A`` parts of ``rank`` rows each, ``B`` parts of each
    module's output size (from the HF weights' ``shapes``)."""
    module, _, part = peft_name.removesuffix(".weight").rpartition(".")
    prefix, _, last = module.rpartition(".")
    if last not in STACKED:
        return peft_name, 0
    fused, index = STACKED[last]
    held = f"{prefix}.{fused}.{part}.weight"
    if part == "lora_A":
        return held, index * rank
    offset = 0
    for before in PARTS[fused][:index]:
        shape = shapes.get(f"{prefix}.{before}.weight".removeprefix("base_model.model."))
        if shape is None:
            return None
        offset += shape[0]
    return held, offset


def held_adapter_rows(adapter: str, names: list[str], positions: list[list[int]], shapes: dict[str, tuple[int, ...]]) -> list[list[float]]:
    """The elements SGLang holds for adapter ``adapter`` at flat ``positions`` of peft-named tensors (``[]`` each
    where it holds none)."""
    lora = _held_adapter(adapter)
    rows: list[list[float]] = []
    for name, pos in zip(names, positions):
        tensor = None
        if lora is not None:
            layer = _layer_id(name)
            rank = int(lora.config.r)
            where = stacked_location(name, shapes, rank)
            if layer is not None and where is not None and layer < len(lora.layers):
                held = lora.layers[layer].weights.get(where[0])
                ncols = held.shape[1] if held is not None else 0
                if held is not None and ncols:
                    count = rank if name.endswith("lora_A.weight") else shapes.get(_base_of(name), (0,))[0]
                    tensor = held[where[1] : where[1] + count].reshape(-1)
        if tensor is None or not len(pos) or max(pos) >= tensor.numel():
            rows.append([])
            continue
        rows.append(tensor[torch.tensor(pos, dtype=torch.long, device=tensor.device)].double().cpu().tolist())
    return rows


def _layer_id(name: str) -> int | None:
    found = re.search(r"\.layers\.(\d+)\.", name)
    return int(found.group(1)) if found else None


def _base_of(peft_name: str) -> str:
    """``base_model.model.<module>.lora_B.weight`` -> ``<module>.weight`` (the HF weight it adapts)."""
    module = peft_name.removesuffix(".weight").rpartition(".")[0]
    return module.removeprefix("base_model.model.") + ".weight"
