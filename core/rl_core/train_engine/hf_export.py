"""``save_hf``'s folder: what every train engine writes once it has the full HF-named tensors on one rank."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import torch


def write_hf_folder(path: Path, state: dict[str, torch.Tensor], hf_config: Any, hf_class: type, generation_config: Any, config: Any) -> None:
    """config.json, the generation config, safetensors shards (5 GB) and the tokenizer, as ``save_pretrained`` writes them.

    ``hf_class`` names the architecture in config.json (not a wrapper class such as FSDP's);
    the generation config is written for causal LMs only; the tokenizer comes from
    ``model.tokenizer_path`` or ``model.path`` when that is a folder. Neither of those two
    extras can fail the export: the weights are what matters.
    """
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
