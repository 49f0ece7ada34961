"""`rlcore check` on bad configs: one clear problem each, naming the key and a fix, exit 1, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from rl_core.cli.main import main

TINY_DATA = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "tiny_gsm8k.jsonl"
GOOD = ["model.path=Qwen/Qwen2.5-0.5B", f"data.train_files={TINY_DATA}", "trainer.device=cpu", "data.train_batch_size=8", "rollout.n=4",
        "actor.ppo_mini_batch_size=4", "actor.ppo_micro_batch_size_per_gpu=4"]

BAD = {
    # name: (overrides, key the problem must name, words the message or fix must contain)
    "typo'd key": (["rollout.temprature=0.7"], "rollout.temprature", "did you mean 'temperature'"),
    "wrong type": (["actor.ppo_epochs=two"], "actor.ppo_epochs", "expected int"),
    "rollout tp does not divide gpus": (["trainer.n_gpus_per_node=4", "rollout.tensor_model_parallel_size=3"], "rollout.tensor_model_parallel_size", "4 % 3 = 1"),
    "batch x n not divisible by dp": (["trainer.n_gpus_per_node=3", "data.train_batch_size=4", "rollout.n=2", "actor.ppo_mini_batch_size=4"], "data.train_batch_size", "8 % 3 = 2"),
    "mini-batch larger than batch": (["actor.ppo_mini_batch_size=16"], "actor.ppo_mini_batch_size", "larger than"),
    "micro-batch does not divide per-rank mini": (["actor.ppo_micro_batch_size_per_gpu=3"], "actor.ppo_micro_batch_size_per_gpu", "16 % 3 = 1"),
    "gae without a critic": (["algorithm.adv_estimator=gae", "critic.enable=false"], "critic.enable", "needs a critic"),
    "grpo with n = 1": (["rollout.n=1"], "rollout.n", "needs rollout.n > 1"),
    # a backend whose provider is known but not installed (every real one is in the dev install: a made-up entry)
    "backend not installed": (["rollout.name=trtllm"], "rollout.name", "pip install rl-rollout-trtllm"),
    "zero size": (["data.train_batch_size=0"], "data.train_batch_size", "positive"),
    "negative size": (["rollout.n=-2"], "rollout.n", "positive"),
    "value outside allowed set": (["trainer.device=tpu"], "trainer.device", "auto, cpu, cuda"),
    "rollout correction without the rollout's log-probs": (["algorithm.rollout_correction.rollout_is=token", "rollout.calculate_log_probs=false"], "rollout.calculate_log_probs",
                                                           "set rollout.calculate_log_probs=true"),
}


def test_the_good_config_resolves(capsys):
    assert main(["check", *GOOD]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "sequences per train rank" in out and "train_batch_size: 8" in out


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_config_gives_one_clear_problem(case, capsys, monkeypatch):
    from rl_core import plugins

    monkeypatch.setitem(plugins.KNOWN_DISTRIBUTIONS["rollout"], "trtllm", "rl-rollout-trtllm")
    overrides, key, words = BAD[case]
    code = main(["check", *GOOD, *overrides])
    err = capsys.readouterr().err
    assert code == 1
    assert "Traceback" not in err
    problem_lines = [line for line in err.splitlines() if line.startswith(("error: ", "  ")) and ": " in line and not line.startswith(("    why", "    fix", "      fix", "      why"))]
    named = [line for line in problem_lines if key in line.split(":")[1 if line.startswith("error") else 0]]
    assert named, err
    assert words in err, err
    assert "fix:" in err
    # one problem, not a cascade (warnings, e.g. worker processes vs CPU cores, may come with it)
    assert err.count("error: ") == 1, err


def _no_gpu():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the 'no GPU here' checks cannot be seen")


def test_gpu_config_checked_for_another_machine(capsys):
    """A cuda config fails here, and passes with --skip-device-check (every other check still runs)."""
    _no_gpu()
    gpu = [*GOOD, "trainer.device=cuda", "trainer.n_gpus_per_node=8", "data.train_batch_size=8", "actor.ppo_mini_batch_size=8",
           "actor.ppo_micro_batch_size_per_gpu=2"]
    assert main(["check", "--quiet", *gpu]) == 1
    err = capsys.readouterr().err
    assert "trainer.device" in err and "--skip-device-check" in err
    assert main(["check", "--quiet", "--skip-device-check", *gpu]) == 0, capsys.readouterr().err
    capsys.readouterr()
    # still checked: the sizes (8 GPUs x micro 2 against 8 x 4 / 8 = 4 sequences per rank: micro 3 does not divide)
    assert main(["check", "--quiet", "--skip-device-check", *gpu, "actor.ppo_micro_batch_size_per_gpu=3"]) == 1
    assert "actor.ppo_micro_batch_size_per_gpu" in capsys.readouterr().err


@pytest.mark.parametrize(
    "where, remote",
    [
        (["trainer.placement=ray", "ray.address=auto"], True),  # workers on the cluster's nodes
        (["trainer.placement=ray", "ray.address=10.0.0.1:6379"], True),
        (["trainer.nnodes=2"], True),
        (["trainer.placement=ray"], False),  # a local Ray instance: this machine's GPUs are the workers'
        (["trainer.placement=local"], False),
    ],
)
def test_cluster_runs_are_not_checked_against_this_machines_gpus(where, remote, monkeypatch):
    """The controller may run on a CPU-only head node: a cluster's GPUs are not this machine's."""
    from rl_core.config.load import load_config
    from rl_core.plan.preflight import device_problems, runs_elsewhere

    _no_gpu()
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    config = load_config(None, [*GOOD, "trainer.device=cuda", *where])
    assert runs_elsewhere(config) is remote
    keys = [p.key for p in device_problems(config)]
    assert keys == ([] if remote else ["trainer.device"])
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")  # what `ray job submit` sets
    assert runs_elsewhere(config) is (remote or "trainer.placement=ray" in where)


def test_pools_count_against_this_machines_gpus(monkeypatch):
    """4 actor GPUs + a critic on 2 of its own need 6 GPUs here; a machine with 4 is told so, naming the pool."""
    import torch
    from rl_core.config.load import load_config
    from rl_core.plan.preflight import device_problems

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    config = load_config(None, [*GOOD, "trainer.device=cuda", "trainer.n_gpus_per_node=4"])
    assert device_problems(config) == []
    problems = device_problems(load_config(None, [*GOOD, "trainer.device=cuda", "trainer.n_gpus_per_node=4", "critic.n_gpus_per_node=2"]))
    assert [p.key for p in problems] == ["critic.n_gpus_per_node"]
    assert "trainer.n_gpus_per_node=4 + critic.n_gpus_per_node=2 = 6 GPUs but this machine has 4" in problems[0].render()
