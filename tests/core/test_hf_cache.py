"""rl_core.util.hf_cache: the KV-cache keyword under transformers' old name and its new one."""

from __future__ import annotations

import pytest
import torch
from rl_core.util.hf_cache import cache_keyword, output_cache
from rl_core.train_engine.shared_prompt import can_share_prompts


class _Old(torch.nn.Module):  # transformers <= 5.23
    def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None, use_cache=None):
        return {"logits": None, "past_key_values": "old-cache"}


class _New(torch.nn.Module):  # transformers >= 5.24
    def forward(self, input_ids=None, attention_mask=None, position_ids=None, cache=None, use_cache=None, **kwargs):
        return {"logits": None, "cache": "new-cache"}


class _NoCache(torch.nn.Module):
    def forward(self, input_ids=None, position_ids=None):
        return {}


def test_the_keyword_the_installed_model_takes():
    assert cache_keyword(_Old()) == "past_key_values"
    assert cache_keyword(_New()) == "cache"
    assert cache_keyword(_NoCache()) is None
    # the shared-prompt forward follows it (it was silently off under the new name)
    assert can_share_prompts(_Old()) and can_share_prompts(_New()) and not can_share_prompts(_NoCache())


def test_the_cache_is_read_back_under_either_name():
    assert output_cache(_Old()()) == "old-cache"
    assert output_cache(_New()()) == "new-cache"
    with pytest.raises(AttributeError, match="holds no KV cache"):
        output_cache({"logits": 1})


def test_the_installed_transformers_model_is_recognised():
    from transformers import LlamaConfig, LlamaForCausalLM

    model = LlamaForCausalLM(LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, vocab_size=32))
    assert cache_keyword(model) in ("cache", "past_key_values")
    out = model(input_ids=torch.tensor([[1, 2, 3]]), use_cache=True)
    assert output_cache(out) is not None
