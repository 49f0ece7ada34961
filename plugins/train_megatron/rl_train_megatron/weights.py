"""Megatron shards -> HF-named tensors (weight sync, export) and the HF folder writer.

:func:`gather_hf_weights` walks this rank's parameters in order, packs them
into flat buckets of about ``bucket_bytes``, all-gathers each bucket over the
TP group (one collective per bucket, not per tensor), re-assembles the whole
Megatron tensors (:func:`rl_train_megatron.convert.merge_tp`) and yields them
under HF names (:func:`rl_train_megatron.convert.full_to_hf`). Every rank of a
TP group gets every tensor, so each rank's rollout engine can load them.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Iterator

import torch
import torch.distributed as dist

from rl_train_megatron import convert
from rl_train_megatron.model import ModelShape


def gather_hf_weights(
    params: list[tuple[str, torch.Tensor]], shape: ModelShape, tp_group, *, bucket_bytes: int = 256 * 2**20
) -> Iterator[tuple[str, torch.Tensor]]:
    """``(global Megatron name, local shard)`` pairs -> whole HF-named tensors, bucketed TP all-gathers."""
    tp = dist.get_world_size(tp_group) if tp_group is not None else 1
    bucket: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, t in params:
        bucket.append((name, t))
        size += t.numel() * t.element_size()
        if size >= bucket_bytes:
            yield from _flush(bucket, shape, tp, tp_group)
            bucket, size = [], 0
    if bucket:
        yield from _flush(bucket, shape, tp, tp_group)


def _flush(bucket, shape: ModelShape, tp: int, group) -> Iterator[tuple[str, torch.Tensor]]:
    if tp == 1:
        for name, t in bucket:
            yield from convert.full_to_hf(name, t, shape)
        return
    flat = torch.cat([t.reshape(-1).float() for _, t in bucket])
    parts = [torch.empty_like(flat) for _ in range(tp)]
    dist.all_gather(parts, flat, group=group)
    offset = 0
    for name, t in bucket:
        n = t.numel()
        shards = [p[offset : offset + n].view(t.shape) for p in parts]
        offset += n
        yield from convert.full_to_hf(name, convert.merge_tp(name, shards).to(t.dtype), shape)


def write_hf_folder(path: Path, state: dict[str, torch.Tensor], hf_config, hf_class, generation_config, config) -> None:
    """config.json, generation config, safetensors shards and the tokenizer, as ``save_pretrained`` writes them."""
    from huggingface_hub import save_torch_state_dict

    path.mkdir(parents=True, exist_ok=True)
    cfg = copy.deepcopy(hf_config)
    cfg.architectures = [hf_class.__name__]
    cfg.save_pretrained(str(path))
    if generation_config is not None and hf_class.__name__.endswith("ForCausalLM"):
        try:
            generation_config.save_pretrained(str(path))
        except Exception:  # noqa: BLE001 - an odd generation config must not lose the weights
            pass
    save_torch_state_dict(state, str(path), max_shard_size="5GB")
    tok_dir = config.model.tokenizer_path or config.model.path
    if tok_dir and os.path.isdir(tok_dir):
        try:
            from rl_core.modeling import load_tokenizer

            load_tokenizer(tok_dir).save_pretrained(str(path))
        except Exception:  # noqa: BLE001 - a folder without a tokenizer is still a model
            pass
