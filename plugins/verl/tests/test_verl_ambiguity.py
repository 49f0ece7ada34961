"""Two spellings of one setting, and Hydra interpolations (issue 47): never silent, never literal."""

from __future__ import annotations

import pytest
import yaml
from rl_core.config.load import load_config, load_report
from rl_core.plan.probes import interpolation_problems
from rl_core.problems import errors


def _errors(*overrides, path=None):
    return errors(load_report(path, list(overrides)).problems)


def test_a_native_key_and_its_verl_alias_with_different_values_is_refused():
    found = _errors("actor.optim.lr=1e-5", "actor_rollout_ref.actor.optim.lr=3e-6")
    assert len(found) == 1 and found[0].key == "actor_rollout_ref.actor.optim.lr"
    assert "actor.optim.lr=1e-05" in found[0].what and "ambiguous" in found[0].what and "keep one" in found[0].fix


def test_the_same_value_under_both_spellings_is_fine():
    assert not _errors("actor.optim.lr=1e-5", "actor_rollout_ref.actor.optim.lr=0.00001")
    assert load_config(None, ["actor.optim.lr=1e-5", "actor_rollout_ref.actor.optim.lr=0.00001"]).actor.optim.lr == 1e-5


def test_both_spellings_in_one_file_are_refused(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump({"rollout": {"n": 4}, "actor_rollout_ref": {"rollout": {"n": 8}}}))
    found = _errors(path=f)
    assert any("rollout.n" in p.what and "ambiguous" in p.what for p in found), found


def test_an_override_may_change_what_the_file_says_under_another_spelling(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump({"actor_rollout_ref": {"rollout": {"n": 8}}}))
    assert load_config(f, ["rollout.n=4"]).rollout.n == 4


def test_interpolations_resolve_as_verl_resolves_them():
    cfg = load_config(None, ["actor_rollout_ref.model.lora_rank=8", "trainer.experiment_name=exp1",
                             "trainer.output_dir=/tmp/runs/${trainer.experiment_name}/r${actor_rollout_ref.model.lora_rank}"])
    assert cfg.trainer.output_dir == "/tmp/runs/exp1/r8"


def test_an_interpolation_that_does_not_resolve_is_refused():
    found = _errors("actor_rollout_ref.model.lora_rank=8", "trainer.output_dir=/tmp/${nope.key}")
    assert any(p.key == "trainer.output_dir" and "does not resolve" in p.what for p in found), found


@pytest.mark.parametrize("value", ["outputs/${trainer.experiment_name}", "${oc.env:HOME}"])
def test_a_literal_interpolation_in_a_native_config_is_refused_by_check(value):
    """Without a verl key nothing resolves ${...}: the plan's values check refuses it instead of making such a folder."""
    cfg = load_config(None, [f"trainer.output_dir={value}"])
    found = interpolation_problems(cfg)
    assert [p.key for p in found] == ["trainer.output_dir"] and "taken literally" not in found[0].fix and "literally" in found[0].what
