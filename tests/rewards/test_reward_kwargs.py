"""reward.kwargs checked against the scorer's parameters in `rlcore check`: an unknown key names the key, the function
and the closest parameter (unless the function takes a real ``**kwargs``), a value of the wrong simple type likewise."""

from __future__ import annotations

import attrs
import pytest
from rl_core.config.schema import CustomRewardConfig, RewardConfig, RunConfig
from rl_core.plan.preflight import SCORER_ARGS, reward_problems
from rl_core.plugins import get_registry
from rl_core.rewards.scoring import kwargs_problems


def ignores_extras(data_source, solution_str, ground_truth, extra_info=None, method: str = "strict", scale: float | None = None, **_):
    return 1.0


def forwards_extras(data_source, solution_str, ground_truth, extra_info=None, fallback: str | None = None, **kwargs):
    return 1.0


def untyped(data_source, solution_str, ground_truth, extra_info=None, option=None, items: list = (), **_):
    return 1.0


def check(fn, **kwargs):
    return {p.key: p for p in kwargs_problems(fn, kwargs, f"{fn.__name__}()", SCORER_ARGS)}


def test_unknown_keys_name_the_closest_parameter_unless_the_function_forwards_them():
    (p,) = check(ignores_extras, methdo="flexible").values()
    assert p.key == "reward.kwargs.methdo" and "ignores_extras()" in p.what and "reward.kwargs.method" in p.fix
    assert "remove it" in check(ignores_extras, zzz=1)["reward.kwargs.zzz"].fix
    assert check(forwards_extras, anything=1) == {}  # **kwargs: the function hands them on
    assert "(its parameters: method, scale)" in p.what  # the scorer's own arguments are not ones a user sets


@pytest.mark.parametrize(("kwargs", "bad"), [
    ({"method": {"not": "a string"}}, "method"), ({"method": 3}, "method"), ({"scale": "lots"}, "scale"), ({"scale": True}, "scale"),
    ({"method": "flexible", "scale": 2}, None), ({"scale": None}, None), ({"scale": 0.5}, None),
])
def test_values_of_the_wrong_simple_type(kwargs, bad):
    got = check(ignores_extras, **kwargs)
    assert list(got) == ([f"reward.kwargs.{bad}"] if bad else []), got
    if bad:
        assert f"takes {bad}: " in got[f"reward.kwargs.{bad}"].what
    assert check(untyped, option={"a": 1}, items="x") == {}  # no annotation / not a simple type: not checked


def test_rlcore_check_names_a_misspelt_key_of_a_named_and_a_custom_reward(tmp_path):
    config = RunConfig(reward=RewardConfig(name="gsm8k", kwargs={"methdo": "flexible"}))
    (p,) = reward_problems(config, get_registry(), [])
    assert p.key == "reward.kwargs.methdo" and "'gsm8k'" in p.what and "reward.kwargs.method" in p.fix
    assert reward_problems(attrs.evolve(config, reward=RewardConfig(name="gsm8k", kwargs={"method": "flexible"})), get_registry(), []) == []
    path = tmp_path / "reward.py"
    path.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None, call_bonus: float = 0.1, **_):\n    return 0.0\n")
    custom = RunConfig(reward=RewardConfig(custom=CustomRewardConfig(path=str(path), name="compute_score"), kwargs={"call_bonus": "lots"}))
    (p,) = reward_problems(custom, get_registry(), [])
    assert p.key == "reward.kwargs.call_bonus" and "compute_score() in" in p.what and "float" in p.what
