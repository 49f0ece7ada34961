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


def test_without_a_fallback_the_other_kwargs_are_errors_naming_the_key():
    config = lambda **kw: RunConfig(reward=RewardConfig(name="agent_reward", kwargs=kw))  # noqa: E731
    (p,) = fallback_problems(config(fallbcak="reward.py:compute_score", call_bonus=0.1), None)  # the mutation test's typo of examples/openai_agent.yaml
    assert p.key == "reward.kwargs.fallbcak" and p.severity == "error" and "did you mean reward.kwargs.fallback?" in p.fix
    (p,) = fallback_problems(config(call_bonus=0.1), None)
    assert p.key == "reward.kwargs.call_bonus" and "goes nowhere" in p.what and "set reward.kwargs.fallback=" in p.fix
    assert fallback_problems(config(), None) == []  # the program's returned reward alone: nothing to check
    assert fallback_problems(config(fallback=["not", "a string"]), None) == []  # core reports fallback's type (str | None)


def test_a_fallback_that_does_not_load_is_an_error_naming_it(tmp_path):
    config = RunConfig(reward=RewardConfig(name="agent_reward", kwargs={"fallback": f"{tmp_path}/missing.py:compute_score"}))
    (p,) = fallback_problems(config, None)
    assert p.key == "reward.kwargs.fallback" and "missing.py" in p.what and "path/to/reward.py:compute_score" in p.fix


def test_rlcore_check_does_not_try_agent_reward_on_a_data_row(tmp_path, capsys):
    """A data row carries no agent result, so a trial call of agent_reward (no fallback: it raises there) would refuse
    every run that scores by the program's returned reward; its card has ``trial=False``."""
    from rl_core.cli.main import main
    from rl_core_testing.tiny_run import write_tiny_run

    run = write_tiny_run(tmp_path, **{"reward.name": "agent_reward", "reward.custom.path": None})
    code = main(["check", str(run), "--skip-device-check"])
    err = capsys.readouterr().err
    assert code == 0 and "trial call" not in err, err
