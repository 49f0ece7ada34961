"""A model's shape before anything is built (its config.json, the Hugging Face cache or a known shape), a dtype's
bytes and a device's memory: what the estimates read (the device-memory estimate itself: rl-memory-estimate,
docs/memory.md; the disk estimate: :mod:`rl_memory_estimate.disk`).
"""

from __future__ import annotations

import glob
import json
import os
from typing import Any

import attrs

from rl_core.plan.builtin_model import cache_dir

GB = 2**30
CPU_RUNTIME_GB = 0.45  # RSS of a CPU run's process before any model: python + torch + transformers + tokenizer + data (measured)
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}

# Shapes of models a config may name without a local folder (from their published config.json files).
KNOWN_SHAPES: dict[str, dict[str, Any]] = {
    "smollm2": {"hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
                "num_key_value_heads": 3, "head_dim": 64, "vocab_size": 49152, "tie_word_embeddings": True, "model_type": "llama"},
    "qwen/qwen2.5-0.5b": {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
                          "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True, "model_type": "qwen2"},
}
KNOWN_SHAPES["qwen/qwen2.5-0.5b-instruct"] = KNOWN_SHAPES["qwen/qwen2.5-0.5b"]
KNOWN_SHAPES["qwen/qwen2.5-7b"] = {"hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
                                   "num_key_value_heads": 4, "vocab_size": 152064, "tie_word_embeddings": False, "model_type": "qwen2"}
KNOWN_SHAPES["qwen/qwen2.5-7b-instruct"] = KNOWN_SHAPES["qwen/qwen2.5-7b"]


@attrs.frozen(kw_only=True)
class ModelShape:
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    qkv_bias: bool
    source: str
    model_type: str = ""
    # MoE (num_experts in config.json): routed experts of moe_intermediate each, topk per token, a shared expert
    experts: int = 0
    moe_intermediate: int = 0
    shared_intermediate: int = 0
    topk: int = 0
    # the train backend's share of the routed experts on a rank relative to the rest of the model (expert parallelism:
    # model-parallel size / (expert TP x EP x PP)); 1 = split like the rest
    expert_fraction: float = 1.0

    @property
    def expert_params(self) -> int:
        """The routed experts' weights (every layer)."""
        return self.layers * self.experts * 3 * self.hidden * self.moe_intermediate

    @property
    def params(self) -> int:
        h, hd = self.hidden, self.head_dim
        q, kv = self.heads * hd, self.kv_heads * hd
        attn = h * q + 2 * h * kv + q * h + ((q + 2 * kv) if self.qkv_bias else 0)
        mlp = 3 * h * self.intermediate
        if self.experts:  # router + shared expert (and its gate) here; the routed experts in expert_params
            mlp = h * self.experts + (3 * h * self.shared_intermediate + h if self.shared_intermediate else 0)
        layer = attn + mlp + 2 * h
        return self.vocab * h * (1 if self.tied else 2) + self.layers * layer + h + self.expert_params

    @property
    def train_params(self) -> int:
        """What the train backend's per-rank terms divide by the model-parallel size: the routed experts scaled by
        :attr:`expert_fraction` (expert parallelism shards them further)."""
        return round(self.params - self.expert_params * (1 - self.expert_fraction))

    @property
    def active_intermediate(self) -> int:
        """The MLP width a token goes through (MoE: its top-k experts and the shared one)."""
        return self.topk * self.moe_intermediate + self.shared_intermediate if self.experts else self.intermediate


def shape_from_config(cfg: dict[str, Any], source: str) -> ModelShape:
    heads = int(cfg["num_attention_heads"])
    hidden = int(cfg["hidden_size"])
    return ModelShape(
        hidden=hidden, intermediate=int(cfg.get("intermediate_size") or 4 * hidden), layers=int(cfg["num_hidden_layers"]),
        heads=heads, kv_heads=int(cfg.get("num_key_value_heads") or heads), head_dim=int(cfg.get("head_dim") or hidden // heads),
        vocab=int(cfg["vocab_size"]), tied=bool(cfg.get("tie_word_embeddings", False)),
        qkv_bias=bool(cfg.get("attention_bias", cfg.get("model_type") == "qwen2")),
        source=source, model_type=str(cfg.get("model_type") or ""), **_moe_shape(cfg),
    )


def _moe_shape(cfg: dict[str, Any]) -> dict[str, int]:
    """The routed experts of an MoE config (Qwen2-MoE / Qwen3-MoE / Mixtral spellings); none for a dense model."""
    experts = cfg.get("num_experts", cfg.get("num_local_experts"))
    if not isinstance(experts, int) or experts <= 1:
        return {}
    return dict(experts=experts, moe_intermediate=int(cfg.get("moe_intermediate_size") or cfg.get("intermediate_size") or 0),
                shared_intermediate=int(cfg.get("shared_expert_intermediate_size") or 0),
                topk=int(cfg.get("num_experts_per_tok") or 1))


def hub_config(name: str) -> str | None:
    """The config.json of a hub name's newest snapshot in the Hugging Face cache (None when not cached)."""
    hub = os.environ.get("HF_HUB_CACHE") or os.path.join(os.environ.get("HF_HOME") or os.path.expanduser("~/.cache/huggingface"), "hub")
    hits = sorted(glob.glob(os.path.join(hub, "models--" + name.replace("/", "--"), "snapshots", "*", "config.json")))
    return hits[-1] if hits else None


def model_shape(path: str, override: dict[str, Any] | None = None) -> ModelShape | None:
    """The model's shape from its config.json (local folder, built-in cache, HF cache), or a known shape; None if unknown."""
    candidates = []
    if path.startswith("builtin:"):
        name = path.split(":", 1)[1]
        candidates.append(str(cache_dir() / "models" / name / "config.json"))
        known = name
    else:
        candidates.append(os.path.join(os.path.expanduser(path), "config.json"))
        candidates.append(hub_config(path) or "")
        known = path.lower()
    for cand in candidates:
        if cand and os.path.isfile(cand):
            try:
                cfg = json.loads(open(cand).read())
                cfg = cfg.get("text_config", cfg) if "num_hidden_layers" not in cfg else cfg
                return shape_from_config({**cfg, **(override or {})}, cand)
            except (OSError, ValueError, KeyError, TypeError):
                continue
    if known in KNOWN_SHAPES:
        return shape_from_config({**KNOWN_SHAPES[known], **(override or {})}, f"known shape of {known}")
    return None


def device_memory(device: str) -> float | None:
    if device == "cpu":
        try:
            return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        except (ValueError, OSError, AttributeError):
            return None
    try:
        import torch

        if torch.cuda.is_available():
            return float(torch.cuda.get_device_properties(0).total_memory)
    except Exception:  # noqa: BLE001 - no device: no comparison
        pass
    return None
