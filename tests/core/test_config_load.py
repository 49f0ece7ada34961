"""Config loading: YAML + overrides, types, unknown keys, verl key names."""

from __future__ import annotations

import pytest
from rl_core.config.load import load_config
from rl_core.problems import ConfigError


def _problems(*overrides, path=None):
    with pytest.raises(ConfigError) as exc:
        load_config(path, overrides)
    return exc.value.problems


def test_yaml_then_overrides(tmp_path):
    f = tmp_path / "run.yaml"
    f.write_text("data:\n  train_batch_size: 16\nrollout:\n  n: 4\nactor:\n  optim:\n    lr: 1.0e-5\n")
    cfg = load_config(f, ["rollout.n=8", "actor.optim.lr=3e-6", "data.train_files=a.parquet"])
    assert cfg.data.train_batch_size == 16
    assert cfg.rollout.n == 8
    assert cfg.actor.optim.lr == pytest.approx(3e-6)  # "3e-6" is a string to YAML; coerced
    assert cfg.data.train_files == ["a.parquet"]  # one file becomes a list


def test_unknown_key_suggests_the_right_one():
    (p,) = _problems("rollout.temprature=0.7")
    assert p.key == "rollout.temprature" and "did you mean 'temperature'" in p.what


def test_unknown_section_suggests_the_right_one():
    (p,) = _problems("trainr.seed=1")
    assert p.key == "trainr" and "did you mean 'trainer'" in p.what


def test_wrong_type_names_key_and_expected_type():
    (p,) = _problems("data.train_batch_size=lots")
    assert p.key == "data.train_batch_size" and "expected int" in p.what and "'lots'" in p.what


def test_value_outside_allowed_set():
    (p,) = _problems("model.dtype=fp8")
    assert p.key == "model.dtype" and "float32, bfloat16, float16" in p.fix


def test_all_problems_reported_together():
    problems = _problems("rollout.nn=2", "actor.ppo_epochs=x", "bad")
    assert {p.key for p in problems} == {"rollout.nn", "actor.ppo_epochs", "bad"}


def test_missing_and_invalid_files(tmp_path):
    (p,) = _problems(path=tmp_path / "nope.yaml")
    assert "does not exist" in p.what
    bad = tmp_path / "bad.yaml"
    bad.write_text("data: [1,\n")
    (p,) = _problems(path=bad)
    assert "not valid YAML" in p.what and "line" in p.what
