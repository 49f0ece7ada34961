"""verl's own verdicts on its example scripts (bench/verl_scripts/verl_verdicts.json, written by verl_verdicts.py in a
venv with verl's dependencies) stay in step with the scripts rl-core measures, and what rl-core says where both refuse.
Nothing here needs verl installed."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from rl_core.problems import Problem

REPO = Path(__file__).resolve().parents[4]
SCRIPTS = json.loads((REPO / "plugins/verl/tests/verl_scripts/scripts.json").read_text())
VERDICTS = json.loads((REPO / "bench/verl_scripts/verl_verdicts.json").read_text())
STAGES = {"import", "compose", "auto_set_device", "migrate_legacy_reward_impl", "validate_config", "task_runner", "model_config", "workers"}


def _measure():
    spec = importlib.util.spec_from_file_location("verl_scripts_measure", REPO / "bench/verl_scripts/measure.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_verdicts_are_of_the_same_scripts_and_commits():
    assert VERDICTS["verl_commit"] == SCRIPTS["verl_commit"]
    assert VERDICTS["recipe_commit"] == SCRIPTS.get("recipe_commit")
    assert set(VERDICTS["scripts"]) == set(SCRIPTS["scripts"]), "rerun bench/verl_scripts/verl_verdicts.py after extract.py"
    assert {"hydra-core", "omegaconf"} <= set(VERDICTS["versions"]) and VERDICTS["command"].startswith("python bench/verl_scripts/verl_verdicts.py")


def test_each_verdict_is_accepted_or_verls_error_at_a_stage():
    for name, v in VERDICTS["scripts"].items():
        assert v["verdict"] in ("accepted", "refused", "unchecked"), name
        if v["verdict"] == "accepted":
            assert set(v) == {"verdict"}, name
            continue
        assert v["stage"] in STAGES, (name, v["stage"])
        exc_type, _, message = v["error"].partition(": ")
        assert exc_type.isidentifier() and message, (name, v["error"])
        assert "/tmp/" not in v["error"], (name, v["error"])  # the temporary verl tree is written as <verl checkout>
        if v["verdict"] == "unchecked":
            assert "not installed" in v["why"] or "needs vLLM" in v["why"], name


def test_the_briefs_two_cases_are_verls_own_refusals():
    # the rollout's expert parallelism must equal TP x DP in verl's RolloutConfig (235B: EP 64 vs 8 x 1; 30B: EP 2 vs 4 x 1)
    for name in ("examples/grpo_trainer/run_qwen3_235b_a22b_megatron.sh", "examples/grpo_trainer/run_qwen3_30b_a3b_megatron.sh"):
        v = VERDICTS["scripts"][name]
        assert (v["verdict"], v["stage"]) == ("refused", "workers"), name
        assert "expert_parallel_size must be equal to tensor_model_parallel_size * data_parallel_size" in v["error"], name


def _p(key: str) -> Problem:
    return Problem(key=key, what="is refused", fix="x")


def test_headline_counts_over_all_and_over_what_verl_accepts():
    verdicts = {"verl_commit": "c" * 40, "recipe_commit": None, "versions": {"hydra-core": "1.3.8"},
                "scripts": {"a": {"verdict": "accepted"}, "b": {"verdict": "accepted"},
                            "c": {"verdict": "refused", "stage": "compose", "error": "ConfigCompositionException: Could not append to config. An item is already at 'k'"},
                            "d": {"verdict": "refused", "stage": "workers", "error": "AssertionError: x"},
                            "e": {"verdict": "unchecked", "stage": "compose", "why": "needs the package 'p', not installed", "error": "X: y"}}}
    result = {"a": [], "b": [_p("k1")], "c": [], "d": [_p("k2")], "e": []}
    head, body = _measure().verl_lines(result, dict(result), verdicts)
    # 2 accepted by verl (a, b), of which a resolves; c and d refused by verl; e unchecked
    assert "Of the 2 of these 5 that verl's own config checks accept" in head[0] and "**1 of 2** resolve unchanged (50%)" in head[0]
    assert "verl itself refuses 2" in head[0] and "1 could not be checked here (`e`: needs the package 'p'" in head[0]
    text = "\n".join(body)
    refused, accepts = text.split("## Scripts rl-core accepts that verl refuses")
    assert "- `c`\n  - verl (compose): ConfigCompositionException" in refused and "  - rl-core: **resolves**" in refused
    assert "- `d`\n  - verl (workers): AssertionError: x\n  - rl-core: `k2`: is refused" in refused
    # only c is accepted by rl-core and refused by verl, with what rl-core does instead
    assert [ln[:5] for ln in accepts.splitlines() if ln.startswith("- ")] == ["- `c`"]
    assert "rl-core reads `+key=value` as setting the key" in accepts


@pytest.fixture(scope="module")
def rl_core_refusals(tmp_path_factory):
    """rl-core's refusals (as `rlcore check --skip-device-check` gives them) of the two scripts verl refuses for the
    rollout's MoE sizes."""
    from rl_core.plugins import get_registry

    m = _measure()
    tmp = tmp_path_factory.mktemp("verl_scripts")
    rows = (REPO / m.FIXTURE).read_text().splitlines()
    data = tmp / "train.jsonl"
    data.write_text("\n".join(rows * (4096 // len(rows))) + "\n")
    registry = get_registry()
    names = ("examples/grpo_trainer/run_qwen3_235b_a22b_megatron.sh", "examples/grpo_trainer/run_qwen3_30b_a3b_megatron.sh")
    return {n: m.check(SCRIPTS["scripts"][n]["overrides"], str(data), registry, tmp=str(tmp)) for n in names}


def test_where_both_refuse_rl_core_says_verl_does_too(rl_core_refusals):
    by_key = {p.key: p for p in rl_core_refusals["examples/grpo_trainer/run_qwen3_235b_a22b_megatron.sh"]}
    ep = by_key["actor_rollout_ref.rollout.expert_parallel_size"]  # the key as the script writes it
    assert "is 64 but" in ep.what and "verl itself refuses this too" in ep.why
    grid = by_key["actor_rollout_ref.actor.megatron.expert_model_parallel_size"]
    assert "= 128 does not divide the 64 devices" in grid.what and "training library itself refuses this grid" in grid.why
    (moe_tp,) = rl_core_refusals["examples/grpo_trainer/run_qwen3_30b_a3b_megatron.sh"]
    assert moe_tp.key == "+actor_rollout_ref.rollout.moe_tensor_parallel_size"
    assert "verl itself refuses a size > 1 with the vllm and sglang rollouts" in moe_tp.what
