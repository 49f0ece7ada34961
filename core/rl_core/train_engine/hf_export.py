"""``save_hf``'s folder, written from a train engine's full HF-named tensors in the layout ``transformers`` loads.

Weights are streamed into safetensors shards (:class:`ShardWriter`). Each tensor is copied into its shard, so a view
into a larger host buffer (offload's pinned segments) is written as its own bytes: ``huggingface_hub``'s
``save_torch_state_dict`` refuses such views ("None is covering the entire storage")."""

from __future__ import annotations

import copy
import json
import os
import shutil
from pathlib import Path
from typing import Any, Iterable, Mapping

import torch
from rl_core.modeling import load_tokenizer

MAX_SHARD_BYTES = 5 * 10**9  # save_pretrained's default max_shard_size ("5GB")
WEIGHTS_NAME = "model.safetensors"
INDEX_NAME = "model.safetensors.index.json"


class ShardWriter:
    """safetensors shards of at most ``max_shard_bytes`` (a larger tensor a shard of its own), written as tensors are added;
    ``peak_bytes``: the most bytes held at once; ``files``: in order. :meth:`close` writes the last shard and the index."""

    def __init__(self, folder: str | Path, *, max_shard_bytes: int | None = None, dtype: torch.dtype | None = None) -> None:
        max_shard_bytes = MAX_SHARD_BYTES if max_shard_bytes is None else max_shard_bytes
        if max_shard_bytes <= 0:
            raise ValueError(f"max_shard_bytes must be positive, got {max_shard_bytes}")
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.max_shard_bytes = int(max_shard_bytes)
        self.dtype = dtype
        self._pending: dict[str, torch.Tensor] = {}
        self._pending_bytes = 0
        self._shards: list[tuple[str, list[str]]] = []  # (temporary file name, tensor names)
        self.peak_bytes = 0
        self.total_bytes = 0
        self.files: list[str] = []

    def add(self, name: str, tensor: torch.Tensor) -> None:
        if name in self._pending or any(name in names for _, names in self._shards):
            raise ValueError(f"tensor {name!r} written twice")
        src = tensor.detach()
        out = torch.empty(src.shape, dtype=self.dtype or src.dtype, device="cpu")
        out.copy_(src)  # our own contiguous host bytes (a cast when dtype differs), whatever src's storage is
        nbytes = out.numel() * out.element_size()
        if self._pending and self._pending_bytes + nbytes > self.max_shard_bytes:
            self._flush()
        self._pending[name] = out
        self._pending_bytes += nbytes
        self.total_bytes += nbytes
        self.peak_bytes = max(self.peak_bytes, self._pending_bytes)

    def _flush(self) -> None:
        if not self._pending:
            return
        from safetensors.torch import save_file

        tmp = f".shard-{len(self._shards):05d}.safetensors.tmp"
        save_file(self._pending, str(self.folder / tmp), metadata={"format": "pt"})
        self._shards.append((tmp, list(self._pending)))
        self._pending = {}
        self._pending_bytes = 0

    def close(self) -> list[str]:
        """Write the last shard, name the shards as ``transformers`` does, and the index when there are several."""
        self._flush()
        n = len(self._shards)
        if n == 0:
            raise ValueError(f"no tensors to write to {self.folder}")
        names = [WEIGHTS_NAME] if n == 1 else [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]
        weight_map = {}
        for (tmp, tensors), final in zip(self._shards, names):
            os.replace(self.folder / tmp, self.folder / final)
            weight_map.update(dict.fromkeys(tensors, final))
        if n > 1:
            index = {"metadata": {"total_size": self.total_bytes}, "weight_map": dict(sorted(weight_map.items()))}
            (self.folder / INDEX_NAME).write_text(json.dumps(index, indent=2) + "\n")
        self.files = names
        return names


def write_weights(folder: str | Path, weights: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]], *,
                  dtype: torch.dtype | None = None, max_shard_bytes: int | None = None) -> ShardWriter:
    """``weights`` (a dict, or ``(name, tensor)`` pairs consumed as they come) as safetensors shards in ``folder``."""
    writer = ShardWriter(folder, max_shard_bytes=max_shard_bytes, dtype=dtype)
    for name, t in weights.items() if isinstance(weights, Mapping) else weights:
        writer.add(name, t)
    writer.close()
    return writer


#: a vision-language model folder's processor settings (plain JSON / template files), copied with the tokenizer
PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json", "video_preprocessor_config.json", "chat_template.json")


def write_tokenizer(path: str | Path, config: Any) -> None:
    """The run's tokenizer and a vision-language model's processor files (:data:`PROCESSOR_FILES`) into ``path``; never
    fails the export (a folder without a tokenizer is still a model)."""
    tok_dir = config.model.tokenizer_path or config.model.path
    if tok_dir and os.path.isdir(tok_dir):
        try:
            load_tokenizer(tok_dir).save_pretrained(str(path))
        except Exception:  # noqa: BLE001 - a folder without a tokenizer is still a model
            pass
        for name in PROCESSOR_FILES:
            src = os.path.join(tok_dir, name)
            if os.path.isfile(src):
                try:
                    shutil.copyfile(src, os.path.join(str(path), name))
                except OSError:  # as for the tokenizer: the weights are what matters
                    pass


def write_hf_folder(path: Path, weights: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]], hf_config: Any, hf_class: type,
                    generation_config: Any, config: Any, *, dtype: torch.dtype | None = None,
                    max_shard_bytes: int | None = None, write: bool = True) -> ShardWriter | None:
    """config.json (``hf_class`` names the architecture, not a wrapper such as FSDP's), a causal LM's generation config,
    the weights streamed from ``weights`` (``dtype``: on disk, default each tensor's own) and the tokenizer. Every rank
    calls it (the gathers are collective); ranks with ``write=False`` only consume the iterator."""
    if not write:
        for _ in weights.items() if isinstance(weights, Mapping) else weights:
            pass
        return None
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    cfg = copy.deepcopy(hf_config)
    cfg.architectures = [hf_class.__name__]
    if dtype is not None:
        cfg.dtype = dtype
    cfg.save_pretrained(str(path))
    if generation_config is not None and hf_class.__name__.endswith("ForCausalLM"):
        try:
            generation_config.save_pretrained(str(path))
        except Exception:  # noqa: BLE001 - an odd generation config must not lose the weights
            pass
    writer = write_weights(path, weights, dtype=dtype, max_shard_bytes=max_shard_bytes)
    write_tokenizer(path, config)
    return writer
