"""A tiny ChatML tokenizer for the data tests (no downloads).

The project's :func:`rl_core_testing.tiny_model.make_tiny_model_dir` is used
when it is importable; otherwise a word-level tokenizer is built here.
"""

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


@pytest.fixture(scope="session")
def _tiny_tokenizer_dir(tmp_path_factory):
    try:
        from rl_core_testing.tiny_model import make_tiny_model_dir
    except ImportError:
        return None
    return make_tiny_model_dir(tmp_path_factory.mktemp("tiny_model"))


@pytest.fixture
def tiny_tokenizer(_tiny_tokenizer_dir):
    if _tiny_tokenizer_dir is None:
        return make_tiny_tokenizer()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(_tiny_tokenizer_dir)
