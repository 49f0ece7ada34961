"""Tiny reward models and judges built offline, with vocabularies unlike the policy's (rl_core.testing.tiny_model)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import torch
from rl_core.testing.tiny_model import _bytes_to_unicode

RM_SPECIALS = ("<pad>", "<s>", "</s>")
RM_MERGES = [("t", "h"), ("h", "e"), ("a", "a")]
# another chat format than the policy's ChatML
RM_TEMPLATE = "{% for m in messages %}{{ '<s>' + m['role'] + ': ' + m['content'] + '</s>' }}{% endfor %}"


def build_rm_tokenizer(chat_template: str | None = RM_TEMPLATE):
    """A byte-level BPE tokenizer whose ids differ from the policy's: other specials, bytes in reverse order, merges."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    table = _bytes_to_unicode()
    vocab = {tok: i for i, tok in enumerate(RM_SPECIALS)}
    for byte in reversed(range(256)):
        vocab[table[byte]] = len(vocab)
    for a, b in RM_MERGES:
        vocab[a + b] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=list(RM_MERGES), fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(RM_SPECIALS))
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", bos_token="<s>", unk_token=None,
        padding_side="right", chat_template=chat_template, model_max_length=4096,
    )


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
    from rl_core.config.schema import JudgeConfig, RewardModelModelConfig

    section = config.reward_model
    if "model" in rm:
        rm["model"] = attrs.evolve(section.model if isinstance(section.model, RewardModelModelConfig) else RewardModelModelConfig(), **rm["model"])
    if "judge" in rm:
        rm["judge"] = attrs.evolve(JudgeConfig(), **rm["judge"])
    return attrs.evolve(config, reward_model=attrs.evolve(section, **rm))
