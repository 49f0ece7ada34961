"""A tiny random Qwen-VL folder built offline (model, processor, tokenizer), for the image-input tests.

:func:`make_tiny_vlm_dir` writes what a real Qwen2-VL / Qwen2.5-VL / Qwen3-VL / Qwen3.5 folder holds: ``config.json``
(vision depth 1-2, text hidden 64), ``model.safetensors``, ``preprocessor_config.json`` (Qwen2-VL's image processor
from its class defaults, pixels bounded so an image is a few tokens), ``processor_config.json``, and the tokenizer of
:mod:`rl_core_testing.tiny_model` plus Qwen's vision tokens and a chat template that places images.
``AutoProcessor`` / ``AutoModelForImageTextToText`` load it with no network.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import torch

from rl_core_testing.tiny_model import EOS_ID, IM_START_ID, PAD_ID, build_tokenizer, save_quietly

VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
#: ids of VISION_TOKENS in the tokenizer (after the 3 specials and the 256 bytes)
VISION_START_ID, VISION_END_ID, IMAGE_PAD_ID, VIDEO_PAD_ID = 259, 260, 261, 262
VOCAB = 264

TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}{{ '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "{{ '<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


ARCHS = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5")
#: the processor class and the vision patch size of each family
PROCESSORS = {"qwen2_vl": ("Qwen2VLProcessor", 14), "qwen2_5_vl": ("Qwen2_5_VLProcessor", 14), "qwen3_vl": ("Qwen3VLProcessor", 16),
              "qwen3_5": ("Qwen3VLProcessor", 16)}


def tiny_vlm_config(arch: str = "qwen2_vl"):
    """The config :func:`make_tiny_vlm_dir` writes: text hidden 64 (4 heads of 16, multimodal RoPE sections 2 + 3 + 3),
    a vision tower of depth 1-2 and width 32 whose output is the text width."""
    from transformers import Qwen2_5_VLConfig, Qwen2VLConfig, Qwen3_5Config, Qwen3VLConfig

    if arch not in ARCHS:
        raise ValueError(f"arch={arch!r} is not supported; use one of {', '.join(ARCHS)}")
    text = dict(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        rope_parameters=dict(rope_type="default", mrope_section=[2, 3, 3], rope_theta=10000.0), max_position_embeddings=1024,
        rms_norm_eps=1e-6, bos_token_id=IM_START_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID,
    )
    ids = dict(image_token_id=IMAGE_PAD_ID, video_token_id=VIDEO_PAD_ID, vision_start_token_id=VISION_START_ID, vision_end_token_id=VISION_END_ID,
               tie_word_embeddings=False)
    patch = PROCESSORS[arch][1]
    if arch == "qwen2_vl":
        vision = dict(depth=1, embed_dim=32, hidden_size=64, num_heads=2, mlp_ratio=2, patch_size=patch, spatial_merge_size=2, temporal_patch_size=2)
        cfg = Qwen2VLConfig(text_config=text, vision_config=vision, **ids)
    elif arch == "qwen2_5_vl":  # block 0 windowed attention, block 1 full
        vision = dict(depth=2, hidden_size=32, out_hidden_size=64, intermediate_size=64, num_heads=2, patch_size=patch, spatial_merge_size=2,
                      temporal_patch_size=2, window_size=56, fullatt_block_indexes=[1])
        cfg = Qwen2_5_VLConfig(text_config=text, vision_config=vision, **ids)
    elif arch == "qwen3_5":  # Qwen3.5: a linear-attention (gated delta rule) layer, then a full-attention one (partial rotary)
        text.update(head_dim=16, layer_types=["linear_attention", "full_attention"], linear_key_head_dim=16, linear_value_head_dim=16,
                    linear_num_key_heads=2, linear_num_value_heads=4)
        text["rope_parameters"] = dict(rope_type="default", mrope_section=[2, 1, 1], rope_theta=10000.0, partial_rotary_factor=0.5, mrope_interleaved=True)
        vision = dict(depth=2, hidden_size=32, out_hidden_size=64, intermediate_size=64, num_heads=2, patch_size=patch, spatial_merge_size=2,
                      temporal_patch_size=2, num_position_embeddings=64)
        cfg = Qwen3_5Config(text_config=text, vision_config=vision, **ids)
    else:  # Qwen3-VL: interleaved mrope sections, deepstack features from vision block 0
        text.update(head_dim=16)
        text["rope_parameters"]["mrope_interleaved"] = True
        vision = dict(depth=2, hidden_size=32, out_hidden_size=64, intermediate_size=64, num_heads=2, patch_size=patch, spatial_merge_size=2,
                      temporal_patch_size=2, num_position_embeddings=64, deepstack_visual_indexes=[0])
        cfg = Qwen3VLConfig(text_config=text, vision_config=vision, **ids)
    cfg.dtype = "float32"
    return cfg


def build_vlm_tokenizer():
    tok = build_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": list(VISION_TOKENS)})
    assert tok.convert_tokens_to_ids(list(VISION_TOKENS)) == [VISION_START_ID, VISION_END_ID, IMAGE_PAD_ID, VIDEO_PAD_ID]
    tok.chat_template = TEMPLATE
    return tok


def make_tiny_vlm_dir(path: str | Path, arch: str = "qwen2_vl", seed: int = 0, *, max_tokens: int = 4) -> Path:
    """Write a tiny random vision-language model (fp32; ``arch`` in :data:`ARCHS`) with its processor to ``path``;
    the image processor (Qwen2-VL's, from its class defaults) resizes an image to between 1 and ``max_tokens`` image
    tokens (each ``2 x patch`` pixels square)."""
    from transformers import AutoModelForImageTextToText, GenerationConfig
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForImageTextToText.from_config(tiny_vlm_config(arch), dtype=torch.float32)
    model.generation_config = GenerationConfig(bos_token_id=IM_START_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID)
    save_quietly(model, path)
    build_vlm_tokenizer().save_pretrained(path)
    name, patch = PROCESSORS[arch]
    side = 2 * patch  # patch x spatial merge: the pixels of one image token
    Qwen2VLImageProcessorPil(min_pixels=side * side, max_pixels=max_tokens * side * side, patch_size=patch).save_pretrained(path)
    (path / "processor_config.json").write_text(json.dumps({"processor_class": name}))
    return path


def png_bytes(height: int, width: int, seed: int = 0) -> bytes:
    """A random RGB image as PNG bytes."""
    import numpy as np
    from PIL import Image

    arr = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()
