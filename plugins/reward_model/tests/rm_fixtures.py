"""Tiny reward models and judges built offline, with vocabularies unlike the policy's (rl_core_testing.tiny_model)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import torch
from rl_reward_model.reward_tokenizer import OTHER_TEMPLATE, build_other_tokenizer

RM_TEMPLATE = OTHER_TEMPLATE
build_rm_tokenizer = build_other_tokenizer


def rm_config(vocab: int, *, hidden: int = 32, layers: int = 1, heads: int = 2):
    from transformers import LlamaConfig

    cfg = LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=heads, max_position_embeddings=512, pad_token_id=0, bos_token_id=1, eos_token_id=2, num_labels=1,
        attention_dropout=0.0,
    )
    cfg.architectures = ["LlamaForSequenceClassification"]
    return cfg


def make_reward_model_dir(path: Path, *, seed: int = 0, model: Any = None, chat_template: str | None = RM_TEMPLATE, **shape: Any) -> Path:
    """A tiny random (or the given) LlamaForSequenceClassification with the RM tokenizer, saved to ``path``."""
    from transformers import LlamaForSequenceClassification

    tok = build_rm_tokenizer(chat_template)
    if model is None:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = LlamaForSequenceClassification(rm_config(len(tok), **shape))
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def with_reward_model(config: Any, **rm: Any) -> Any:
    """``config`` with ``reward_model`` fields set (``model`` takes a dict of reward_model.model fields)."""
    from rl_core.config.sections import evolve_key
    from rl_reward_model.config import JudgeConfig, RewardModelModelConfig

    section = config.reward_model
    if "model" in rm:
        rm["model"] = attrs.evolve(section.model if isinstance(section.model, RewardModelModelConfig) else RewardModelModelConfig(), **rm["model"])
    judge = rm.pop("judge", None)
    section = attrs.evolve(section, **rm)
    if judge is not None:  # the judge's settings: rl-reward-model's own section under reward_model
        section = evolve_key(section, "judge", attrs.evolve(JudgeConfig(), **judge))
    return evolve_key(config, "reward_model", section)
