"""What makes a launch verl's (rl_verl.dialect.detect), the one-key rule of a native launch, `rlcore import-verl`,
and that hydra-core / omegaconf are rl-verl's dependencies, not rl-core's."""

from __future__ import annotations

from pathlib import Path

import pytest

from rl_core.config.dialect import Launch
from rl_core.config.load import config_to_dict, load_report
from rl_core.problems import errors
from rl_verl.dialect import detect

REPO = Path(__file__).resolve().parents[3]
QUICKSTART = str(REPO / "examples" / "quickstart.yaml")


def test_one_verl_key_in_a_native_config_changes_only_that_key():
    """`rlcore check examples/quickstart.yaml actor_rollout_ref.model.lora_rank=8` once switched every unset key to verl's
    defaults (rollout TP 2 on one device); now it is the native spelling's config exactly."""
    verl = load_report(QUICKSTART, ["actor_rollout_ref.model.lora_rank=8"])
    ours = load_report(QUICKSTART, ["model.lora_rank=8"])
    assert not errors(verl.problems) and not errors(ours.problems)
    assert verl.profile == "rl-core" and not verl.profile_defaults
    assert config_to_dict(verl.config, mask=False) == config_to_dict(ours.config, mask=False)
    plain = config_to_dict(load_report(QUICKSTART).config, mask=False)
    changed = {k for k in plain["model"] if plain["model"][k] != config_to_dict(verl.config, mask=False)["model"][k]}
    assert changed == {"lora_rank"}
    assert {k: v for k, v in plain.items() if k != "model"} == {k: v for k, v in config_to_dict(verl.config, mask=False).items() if k != "model"}


@pytest.mark.parametrize("launch, verl", [
    (Launch(overrides=["actor_rollout_ref.model.lora_rank=8"]), False),
    (Launch(data={"actor_rollout_ref": {"rollout": {"n": 2}}}), False),
    (Launch(options={"config_name": "ppo_trainer"}), True),
    (Launch(options={"profile": "verl"}), True),
    (Launch(options={"profile": "rl-core"}), False),
    (Launch(overrides=["+actor_rollout_ref.actor.ppo_epochs=2"]), True),
    (Launch(overrides=["~trainer.total_epochs"]), True),
    (Launch(overrides=["actor@actor_rollout_ref.actor=megatron_actor"]), True),
    (Launch(overrides=["profile=verl"]), True),
    (Launch(data={"profile": "verl"}), True),
    (Launch(overrides=["model_engine=megatron"]), True),
])
def test_what_makes_a_launch_verls(launch, verl):
    assert detect(launch) is verl


def test_a_verl_launch_takes_verls_defaults():
    loaded = load_report(None, ["actor_rollout_ref.model.path=builtin:smollm2"], config_name="ppo_trainer")
    assert loaded.profile == "verl" and loaded.config.rollout.tensor_model_parallel_size == 2
    assert ("rollout.tensor_model_parallel_size", 2, 1) in loaded.profile_defaults
    native = load_report(None, ["actor_rollout_ref.model.path=builtin:smollm2"])
    assert native.profile == "rl-core" and native.config.rollout.tensor_model_parallel_size == 1 and not native.profile_defaults


SCRIPT = """#!/usr/bin/env bash
set -x
MODEL=${MODEL_PATH:-builtin:smollm2}
N=4
python3 -m verl.trainer.main_ppo \\
    algorithm.adv_estimator=grpo \\
    data.train_batch_size=8 \\
    actor_rollout_ref.model.path=$MODEL \\
    actor_rollout_ref.rollout.n=${N} \\
    actor_rollout_ref.actor.ppo_mini_batch_size=8 \\
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \\
    trainer.n_gpus_per_node=1 trainer.device=cpu trainer.logger='["console"]' \\
    trainer.critic_warmup=0 $@
"""


def test_import_verl_writes_the_native_config(tmp_path, capsys, monkeypatch):
    import yaml

    from rl_core.cli.main import main

    monkeypatch.delenv("MODEL_PATH", raising=False)
    script = tmp_path / "run.sh"
    script.write_text(SCRIPT)
    assert main(["import-verl", str(script)]) == 0
    out, err = capsys.readouterr()
    cfg = yaml.safe_load(out)
    assert cfg["model"]["path"] == "builtin:smollm2" and cfg["rollout"]["n"] == 4 and cfg["algorithm"]["adv_estimator"] == "grpo"
    assert cfg["trainer"]["loggers"] == ["console"] and cfg["trainer"]["total_epochs"] == 30  # verl's default (main_ppo composes ppo_trainer)
    assert "actor_rollout_ref.rollout.n -> rollout.n" in err and "trainer.total_epochs = 30" in err
    # the native config resolves alike in rl-core alone
    (tmp_path / "run.yaml").write_text(out)
    back = load_report(str(tmp_path / "run.yaml"))
    assert not errors(back.problems) and back.config.rollout.n == 4
    script.write_text(SCRIPT.replace("trainer.critic_warmup=0", "trainer.critic_warmup=5"))
    assert main(["import-verl", str(script)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "refused:" in err and "trainer.critic_warmup" in err


def test_hydra_and_omegaconf_are_rl_verls_dependencies_not_rl_cores():
    """`pip install rl-core` alone brings neither (the pyprojects; tests/packaging reads the built wheels' metadata)."""
    from packaging.requirements import Requirement

    from tests.packaging.wheel_check import project_table

    def deps(folder: Path) -> set[str]:
        return {Requirement(d).name for d in project_table(folder)["project"]["dependencies"]}

    assert not {"hydra-core", "omegaconf"} & deps(REPO)
    assert {"hydra-core", "omegaconf"} <= deps(REPO / "plugins" / "verl")
    # core imports neither (data.custom_cls, which hands a dataset class verl's DictConfig where omegaconf is installed, is rl-data's)
    found = [(p.relative_to(REPO / "core" / "rl_core").as_posix(), line.strip()) for p in (REPO / "core" / "rl_core").rglob("*.py")
             for line in p.read_text().splitlines() if any(w in line for w in ("import hydra", "from hydra", "import omegaconf", "from omegaconf"))]
    assert found == []
