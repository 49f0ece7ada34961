"""A learned reward on a property of text, for tests and bench/reward_model_learning.py.

The property: the fraction of a response's characters that are ASCII letters (a random tiny policy writes
about one in five: its byte tokens above 127 decode to U+FFFD, and most ASCII bytes are not letters).
:func:`train_property_reward_model` trains a tiny ``LlamaForSequenceClassification`` (its own byte
vocabulary in another order, so no token id means the same to both models) to predict it from random
responses, scoring only the response: its chat template renders the last message alone. A policy
trained against it with GRPO or PPO should write more letters on prompts it never saw.
"""

from __future__ import annotations

import random
from pathlib import Path

import torch

ONLY_RESPONSE_TEMPLATE = "{{ messages[-1]['content'] }}"


def letter_fraction(text: str) -> float:
    """The property: ASCII letters / characters (0 for an empty text)."""
    return sum(c.isascii() and c.isalpha() for c in text) / len(text) if text else 0.0


def random_response(rng: random.Random, max_tokens: int = 8) -> str:
    """Text as a random tiny byte-level policy writes it (random bytes, decoded leniently); some rows biased to letters."""
    n = rng.randint(1, max_tokens)
    bias = rng.random()
    raw = bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") if rng.random() < bias else rng.randrange(256) for _ in range(n))
    return raw.decode("utf-8", errors="replace")


def train_property_reward_model(out: Path, *, steps: int = 300, batch: int = 64, seed: int = 0, hidden: int = 32) -> dict[str, float]:
    """Train and save the reward model to ``out``; returns its held-out fit (``mae``, ``corr``)."""
    from transformers import LlamaConfig, LlamaForSequenceClassification

    from rl_reward_model.reward_tokenizer import build_other_tokenizer

    tok = build_other_tokenizer(ONLY_RESPONSE_TEMPLATE)
    cfg = LlamaConfig(
        vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=256, pad_token_id=tok.pad_token_id, bos_token_id=1, eos_token_id=2, num_labels=1,
    )
    cfg.architectures = ["LlamaForSequenceClassification"]
    rng = random.Random(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForSequenceClassification(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)

    def encode(texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        enc = tok([tok.apply_chat_template([{"role": "assistant", "content": t}], tokenize=False) for t in texts],
                  add_special_tokens=False, padding=True, return_tensors="pt")
        return enc["input_ids"], enc["attention_mask"]

    model.train()
    for _ in range(steps):
        texts = [random_response(rng) for _ in range(batch)]
        ids, mask = encode(texts)
        target = torch.tensor([letter_fraction(t) for t in texts])
        loss = torch.nn.functional.mse_loss(model(input_ids=ids, attention_mask=mask).logits[:, 0], target)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    held = [random_response(random.Random(seed + 1)) for _ in range(1)] + [random_response(rng) for _ in range(255)]
    ids, mask = encode(held)
    with torch.no_grad():
        pred = model(input_ids=ids, attention_mask=mask).logits[:, 0]
    target = torch.tensor([letter_fraction(t) for t in held])
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    corr = torch.corrcoef(torch.stack([pred, target]))[0, 1].item()
    return {"mae": (pred - target).abs().mean().item(), "corr": corr}


def sample_property(model_dir: Path, prompts: list[list[dict[str, str]]], *, samples: int = 8, max_new_tokens: int = 8, seed: int = 0) -> float:
    """Mean :func:`letter_fraction` of ``samples`` sampled responses per prompt (temperature 1) of the policy at ``model_dir``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    values = []
    gen = torch.Generator().manual_seed(seed)
    for messages in prompts:
        ids = tok(tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True), add_special_tokens=False, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            for _ in range(samples):
                cur = ids
                for _ in range(max_new_tokens):  # plain sampling, seeded here (generate() has no generator argument)
                    logits = model(input_ids=cur).logits[:, -1].float()
                    nxt = torch.multinomial(torch.softmax(logits, -1), 1, generator=gen)
                    if int(nxt) == tok.eos_token_id:
                        break
                    cur = torch.cat([cur, nxt], dim=1)
                values.append(letter_fraction(tok.decode(cur[0, ids.shape[1]:].tolist(), skip_special_tokens=True)))
    return sum(values) / len(values)
