"""The tiny offline model every test in the project builds."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch
from rl_core_testing.tiny_model import EOS_ID, PAD_ID, bigram_weights, build_tokenizer, make_tiny_model_dir


def _digest(path) -> str:
    return hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()


def test_deterministic_and_seeded(tmp_path):
    a = make_tiny_model_dir(tmp_path / "a", "llama", seed=0)
    b = make_tiny_model_dir(tmp_path / "b", "llama", seed=0)
    c = make_tiny_model_dir(tmp_path / "c", "llama", seed=1)
    assert _digest(a) == _digest(b)
    assert _digest(a) != _digest(c)


@pytest.mark.parametrize("arch,cls,tied", [("llama", "LlamaForCausalLM", False), ("qwen2", "Qwen2ForCausalLM", True)])
def test_loads_offline_with_transformers(tmp_path, arch, cls, tied):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = make_tiny_model_dir(tmp_path / arch, arch, hidden=32, layers=1, heads=2, kv_heads=1)
    cfg = json.loads((path / "config.json").read_text())
    assert cfg["architectures"] == [cls] and cfg["hidden_size"] == 32 and cfg["num_hidden_layers"] == 1
    assert cfg["num_attention_heads"] == 2 and cfg["num_key_value_heads"] == 1 and cfg["tie_word_embeddings"] is tied
    model = AutoModelForCausalLM.from_pretrained(str(path))
    assert type(model).__name__ == cls
    assert (model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()) is tied
    tok = AutoTokenizer.from_pretrained(str(path))
    assert tok.pad_token_id == PAD_ID and tok.eos_token_id == EOS_ID and tok.padding_side == "left"
    assert model.config.vocab_size >= len(tok)


def test_tokenizer_round_trips_any_text_and_chat_template():
    tok = build_tokenizer()
    text = "Q: 12 + 7 = ?\tA: 19. Ünïcode ✓ {json: [1, 2]}"
    ids = tok(text)["input_ids"]
    assert len(ids) == len(text.encode())  # one token per byte, no specials added
    assert tok.decode(ids) == text
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False)
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    ids = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=False, tokenize=True)
    ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    assert EOS_ID in list(ids)
    batch = tok(["a", "abc"], padding=True, return_tensors="pt")
    assert batch["input_ids"][0].tolist()[:2] == [PAD_ID, PAD_ID] and batch["attention_mask"][0].tolist() == [0, 0, 1]


def test_bad_arguments():
    with pytest.raises(ValueError, match="gpt2"):
        make_tiny_model_dir("/tmp/never-written", "gpt2")
    with pytest.raises(ValueError, match="not divisible"):
        make_tiny_model_dir("/tmp/never-written", hidden=30, heads=4)


def test_bigram_weights_make_a_known_next_token_model(tmp_path):
    from transformers import AutoModelForCausalLM

    path = make_tiny_model_dir(tmp_path / "m", "llama")
    succ = {10: 11, 11: 12, 12: EOS_ID, 50: EOS_ID}
    model = AutoModelForCausalLM.from_pretrained(str(path))
    model.load_state_dict(bigram_weights(path, succ))
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([[99, 10, 11, 12, 50]])).logits[0]
    assert logits.argmax(-1)[1:].tolist() == [11, 12, EOS_ID, EOS_ID]
    top2 = logits[1:].topk(2, dim=-1).values
    assert torch.all(top2[:, 0] - top2[:, 1] > 20)  # a margin of many nats: sampling follows it too
    with pytest.raises(ValueError, match="untied"):
        bigram_weights(make_tiny_model_dir(tmp_path / "q", "qwen2"), succ)
