"""Image inputs of prompt rows (verl's multimodal row format) -> the model processor's ids and pixel tensors.

A row carries its images under ``data.image_key`` (default ``images``): a list whose items are an HF-datasets
image dict (``{"bytes": b"...", "path": ...}``: the bytes win, else the path), a PIL image, or a local file path.
Each ``<image>`` in a message's text marks where the next image goes; the counts must match. A path is opened
as an image file only (PIL decodes it; nothing runs); a URL is refused (no network fetch here).

The model folder's processor (``AutoProcessor``, offline) renders the chat template with the images in place and
expands each image into its image-pad tokens; its ``pixel_values`` / ``image_grid_thw`` (whatever image tensors
the processor returns) ride along with the row as ``multi_modal_inputs`` (a dict of tensors per prompt, verl's
name). Without torchvision the Qwen-VL processors cannot build their video half; the processor is then built with
images only (videos are refused at the data anyway).
"""

from __future__ import annotations

import io
import json
import os
import re
from typing import Any, Sequence

import torch
from rl_core.data.rows import DataError
from rl_core.modeling import load_hf_config

PLACEHOLDER = "<image>"
#: tensors of a processor's output that are not per-image (they are rebuilt for the whole sequence)
TEXT_FIELDS = frozenset({"input_ids", "attention_mask", "mm_token_type_ids", "token_type_ids"})


class ImageDataError(DataError):
    """An image input that cannot be read or used."""


def decode_image(value: Any, where: str):
    """``value`` (HF image dict, PIL image, bytes or local path) as an RGB PIL image; errors name ``where``."""
    from PIL import Image

    if isinstance(value, Image.Image):
        return value.convert("RGB")
    data, path = None, None
    if isinstance(value, dict):
        data, path = value.get("bytes"), value.get("path")
        if data is None and path is None:
            raise ImageDataError(f"{where}: an image dict needs 'bytes' or 'path' (HF datasets' image format), got keys {sorted(value)}")
    elif isinstance(value, (bytes, bytearray)):
        data = value
    elif isinstance(value, (str, os.PathLike)):
        path = os.fspath(value)
    else:
        raise ImageDataError(f"{where}: an image must be a {{'bytes', 'path'}} dict, a PIL image or a local file path, got {type(value).__name__}")
    if data is None:
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", path):
            raise ImageDataError(f"{where}: image {path!r} is a URL; rl-core reads local image files only (no download): "
                                 "fetch it first and put its local path (or its bytes) in the row")
        if not os.path.isfile(path):
            raise ImageDataError(f"{where}: image file {path!r} does not exist; a relative path is read from the working directory")
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise ImageDataError(f"{where}: image file {path!r} cannot be read: {e.strerror or e}") from None
    try:
        img = Image.open(io.BytesIO(bytes(data)))
        img.load()
        return img.convert("RGB")
    except Exception as e:  # noqa: BLE001 - PIL raises UnidentifiedImageError, OSError, ValueError, ... for bad data
        raise ImageDataError(f"{where}: the image does not decode ({type(e).__name__}: {str(e)[:120]}); "
                             "store PNG / JPEG bytes or the path of such a file") from None


def image_messages(messages: list[dict[str, Any]], n_images: int, where: str, prompt_key: str = "prompt", image_key: str = "images") -> list[dict[str, Any]]:
    """``messages`` with each ``<image>`` turned into an ``{"type": "image"}`` content part (the others text parts)."""
    found = sum(m["content"].count(PLACEHOLDER) for m in messages)
    if found != n_images:
        raise ImageDataError(f"{where}: {prompt_key!r} has {found} {PLACEHOLDER} placeholder(s) but {image_key!r} holds {n_images} image(s); "
                             f"put one {PLACEHOLDER} in the text where each image goes")
    out = []
    for m in messages:
        parts = [p for p in re.split(f"({re.escape(PLACEHOLDER)})", m["content"]) if p]
        out.append({"role": m["role"], "content": [{"type": "image"} if p == PLACEHOLDER else {"type": "text", "text": p} for p in parts]})
    return out


def load_processor(path: str, *, trust_remote_code: bool = False, key: str = "model.path"):
    """The model folder's processor (offline); None when the folder has no image processor."""
    from transformers import AutoProcessor

    if not any(os.path.isfile(os.path.join(path, f)) for f in ("preprocessor_config.json", "processor_config.json")):
        return None
    try:
        return AutoProcessor.from_pretrained(path, trust_remote_code=trust_remote_code, local_files_only=True)
    except ImportError as e:
        if "torchvision" not in str(e).lower():
            raise
        return _images_only_processor(path, trust_remote_code)
    except (OSError, ValueError) as e:
        raise ImageDataError(f"{key}={path}: its processor does not load ({type(e).__name__}: {str(e)[:200]})") from None


def _images_only_processor(path: str, trust_remote_code: bool):
    """The folder's processor class built from its image processor and tokenizer, without the video processor
    (which needs torchvision); the class's own ``__call__`` / chat template then handle images as usual."""
    import transformers
    from transformers import AutoImageProcessor, AutoTokenizer

    name = None
    for f in ("processor_config.json", "preprocessor_config.json", "tokenizer_config.json"):
        p = os.path.join(path, f)
        if os.path.isfile(p):
            with open(p, encoding="utf-8") as fh:
                name = name or json.load(fh).get("processor_class")
    cls = getattr(transformers, name, None) if name else None
    if cls is None:
        raise ImageDataError(f"{path}: its processor needs torchvision (pip install torchvision) and names no processor class rl-core can build without it")

    class ImagesOnly(cls):
        def check_argument_for_proper_class(self, argument_name, argument):
            return None if argument is None else super().check_argument_for_proper_class(argument_name, argument)

    ImagesOnly.__name__ = cls.__name__
    tok = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code, local_files_only=True)
    ip = AutoImageProcessor.from_pretrained(path, trust_remote_code=trust_remote_code, local_files_only=True)
    return ImagesOnly(image_processor=ip, tokenizer=tok, video_processor=None, chat_template=getattr(tok, "chat_template", None))


def check_patch_size(processor: Any, value: int | None) -> None:
    """``data.image_patch_size`` (verl's): the patch size images are resized for. rl-core resizes with the model
    processor's own settings, so the key is accepted where it equals that processor's ``patch_size``."""
    if value is None:
        return
    own = getattr(getattr(processor, "image_processor", None), "patch_size", None)
    if own != value:
        raise ImageDataError(f"data.image_patch_size={value}: rl-core resizes images only with the model processor's own settings "
                             f"(its patch_size is {own}); set data.image_patch_size={own} or leave it out")


def encode_row(processor: Any, row: dict[str, Any], where: str, prompt_key: str, image_key: str, template_kwargs: dict[str, Any] | None):
    """:func:`encode` of a canonical row with ``images`` (decoded here; placeholders checked)."""
    pics = [decode_image(v, f"{where}, {image_key!r}[{k}]") for k, v in enumerate(row["images"])]
    messages = image_messages(row["prompt"], len(pics), where, prompt_key, image_key)
    return encode(processor, messages, pics, where, template_kwargs)


def encode(processor: Any, messages: list[dict[str, Any]], images: list, where: str, template_kwargs: dict[str, Any] | None = None) -> tuple[str, list[int], dict[str, torch.Tensor]]:
    """``(prompt text, prompt ids with the image tokens expanded, per-prompt image tensors)`` for one row."""
    try:
        text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **(template_kwargs or {}))
    except Exception as e:  # noqa: BLE001 - jinja2 errors, or a processor without a chat template
        raise ImageDataError(f"{where}: the processor's chat template rejected the messages ({type(e).__name__}: {e}); "
                             "a vision-language model folder needs a chat template that places images") from None
    out = processor(text=[text], images=images, return_tensors="pt")
    mm = {k: v for k, v in out.items() if k not in TEXT_FIELDS and isinstance(v, torch.Tensor)}
    return text, out["input_ids"][0].tolist(), mm



class ImageEncoder:
    """What core's data sets call for rows with images (``PromptDataset(processor=...)``, ``build_loaders``): the
    model's processor behind :func:`encode_row` and :func:`check_patch_size`."""

    def __init__(self, processor: Any) -> None:
        self.processor = processor

    def encode_row(self, row: dict[str, Any], where: str, prompt_key: str, image_key: str, template_kwargs: dict[str, Any] | None):
        return encode_row(self.processor, row, where, prompt_key, image_key, template_kwargs)

    def encode_rows(self, rows: Sequence[dict[str, Any]], where: Sequence[str], apply_chat_template: bool, prompt_key: str, image_key: str,
                    template_kwargs: dict[str, Any] | None) -> dict[int, tuple[str, list[int], dict[str, torch.Tensor]]]:
        """``{row index: (text, ids, image tensors)}`` of the rows that hold images (``PromptDataset``'s start)."""
        with_images = [i for i, r in enumerate(rows) if r.get("images")]
        if with_images and not apply_chat_template:
            raise ImageDataError(f"{where[with_images[0]]}: rows with images need the processor's chat template to place them; "
                                 "set data.apply_chat_template=true")
        return {i: self.encode_row(rows[i], where[i], prompt_key, image_key, template_kwargs) for i in with_images}

    def item(self, item: dict[str, Any], prompt_key: str, image_key: str, template_kwargs: dict[str, Any] | None) -> dict[str, Any]:
        """A data set's item with images as the batch takes it: ``multi_modal_inputs`` encoded again now (a large image
        data set is not held decoded), the undecoded ``images`` dropped."""
        _, ids, mm = self.encode_row(item, item["origin"], prompt_key, image_key, template_kwargs)
        if ids != item["input_ids"]:  # the processor is deterministic; anything else would pair wrong pixels and tokens
            raise ImageDataError(f"{item['origin']}: the processor gave other prompt ids on a second encoding; the image processor is not deterministic")
        out = {k: v for k, v in item.items() if k != "images"}
        out["multi_modal_inputs"] = mm
        return out

    def check_patch_size(self, value: int | None) -> None:
        check_patch_size(self.processor, value)


def processor_for_model(model_cfg: Any) -> ImageEncoder | None:
    """The encoder of ``model.path``'s processor (``model.tokenizer_path`` where given) when the model has a vision
    tower, else None (a text-only model)."""
    cfg = load_hf_config(model_cfg.path, trust_remote_code=model_cfg.trust_remote_code)
    if getattr(cfg, "vision_config", None) is None:
        return None
    key = "model.tokenizer_path" if model_cfg.tokenizer_path else "model.path"
    processor = load_processor(model_cfg.tokenizer_path or model_cfg.path, trust_remote_code=model_cfg.trust_remote_code, key=key)
    return None if processor is None else ImageEncoder(processor)
