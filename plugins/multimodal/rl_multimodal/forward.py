"""Forward passes of a vision-language model over a batch whose prompts carry images.

A batch with image inputs has the non-tensor field ``multi_modal_inputs``: per row, the dict of tensors the model
processor returned for its prompt (Qwen2-VL: ``pixel_values [patches, C*T*P*P]``, ``image_grid_thw [images, 3]``;
an empty dict for a row without images; :mod:`rl_multimodal.images`). :func:`model_kwargs` concatenates them over
the rows (the model scatters the image features into its image-pad tokens in row order) and adds what the model
needs beside them: ``mm_token_type_ids`` (1 on image tokens) and, for models with multimodal RoPE (Qwen2-VL /
Qwen2.5-VL: a ``get_rope_index`` method), the 3-D position ids ``[3, b, t]`` computed over the real tokens of each
row (left and right padding skipped). Other VLM families compute their positions in their own forward.

Response tokens are text: their three position components are equal and continue from the prompt's largest
position (:func:`next_positions`), which is what ``get_rope_index`` gives the same tokens in the trainer's forward
of prompt + response, so rollout and trainer log-probs agree. A response must not contain the model's image /
video pad tokens (the model would take one for an image's place): the hf rollout never samples them for prompts
with images (their log-probs are still those of the full distribution).
"""

from __future__ import annotations

import inspect
from typing import Any, Sequence

import torch
from rl_core.modeling import log_probs_and_entropy

FIELD = "multi_modal_inputs"


def has_images(mm: Sequence[dict] | None) -> bool:
    return mm is not None and any(bool(d) for d in mm)


def rope_index_owner(model: torch.nn.Module):
    """The module with ``get_rope_index`` (the model or its inner ``.model``), or None."""
    for m in (model, getattr(model, "model", None)):
        if m is not None and callable(getattr(m, "get_rope_index", None)):
            return m
    return None


def vision_token_ids(model: torch.nn.Module) -> list[int]:
    """The ids the model replaces by vision features (its image / video pad tokens)."""
    cfg = model.config
    ids = [getattr(cfg, k, None) for k in ("image_token_id", "image_token_index", "video_token_id", "video_token_index")]
    return sorted({int(i) for i in ids if isinstance(i, int)})


def model_kwargs(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, mm: Sequence[dict],
                 response_length: int = 0) -> dict[str, Any]:
    """Keyword arguments for ``model(input_ids=..., attention_mask=..., **kw)`` with the rows' images (see the module).

    ``response_length``: the last columns are generated text; an image token among them is an error (the model
    would take it for an image's place)."""
    device = input_ids.device
    keys = sorted({k for d in mm for k in d})
    kw: dict[str, Any] = {k: torch.cat([d[k] for d in mm if k in d]).to(device) for k in keys}
    cfg = model.config
    image_token = getattr(cfg, "image_token_id", None)
    if image_token is None:
        image_token = getattr(cfg, "image_token_index", None)
    params = inspect.signature(model.forward).parameters
    types = (input_ids == image_token).int() if image_token is not None else None
    if response_length and bool(torch.isin(input_ids[:, -response_length:], torch.tensor(vision_token_ids(model), device=device)).any()):
        raise ValueError(f"a response holds one of the model's image / video tokens {vision_token_ids(model)}, which the model would read as "
                         "an image's place: generate with a rollout that never samples them (the hf rollout masks them)")
    if types is not None and "mm_token_type_ids" in params:
        kw["mm_token_type_ids"] = types
    owner = rope_index_owner(model)
    if owner is not None and types is not None:
        _check_rows(model, types, mm)
        extra = {"mm_token_type_ids": types} if "mm_token_type_ids" in inspect.signature(owner.get_rope_index).parameters else {}
        pos, _ = owner.get_rope_index(input_ids, image_grid_thw=kw.get("image_grid_thw"), attention_mask=attention_mask, **extra)
        kw["position_ids"] = pos
    return kw


def _check_rows(model: torch.nn.Module, types: torch.Tensor, mm: Sequence[dict]) -> None:
    """Each row holds as many image tokens as its images' grids say (a batch whose images were not carried with
    their rows would otherwise give another row's pixels)."""
    merge = getattr(getattr(model.config, "vision_config", None), "spatial_merge_size", 1) or 1
    for r, d in enumerate(mm):
        want = int(d["image_grid_thw"].prod(-1).sum()) // merge**2 if "image_grid_thw" in d else 0
        have = int(types[r].sum())
        if want != have:
            raise ValueError(f"row {r} of the batch has {have} image tokens but its multi_modal_inputs hold images of {want}: "
                             "the rows' images were not carried with their rows")


def next_positions(position_ids: torch.Tensor) -> torch.Tensor:
    """``[b]``: the position of the first generated token after a prompt with 3-D positions ``[3, b, t]`` (or ``[b, t]``)."""
    if position_ids.dim() == 3:
        return position_ids.amax(dim=(0, 2)) + 1
    return position_ids[:, -1] + 1


def forward_response(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    responses: torch.Tensor,
    mm: Sequence[dict],
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    entropy_grad: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`rl_core.modeling.forward_response` for prompts with images: ``(log_probs [b, R], entropy [b, R] or None)``.

    One plain forward (no chunked LM head, no shared prompts, no packing); the logits are kept for the response
    positions only (``logits_to_keep``)."""

    R = responses.shape[-1]
    kw = model_kwargs(model, input_ids, attention_mask, mm, response_length=R)
    if "logits_to_keep" in inspect.signature(model.forward).parameters:
        kw["logits_to_keep"] = R + 1
    logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, **kw).logits[:, -R - 1 : -1]
    return log_probs_and_entropy(logits, responses, temperature=temperature, with_entropy=with_entropy, entropy_grad=entropy_grad)


def rows_of(batch: Any, rows: slice | torch.Tensor) -> list[dict] | None:
    """The ``multi_modal_inputs`` of ``rows`` of a :class:`~rl_core.batch.Batch` (None when it has none)."""
    if FIELD not in batch.non_tensors:
        return None
    arr = batch.non_tensors[FIELD]
    if isinstance(rows, torch.Tensor):
        rows = rows.cpu().numpy()
    return list(arr[rows])


def to_device(mm: Sequence[dict], device: torch.device) -> list[dict]:
    return [{k: v.to(device, non_blocking=True) for k, v in d.items()} for d in mm]
