"""The installed distribution: its cards in rl-core's registry, a light entry point, manager routing."""

from __future__ import annotations

import importlib.metadata as md
import subprocess
import sys

import pytest
from rl_core.batch import Batch
from rl_core.config.schema import RewardConfig
from rl_core.plugins import get_registry
from rl_core.rewards.manager import RewardManager

try:
    md.distribution("rl-reward-rule")
except md.PackageNotFoundError:
    pytest.skip("rl-reward-rule is not installed: pip install -e plugins/reward_rule", allow_module_level=True)

NAMES = {"gsm8k", "math", "format", "reasoning_gym"}


@pytest.fixture(scope="module")
def registry():
    return get_registry(reload=True)


def test_registry_lists_the_rewards_from_this_distribution(registry):
    cards = registry.cards["reward"]
    assert NAMES <= set(cards)
    for name in NAMES:
        assert cards[name].provider.distribution == "rl-reward-rule"
        assert cards[name].provider.entry_point == "reward_rule"
    assert {"openai/gsm8k", "gsm8k"} <= cards["gsm8k"].data_sources
    assert "lighteval/MATH" in cards["math"].data_sources
    assert not [e for e in registry.errors if e.distribution == "rl-reward-rule"]


def test_every_factory_resolves(registry):
    for name in NAMES:
        assert callable(registry.cards["reward"][name].load())


def test_entry_point_module_is_light():
    code = (
        "import sys, rl_reward_rule.plugin\n"
        "heavy = [m for m in ('math_verify', 'sympy', 'reasoning_gym', 'torch') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)


def test_manager_routes_each_sample_by_its_data_source(registry):
    pytest.importorskip("reasoning_gym")
    pytest.importorskip("rl_data", reason="the rows come from rl-data's generator: pip install -e plugins/data")
    from rl_data.convert import generate_reasoning_gym_rows

    rg_row = generate_reasoning_gym_rows("basic_arithmetic", 1, 0)[0]
    rg_truth = rg_row["reward_model"]["ground_truth"]
    batch = Batch(
        non_tensors={
            "response_text": ["#### 72", "#### 71", r"\boxed{\frac{1}{2}}", r"\boxed{2}", rg_truth, str(int(rg_truth) + 1)],
            "data_source": ["openai/gsm8k", "gsm8k", "lighteval/MATH", "math", rg_row["data_source"], rg_row["data_source"]],
            "ground_truth": ["72", "72", "0.5", "3", rg_truth, rg_truth],
            "extra_info": [None, None, None, None, rg_row["extra_info"], rg_row["extra_info"]],
        }
    )
    with RewardManager(RewardConfig(), registry) as manager:
        scores, metrics, extras = manager.score(batch)
    assert scores.tolist() == [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    assert metrics["reward/acc_mean"] == pytest.approx(0.5)
    assert extras[0]["pred"] == "72"


def test_format_reward_gets_token_lengths_from_the_batch(registry):
    import torch

    mask = torch.zeros(2, 100, dtype=torch.long)
    mask[0, :50] = 1
    mask[1, :90] = 1  # 10 tokens into a 20-token buffer
    text = "<think>t</think><answer>a</answer>"
    batch = Batch({"response_mask": mask}, {"response_text": [text, text], "data_source": ["x", "x"]})
    cfg = RewardConfig(name="format", kwargs={"max_resp_len": 100, "overlong_buffer_len": 20})
    scores, metrics, _ = RewardManager(cfg, registry).score(batch)
    assert scores.tolist() == pytest.approx([1.0, 0.5])
    assert metrics["reward/overlong_penalty_mean"] == pytest.approx(-0.25)
