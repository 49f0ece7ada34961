"""What the SGLang engine holds, read back for rl-core's weight-sync check (rl_core.weight_sync_check).

SGLang runs the model in its scheduler process, so the adapter asks through SGLang's own control call
``get_weights_by_name``: the name carries a request (``rlcore-sample:`` + JSON: the flat positions of each
HF-named tensor and the HF shapes), and an AROUND hook on the model runner's ``get_weights_by_name``, registered
by this distribution's SGLang plugin in SGLang's processes when ``RL_SGLANG_SAMPLE_WEIGHTS=1`` (set by the adapter
for the engine it starts), answers with the held elements, one row per tensor (``[]`` for a tensor the engine
does not hold). Any other name goes to SGLang's own method. q/k/v and gate/up are rows of SGLang's fused
``qkv_proj`` / ``gate_up_proj`` (:func:`rl_core.weight_sync_check.fused_location`). Tensor parallel > 1 shards
them: answered with None (the sync is then not verified).
"""

from __future__ import annotations

import json
from typing import Any

import torch

#: Environment variable that turns the hook on in SGLang's processes.
SAMPLE_WEIGHTS_ENV = "RL_SGLANG_SAMPLE_WEIGHTS"
PREFIX = "rlcore-sample:"
HOOK_TARGET = "sglang.srt.model_executor.model_runner_components.weight_exporter.WeightExporter.get_weights_by_name"


def request(positions: dict[str, torch.Tensor], shapes: dict[str, tuple[int, ...]] | None, adapter: str | None = None) -> str:
    """The ``name`` that asks the hook for the elements at ``positions``: of HF-named weights, or, with ``adapter``,
    of the peft-named tensors of the LoRA adapter of that name (rl_rollout_sglang.lora)."""
    shapes = shapes or {}
    return PREFIX + json.dumps({"names": list(positions), "positions": [p.tolist() for p in positions.values()], "adapter": adapter,
                                "shapes": {k: list(v) for k, v in shapes.items() if k in positions or adapter is not None}})


def answer(rows: Any, positions: dict[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor] | None:
    """The hook's rows as ``{name: elements}`` in the engine's dtype (exact: the rows are the held values)."""
    if rows is None:
        return None
    return {name: torch.tensor(row, dtype=torch.float64).to(dtype) for name, row in zip(positions, rows) if len(row) == len(positions[name])}


def sample_hook(original, exporter, name, truncate_size: int = 100):
    """AROUND hook of ``WeightExporter.get_weights_by_name`` (runs in SGLang's scheduler process)."""
    if not isinstance(name, str) or not name.startswith(PREFIX):
        return original(exporter, name, truncate_size)
    if exporter.tp_size > 1:
        return None
    from rl_core.weight_sync_check import cut_rows, fused_location

    ask = json.loads(name[len(PREFIX):])
    shapes = {k: tuple(v) for k, v in ask["shapes"].items()}
    if ask.get("adapter"):  # the LoRA adapter SGLang keeps for the requests that name it (rl_rollout_sglang.lora)
        from rl_rollout_sglang.lora import held_adapter_rows

        return held_adapter_rows(ask["adapter"], ask["names"], ask["positions"], shapes)
    model = exporter.get_model()
    params = dict(model.named_parameters())
    rows = []
    for hf_name, pos in zip(ask["names"], ask["positions"]):
        found, shape = fused_location(params, hf_name, shapes, getattr(model, "packed_modules_mapping", None)), shapes.get(hf_name)
        if found is None or shape is None or found[1].numel() == 0:
            rows.append([])
            continue
        cut = cut_rows(found[1], found[2], shape).reshape(-1)
        rows.append(cut[torch.tensor(pos, dtype=torch.long, device=cut.device)].double().cpu().tolist())
    return rows
