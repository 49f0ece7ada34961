"""Mistakes that passed `rlcore check` and then failed `rlcore train` with a traceback, or silently: check finds them.

Model folders (config that does not parse, remote code, truncated weights, a broken tokenizer), an estimator
plugin that returns nothing or the wrong shape, a data set smaller than one batch, greedy decoding with GRPO and
n > 1, NaN in a free-form option dict, and ``~`` in trainer.output_dir (expanded as the run writes it).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from rl_core.algorithms.advantages import EstimatorOutputError, compute_advantage
from rl_core.cards import EstimatorCard, Provider
from rl_core.plan.probes import estimator_problems
from rl_core.config.load import load_config
from rl_core.plugins import Registry

from tests.reliability import tally
from tests.reliability.runs import cli, make_run

pytest.importorskip("rl_train_fsdp", reason="needs the rl-train-fsdp plugin (pip install -e plugins/train_fsdp)")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("probes")
    return make_run(root), root


def _check(cfg: Path, *overrides: str) -> tuple[int, str]:
    code, out, err = cli("check", str(cfg), *overrides)
    return code, out + err


def _model_copy(root: Path, tmp_path: Path) -> Path:
    import shutil

    dst = tmp_path / "model"
    shutil.copytree(root / "model", dst)
    return dst


def _broken_config(m: Path) -> None:
    (m / "config.json").write_text((m / "config.json").read_text()[:-20])


def _remote_code(m: Path) -> None:
    data = json.loads((m / "config.json").read_text())
    data["auto_map"] = {"AutoModelForCausalLM": "modeling_evil.EvilForCausalLM"}
    (m / "config.json").write_text(json.dumps(data))


def _truncated_weights(m: Path) -> None:
    w = m / "model.safetensors"
    w.write_bytes(w.read_bytes()[: w.stat().st_size // 2])


def _broken_tokenizer(m: Path) -> None:
    (m / "tokenizer.json").write_text("{not json")


MODEL_CASES = {
    "config.json that does not parse": (_broken_config, "does not parse"),
    "remote code (auto_map) without trust_remote_code": (_remote_code, "asks to run Python code"),
    "truncated weights": (_truncated_weights, "truncated"),
    "broken tokenizer": (_broken_tokenizer, "tokenizer"),
}


@pytest.mark.parametrize("case", list(MODEL_CASES))
def test_broken_model_folders(run, tmp_path, case):
    cfg, root = run
    damage, expected = MODEL_CASES[case]
    model = _model_copy(root, tmp_path)
    damage(model)
    code, text = _check(cfg, f"model.path={model}")
    ok = code == 1 and "Traceback" not in text and expected in text and "model.path" in text
    tally.record("check_probes", f"model folder: {case}", ok)
    assert ok, text[-3000:]


def test_a_sound_run_passes(run):
    cfg, _ = run
    code, text = _check(cfg)
    assert code == 0, text[-3000:]


@pytest.mark.parametrize(
    "case,overrides,expected",
    [
        ("batch larger than the data set", ["data.train_batch_size=64", "actor.ppo_mini_batch_size=64"], "not one batch"),
        ("greedy decoding with GRPO and n > 1", ["rollout.do_sample=false", "rollout.temperature=0"], "identical"),
        ("NaN inside algorithm.options", ["algorithm.options={epsilon: .nan}"], "algorithm.options.epsilon: is NaN or infinite"),
        ("inf inside reward.kwargs", ["reward.kwargs={scale: .inf}"], "reward.kwargs.scale: is NaN or infinite"),
        ("a response longer than the model's positions", ["data.max_response_length=100000"], "1024 positions (max_position_embeddings)"),
        ("an output folder that cannot be created", ["trainer.output_dir=/proc/rlcore-nope/out"], "cannot be created"),
    ],
)
def test_silent_mistakes_are_reported(run, case, overrides, expected):
    cfg, _ = run
    code, text = _check(cfg, *overrides)
    ok = code == 1 and expected in text and "Traceback" not in text
    tally.record("check_probes", case, ok)
    assert ok, text[-3000:]


def test_tilde_in_output_dir_is_expanded_as_the_run_writes_it(run, tmp_path, monkeypatch):
    cfg, _ = run
    monkeypatch.setenv("HOME", str(tmp_path))
    config = load_config(cfg, ["trainer.output_dir=~/runs/x"])
    ok = config.trainer.output_dir == str(tmp_path / "runs" / "x")
    code, text = _check(cfg, "trainer.output_dir=~/runs/x")
    ok = ok and code == 0 and not Path("~").exists()
    tally.record("check_probes", "output_dir=~/x expanded", ok)
    assert ok, text[-2000:]


ESTIMATORS = {
    "estimator plugin that returns nothing": ("returns_nothing", "returned nothing"),
    "estimator plugin that returns one tensor": ("returns_one_tensor", "returned Tensor"),
    "estimator plugin that returns per-sequence values": ("returns_per_sequence", "of shape [8]"),
}


@pytest.mark.parametrize("case", list(ESTIMATORS))
def test_an_estimator_with_a_broken_contract_is_named(case):
    fn, expected = ESTIMATORS[case]
    registry = Registry()
    registry.add(EstimatorCard(name="bad", factory=f"tests.reliability.probe_estimators:{fn}", needs_groups=True),
                 Provider(distribution="rl-bad-estimator", version="0.1", entry_point="bad"))
    config = load_config(None, ["algorithm.adv_estimator=bad", "rollout.n=4"])
    problems = estimator_problems(config, registry)
    # and in a run: the same contract, checked where the loop calls it
    with pytest.raises(EstimatorOutputError) as info:
        compute_advantage("bad", card=registry.get("estimator", "bad"), token_level_rewards=torch.zeros(8, 5), response_mask=torch.ones(8, 5),
                          index=torch.arange(8) // 4)
    ok = len(problems) == 1 and expected in problems[0].what and "rl-bad-estimator" in problems[0].what and expected in str(info.value)
    tally.record("check_probes", case, ok)
    assert ok, [p.render() for p in problems] + [str(info.value)]
    registry.add(EstimatorCard(name="good", factory="tests.reliability.probe_estimators:fine"), Provider(distribution="x", version="0", entry_point="x"))
    assert estimator_problems(load_config(None, ["algorithm.adv_estimator=good"]), registry) == []


# ------------------------------------------------- what train refuses at load, check refuses first (issue 47)
def _pickled_weights(model: Path, marker: Path) -> None:
    """The model's weights as a pickled pytorch_model.bin that also carries a payload (no safetensors beside it)."""
    from safetensors.torch import load_file

    from tests.reliability.evil import WritesMarker

    state = load_file(str(model / "model.safetensors"))
    (model / "model.safetensors").unlink()
    torch.save({**state, "extra": WritesMarker(str(marker))}, model / "pytorch_model.bin")


def test_pickled_model_weights_with_a_payload_are_refused_by_check(run, tmp_path):
    cfg, root = run
    model, marker = _model_copy(root, tmp_path), tmp_path / "ran"
    _pickled_weights(model, marker)
    code, text = _check(cfg, f"model.path={model}")
    ok = code == 1 and "pytorch_model.bin" in text and "not a file of plain tensors" in text and "Traceback" not in text and not marker.exists()
    tally.record("check_probes", "pickled model weights (.bin) with a payload", ok)
    assert ok, text[-3000:]


def test_plain_pickled_model_weights_pass(run, tmp_path):
    """An old-style pytorch_model.bin of plain tensors is what transformers reads: not refused."""
    from safetensors.torch import load_file

    cfg, root = run
    model = _model_copy(root, tmp_path)
    torch.save(load_file(str(model / "model.safetensors")), model / "pytorch_model.bin")
    (model / "model.safetensors").unlink()
    code, text = _check(cfg, f"model.path={model}")
    assert "pytorch_model.bin" not in text, text[-3000:]


def _adapter(root: Path, tmp_path: Path, rank: int, targets: list[str], pickled_payload: Path | None = None) -> Path:
    folder = tmp_path / "adapter"
    folder.mkdir()
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": rank, "lora_alpha": rank, "target_modules": targets}))
    weights = {"base_model.model.x.lora_A.weight": torch.zeros(rank, 4)}
    if pickled_payload is not None:
        from tests.reliability.evil import WritesMarker

        torch.save({**weights, "extra": WritesMarker(str(pickled_payload))}, folder / "adapter_model.bin")
    else:
        from safetensors.torch import save_file

        save_file(weights, str(folder / "adapter_model.safetensors"))
    return folder


LORA_CASES = {
    "LoRA rank larger than every layer": (lambda root, tmp: [], ["model.lora_rank=100000"], "larger than every targeted layer"),
    "pickled adapter weights with a payload": (
        lambda root, tmp: [f"model.lora_adapter_path={_adapter(root, tmp, 8, ['q_proj'], tmp / 'ran')}"], ["model.lora_rank=8"],
        "not a file of plain tensors"),
    "an adapter trained on another architecture": (
        lambda root, tmp: [f"model.lora_adapter_path={_adapter(root, tmp, 8, ['c_attn', 'c_fc'])}"], ["model.lora_rank=8"],
        "trained on another model"),
}


@pytest.mark.parametrize("case", list(LORA_CASES))
def test_lora_settings_train_would_refuse(run, tmp_path, case):
    cfg, root = run
    make, overrides, expected = LORA_CASES[case]
    code, text = _check(cfg, *make(root, tmp_path), *overrides)
    ok = code == 1 and expected in text and "Traceback" not in text and not (tmp_path / "ran").exists()
    tally.record("check_probes", case, ok)
    assert ok, text[-3000:]
