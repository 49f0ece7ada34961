"""A byte-level tokenizer whose vocabulary differs from rl-core's tiny test policy's (``tiny_model.build_tokenizer``).

Other special tokens (``<pad>`` 0, ``<s>`` 1, ``</s>`` 2), the 256 bytes in reverse order and three merges:
no token id means the same text to both, so a reward model built on it scores garbage if it is given the
policy's ids, and the right thing only if the text is re-encoded (tests of model-based rewards).
"""

from __future__ import annotations

OTHER_SPECIALS = ("<pad>", "<s>", "</s>")
OTHER_MERGES = [("t", "h"), ("h", "e"), ("a", "a")]
# another chat format than the policy's ChatML
OTHER_TEMPLATE = "{% for m in messages %}{{ '<s>' + m['role'] + ': ' + m['content'] + '</s>' }}{% endfor %}"


def build_other_tokenizer(chat_template: str | None = OTHER_TEMPLATE):
    """The tokenizer (right padding, pad ``<pad>``, eos ``</s>``), with ``chat_template`` (None: none)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import bytes_to_unicode  # GPT-2's byte -> printable character table

    table = bytes_to_unicode()
    vocab = {tok: i for i, tok in enumerate(OTHER_SPECIALS)}
    for byte in reversed(range(256)):
        vocab[table[byte]] = len(vocab)
    for a, b in OTHER_MERGES:
        vocab[a + b] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=list(OTHER_MERGES), fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(OTHER_SPECIALS))
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", bos_token="<s>", unk_token=None,
        padding_side="right", chat_template=chat_template, model_max_length=4096,
    )
