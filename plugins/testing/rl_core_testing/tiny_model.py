"""Tiny random HF models built offline, for every test in the project.

:func:`make_tiny_model_dir` writes a normal Hugging Face folder
(``config.json``, ``generation_config.json``, ``model.safetensors``, and a
tokenizer) that ``AutoModelForCausalLM.from_pretrained`` and
``AutoTokenizer.from_pretrained`` load with no network. It takes well under
a second and is deterministic: the same arguments give byte-identical weights.

The tokenizer is byte-level (GPT-2 style byte -> unicode mapping, no merges):
every UTF-8 string round-trips, one token per byte, plus three special tokens
with ChatML roles:

====  ==================  ===========================
id    token               use
====  ==================  ===========================
0     ``<|endoftext|>``   pad
1     ``<|im_start|>``    ChatML turn start
2     ``<|im_end|>``      ChatML turn end, EOS
3..   the 256 bytes       text
====  ==================  ===========================

:func:`bigram_weights` turns a tiny *llama* model into a deterministic
next-token table (the transformer layers are zeroed so the logits depend on
the current token only): tests use it to know, by construction, what a
correct engine must generate (e.g. EOS after a given number of steps).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping

import torch

PAD_TOKEN = "<|endoftext|>"
BOS_TOKEN = "<|im_start|>"
EOS_TOKEN = "<|im_end|>"
SPECIAL_TOKENS = (PAD_TOKEN, BOS_TOKEN, EOS_TOKEN)
PAD_ID, IM_START_ID, EOS_ID = 0, 1, 2

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

ARCHS = ("llama", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe")


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable unicode character table."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def build_tokenizer():
    """A byte-level ``PreTrainedTokenizerFast`` with pad/eos and a ChatML template (no files read)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for byte in range(256):
        vocab[_bytes_to_unicode()[byte]] = len(SPECIAL_TOKENS) + byte
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD_TOKEN,
        eos_token=EOS_TOKEN,
        bos_token=None,
        unk_token=None,
        padding_side="left",
        chat_template=CHATML_TEMPLATE,
        model_max_length=4096,
    )


def tiny_config(
    arch: str = "llama",
    *,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    vocab_size: int | None = None,
    intermediate: int | None = None,
    max_positions: int = 1024,
    tie_word_embeddings: bool | None = None,
):
    """The ``PretrainedConfig`` :func:`make_tiny_model_dir` writes.

    llama defaults to untied embeddings, qwen2 to tied ones (as Qwen2.5-0.5B),
    so both weight layouts are exercised by the tests.
    """
    from transformers import LlamaConfig, Qwen2Config

    if arch not in ARCHS:
        raise ValueError(f"arch={arch!r} is not supported; use one of {', '.join(ARCHS)}")
    if hidden % heads:
        raise ValueError(f"hidden={hidden} is not divisible by heads={heads}")
    if heads % kv_heads:
        raise ValueError(f"heads={heads} is not divisible by kv_heads={kv_heads}")
    n_tokens = len(SPECIAL_TOKENS) + 256
    vocab_size = vocab_size or ((n_tokens + 7) // 8) * 8  # 264
    if vocab_size < n_tokens:
        raise ValueError(f"vocab_size={vocab_size} is smaller than the tokenizer's {n_tokens} tokens")
    common = dict(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=intermediate or 2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_positions,
        rms_norm_eps=1e-6,
        bos_token_id=IM_START_ID,
        eos_token_id=EOS_ID,
        pad_token_id=PAD_ID,
        attention_dropout=0.0,
    )
    if arch == "llama":
        cfg = LlamaConfig(tie_word_embeddings=bool(tie_word_embeddings), **common)
    elif arch == "qwen3":  # per-head q/k norms; head_dim set explicitly (Qwen3Config's default is 128)
        from transformers import Qwen3Config

        cfg = Qwen3Config(tie_word_embeddings=True if tie_word_embeddings is None else tie_word_embeddings, head_dim=hidden // heads, **common)
    elif arch in ("qwen2_moe", "qwen3_moe"):  # 4 experts of width hidden / 2, 2 per token; Qwen2-MoE adds a gated shared expert
        from transformers import Qwen2MoeConfig, Qwen3MoeConfig

        moe = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=hidden // 2, output_router_logits=False)
        tied = False if tie_word_embeddings is None else tie_word_embeddings
        if arch == "qwen3_moe":
            cfg = Qwen3MoeConfig(tie_word_embeddings=tied, head_dim=hidden // heads, norm_topk_prob=True, **moe, **common)
        else:
            cfg = Qwen2MoeConfig(tie_word_embeddings=tied, shared_expert_intermediate_size=hidden, norm_topk_prob=False, **moe, **common)
    else:
        cfg = Qwen2Config(tie_word_embeddings=True if tie_word_embeddings is None else tie_word_embeddings, **common)
    cfg.dtype = "float32"
    return cfg


def make_tiny_model_dir(
    path: str | Path,
    arch: str = "llama",
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    seed: int = 0,
    *,
    tie_word_embeddings: bool | None = None,
) -> Path:
    """Write a tiny random ``arch`` causal LM (fp32) with its tokenizer to ``path``; returns ``path``.

    ``arch``: llama, qwen2, qwen3 (Qwen3: per-head q / k norms, drawn around 1), qwen2_moe or qwen3_moe (4 experts, 2 per
    token, routers drawn at random)."""
    from transformers import AutoModelForCausalLM, GenerationConfig

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    cfg = tiny_config(arch, hidden=hidden, layers=layers, heads=heads, kv_heads=kv_heads, tie_word_embeddings=tie_word_embeddings)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
        if arch in ("qwen3", "qwen3_moe"):  # the per-head q / k norms drawn around 1 (not all ones): a swapped or lost norm shows in the outputs
            with torch.no_grad():
                for name, p in model.named_parameters():
                    if name.endswith(("q_norm.weight", "k_norm.weight")):
                        p.copy_(1 + 0.3 * torch.randn_like(p))
        if arch.endswith("_moe"):  # routers drawn like the other weights (their init is zeros: every expert would tie)
            with torch.no_grad():
                for name, p in model.named_parameters():
                    if name.endswith("mlp.gate.weight"):
                        p.normal_(0, 0.5)
    model.generation_config = GenerationConfig(bos_token_id=IM_START_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID)
    save_quietly(model, path)
    build_tokenizer().save_pretrained(path)
    return path


def save_quietly(model, path: str | Path) -> None:
    """``model.save_pretrained(path)`` without transformers' progress bars."""
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model.save_pretrained(path)
    finally:
        if bars:
            hf_logging.enable_progress_bar()


def bigram_weights(model_dir: str | Path, successor: Mapping[int, int], *, scale: float = 2.0) -> dict[str, torch.Tensor]:
    """HF-named weights that make a tiny untied llama a deterministic bigram model.

    All attention output and MLP down projections are zeroed, so the residual
    stream at every position is the current token's embedding; with the final
    norm weight set to ones, row ``t`` of ``lm_head`` is ``scale`` times the
    sum of the normalised embeddings of the tokens ``c`` with
    ``successor[c] == t``. After token ``c`` the logit of ``successor[c]`` is
    then about ``scale * hidden`` (128 with the defaults) while every other
    logit is a sum of dot products of nearly unrelated random vectors (about
    ``scale * sqrt(hidden)`` each): with ``hidden=64`` the gap is dozens of
    nats, so greedy decoding and temperature-1 sampling both follow the
    table. Rows of tokens that succeed nothing are zero.
    """
    from safetensors.torch import load_file

    model_dir = Path(model_dir)
    cfg = json.loads((model_dir / "config.json").read_text())
    if cfg.get("tie_word_embeddings"):
        raise ValueError("bigram_weights needs untied embeddings (make_tiny_model_dir(arch='llama'))")
    sd = load_file(str(model_dir / "model.safetensors"))
    emb = sd["model.embed_tokens.weight"]
    eps = cfg.get("rms_norm_eps", 1e-6)
    normed = emb * torch.rsqrt(emb.pow(2).mean(-1, keepdim=True) + eps)
    lm_head = torch.zeros_like(sd["lm_head.weight"])
    for cur, nxt in successor.items():
        lm_head[nxt] += normed[cur] * scale
    out = {}
    for name, t in sd.items():
        if name.endswith(("self_attn.o_proj.weight", "mlp.down_proj.weight")):
            t = torch.zeros_like(t)
        elif name == "model.norm.weight":
            t = torch.ones_like(t)
        elif name == "lm_head.weight":
            t = lm_head
        out[name] = t.clone()
    return out
