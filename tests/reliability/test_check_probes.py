"""Mistakes that passed `rlcore check` and then failed `rlcore train` with a traceback, or silently: check finds them.

Model folders (config that does not parse, remote code, truncated weights, a broken tokenizer), an estimator
plugin that returns nothing or the wrong shape, a data set smaller than one batch, greedy decoding with GRPO and
n > 1, NaN in a free-form option dict, and ``~`` in trainer.output_dir (expanded as the run writes it).
"""

from __future__ import annotations

import json
import os
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
        compute_advantage("bad", registry=registry, token_level_rewards=torch.zeros(8, 5), response_mask=torch.ones(8, 5),
                          index=torch.arange(8) // 4)
    ok = len(problems) == 1 and expected in problems[0].what and "rl-bad-estimator" in problems[0].what and expected in str(info.value)
    tally.record("check_probes", case, ok)
    assert ok, [p.render() for p in problems] + [str(info.value)]
    registry.add(EstimatorCard(name="good", factory="tests.reliability.probe_estimators:fine"), Provider(distribution="x", version="0", entry_point="x"))
    assert estimator_problems(load_config(None, ["algorithm.adv_estimator=good"]), registry) == []
