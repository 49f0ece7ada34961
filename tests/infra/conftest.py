"""A tiny ChatML tokenizer built in-process (no downloads) for the data tests."""

from __future__ import annotations

import pytest

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def make_tiny_tokenizer(chat_template: str | None = CHATML):
    """A word-level tokenizer: every whitespace/punctuation-separated word of a small vocabulary is one id."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<pad>", "<unk>", "<|im_start|>", "<|im_end|>", "system", "user", "assistant"]
    words += "what is the answer to plus minus times be brief one two three four five six seven eight nine ten ? . ,".split()
    words += [str(i) for i in range(100)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", eos_token="<|im_end|>",
        additional_special_tokens=["<|im_start|>"],
    )
    if chat_template:
        fast.chat_template = chat_template
    return fast


@pytest.fixture
def tiny_tokenizer():
    return make_tiny_tokenizer()
