"""agent_reward hands its other reward.kwargs to the fallback function: `rlcore check` checks them against it."""

from __future__ import annotations

from rl_core.config.schema import RewardConfig, RunConfig

from rl_agent_openai.checks import fallback_problems


def test_the_fallback_s_parameters_name_the_misspelt_key(tmp_path):
    path = tmp_path / "reward.py"
    path.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None, call_bonus: float = 0.1, **_):\n    return 0.0\n")
    config = lambda **kw: RunConfig(reward=RewardConfig(name="agent_reward", kwargs={"fallback": f"{path}:compute_score", **kw}))  # noqa: E731
    (p,) = fallback_problems(config(call_bonsu=0.1), None)
    assert p.key == "reward.kwargs.call_bonsu" and "reward.kwargs.call_bonus" in p.fix and str(path) in p.what
    (p,) = fallback_problems(config(call_bonus="lots"), None)
    assert p.key == "reward.kwargs.call_bonus" and "float" in p.what
    assert fallback_problems(config(call_bonus=0.2), None) == []
    assert fallback_problems(RunConfig(reward=RewardConfig(name="gsm8k", kwargs={"call_bonsu": 1})), None) == []  # not agent_reward's
