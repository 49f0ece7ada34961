"""`rlcore check` reports every problem in one run, in the order a user fixes them (issue 31)."""

from __future__ import annotations

from pathlib import Path

import pytest
import types

from rl_core import hookimpl
from rl_core.cards import CheckCard, Provider
from rl_core.config.load import load_report
from rl_core.plan.checks import STAGES, build_plan
from rl_core.plugins import get_registry
from rl_core.cli.main import main
from rl_core.problems import Problem

TINY_DATA = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "tiny_gsm8k.jsonl"

# six independent mistakes, one of each kind, in the order `rlcore check` must list them
SIX = {
    "rollout.temprature": ("keys", "did you mean 'temperature'"),  # misspelt key
    "actor.ppo_epochs": ("values", "expected int"),  # wrong type
    "trainer.test_freq": ("values", "-5"),  # outside its rule
    "actor.ppo_mini_batch_size": ("rules", "larger than"),  # two keys that do not fit together
    "algorithm.adv_estimator": ("names", "did you mean 'grpo'"),  # misspelt plugin name
    "data.val_files": ("files", "does not exist"),  # a missing data file
}


def collect(path, overrides, registry=None):
    return build_plan(load_report(path, overrides), registry or get_registry())


def six_mistakes(tmp_path: Path) -> Path:
    cfg = tmp_path / "six.yaml"
    cfg.write_text(f"""
model: {{path: Qwen/Qwen2.5-0.5B}}
data:
  train_files: [{TINY_DATA}]
  val_files: [{tmp_path / 'absent.parquet'}]
  train_batch_size: 8
rollout: {{name: hf, n: 4, temprature: 0.7}}
actor: {{ppo_mini_batch_size: 16, ppo_micro_batch_size_per_gpu: 4, ppo_epochs: two}}
algorithm: {{adv_estimator: grpoo}}
trainer: {{device: cpu, test_freq: -5}}
""")
    return cfg


def test_six_independent_mistakes_in_one_run_in_fixing_order(tmp_path, capsys):
    assert main(["check", str(six_mistakes(tmp_path))]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    firsts = [line[len("error: "):].split(":")[0] for line in err.splitlines() if line.startswith("error: ")]
    assert firsts == list(SIX), err  # all six, nothing else, in stage order
    for key, (_, words) in SIX.items():
        assert words in err, (key, err)
    assert "6 problems" in err


def test_every_name_valued_key_gets_did_you_mean(capsys):
    overrides = ["model.path=Qwen/Qwen2.5-0.5B", f"data.train_files={TINY_DATA}", "trainer.device=cpu", "data.train_batch_size=8",
                 "rollout.n=4", "actor.ppo_mini_batch_size=4", "actor.ppo_micro_batch_size_per_gpu=4",
                 "algorithm.adv_estimator=reinforce_plus_plusx", "actor.policy_loss=vanila", "reward.name=gsm8kk", "rollout.name=hff", "train.name=fsdpp"]
    report = collect(None, overrides)
    hints = {p.key: p.what for p in report.problems if p.severity == "error"}
    expected = {"algorithm.adv_estimator": "reinforce_plus_plus", "actor.policy_loss": "vanilla", "reward.name": "gsm8k", "rollout.name": "hf", "train.name": "fsdp"}
    for key, name in expected.items():
        assert f"did you mean {name!r}" in hints.get(key, ""), (key, hints)


def _saw_it(config, registry):
    return [Problem(key="trainer.device", what="check saw it", severity="warning")]


def _broken(config, registry):
    raise RuntimeError("boom")


def test_a_check_plugs_in_and_a_broken_one_is_named():
    """A plugin's check cards run in the pipeline; one that raises, and one whose path does not load, are named."""
    plugin = types.ModuleType("a_checks_plugin")

    @hookimpl
    def rl_core_register_checks(register):
        register(CheckCard(name="saw_it", stage="device", factory=f"{__name__}:_saw_it"))
        register(CheckCard(name="broken", stage="names", factory=f"{__name__}:_broken"))
        register(CheckCard(name="missing", stage="files", factory=f"{__name__}:_no_such_function"))

    plugin.rl_core_register_checks = rl_core_register_checks
    with pytest.raises(ValueError, match="stage"):
        CheckCard(name="later", stage="later", factory=f"{__name__}:_broken")
    registry = get_registry(extra=[(plugin, Provider(distribution="a-checks-plugin"))])
    try:
        report = collect(None, ["model.path=Qwen/Qwen2.5-0.5B", f"data.train_files={TINY_DATA}", "trainer.device=cpu", "data.train_batch_size=8",
                                "rollout.n=4", "actor.ppo_mini_batch_size=4", "actor.ppo_micro_batch_size_per_gpu=4"], registry)
    finally:
        get_registry(reload=True)
    whats = [p.what for p in report.problems]
    assert any("check saw it" in w for w in whats)
    assert any("broken (a-checks-plugin) raised RuntimeError: boom" in w for w in whats), whats
    assert any("'missing' from a-checks-plugin has a factory" in w and "does not load" in w for w in whats), whats
    assert STAGES.index("names") < STAGES.index("device")


def test_a_model_folder_that_is_not_here_is_named(tmp_path, monkeypatch, capsys):
    """model.path that looks like a hub name but is not a folder: check names model.path (train refuses it)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()  # the user made models/ but misspelt the model's folder
    base = [f"data.train_files={TINY_DATA}", "trainer.device=cpu", "data.train_batch_size=8", "rollout.n=4",
            "actor.ppo_mini_batch_size=4", "actor.ppo_micro_batch_size_per_gpu=4"]
    assert main(["check", "--quiet", "model.path=models/smollm2x", *base]) == 1
    err = capsys.readouterr().err
    assert "error: model.path: no folder 'models/smollm2x' here" in err
    # a hub name is a warning in check (the config may be meant for a machine that has that folder) ...
    assert main(["check", "--quiet", "model.path=HuggingFaceTB/SmolLM2-135M-Instruct", *base]) == 0
    assert "warning: model.path" in capsys.readouterr().err
    # ... and an error in train, before anything is built, naming model.path (not model.tokenizer_path)
    assert main(["train", "--dry-run", "model.path=HuggingFaceTB/SmolLM2-135M-Instruct", *base]) == 1
    err = capsys.readouterr().err
    assert "error: model.path" in err and "tokenizer_path" not in err and "huggingface-cli download" in err
