"""verl's reward model served by a rollout engine (reward.reward_model.rollout.*, rl_verl.reward_model):
the serving knobs are warnings naming the key, the input limit maps onto reward_model.max_length (null: the model's
context, as verl's server), and what rl-core cannot match (a custom reward function calling the server, TensorRT-LLM,
the server's other settings) is refused by the key as written."""

from __future__ import annotations

import json
from pathlib import Path

from rl_core.config.load import load_report

S = "examples/grpo_trainer/run_mistral_nemo_12b_skyworkrm_fsdp.sh"
R = "reward.reward_model.rollout"
ON = ["reward.reward_model.enable=True", "reward.reward_model.model_path=/models/rm"]


def _report(*overrides):
    loaded = load_report(None, [*ON, *overrides])
    return loaded, {p.key: p for p in loaded.problems if p.severity == "error"}, {p.key: p for p in loaded.problems if p.severity == "warning"}


def test_the_skywork_script_resolves_with_a_warning_per_serving_knob():
    data = json.loads((Path(__file__).parent / "verl_scripts" / "scripts.json").read_text())
    loaded = load_report(None, data["scripts"][S]["overrides"])
    assert [p.render() for p in loaded.problems if p.severity == "error"] == []
    warned = {p.key: p.what for p in loaded.problems if p.severity == "warning"}
    for k in ("name", "gpu_memory_utilization", "tensor_model_parallel_size", "prompt_length", "response_length"):
        assert f"{R}.{k}" in warned, k
    assert "classifier" in warned[f"{R}.name"] and "speed / memory" in warned[f"{R}.gpu_memory_utilization"]
    assert "generates" in warned[f"{R}.prompt_length"]
    rm = loaded.config.reward_model
    assert rm.enable and rm.name == "classifier" and rm.model.path == "builtin:smollm2"
    assert rm.max_length is None  # verl's server scores the whole text (the model's context), not rl-core's 4096 cut
    assert ("reward_model.max_length", None, 4096) in loaded.profile_defaults


def test_max_model_len_dtype_and_the_older_spelling_map():
    loaded, errors, warned = _report(f"{R}.name=sglang", f"{R}.max_model_len=8192", f"{R}.dtype=bfloat16")
    assert not errors and loaded.config.reward_model.max_length == 8192 and loaded.config.reward_model.model.dtype == "bfloat16"
    loaded, errors, warned = _report("reward_model.rollout.name=vllm", "reward_model.rollout.prompt_length=1024")
    assert not errors and {"reward_model.rollout.name", "reward_model.rollout.prompt_length"} <= set(warned)
    # a length the user set for rl-core's reward model stays
    assert _report(f"{R}.name=vllm", "reward_model.max_length=2048")[0].config.reward_model.max_length == 2048


def test_what_cannot_be_matched_is_refused_by_the_key_as_written():
    _, errors, _ = _report(f"{R}.name=trtllm")
    assert "TensorRT-LLM" in errors[f"{R}.name"].what
    # verl's generative reward model: user code calls the server
    _, errors, _ = _report(f"{R}.name=vllm", "custom_reward_function.path=/x/genrm.py")
    assert "generative reward model" in errors[f"{R}.name"].what and "reward_model.name=judge" in errors[f"{R}.name"].fix
    _, errors, _ = _report(f"{R}.enforce_eager=False")
    assert "reward-model server" in errors[f"{R}.enforce_eager"].what


def test_a_judge_needs_a_length():
    from rl_reward_model.checks import judge_problems

    loaded, errors, _ = _report("reward_model.name=judge", "reward_model.max_length=null")
    assert any(p.key == "reward_model.max_length" for p in judge_problems(loaded.config))
    # a served model with rl-core's judge keeps rl-core's length
    assert _report(f"{R}.name=vllm", "reward_model.name=judge")[0].config.reward_model.max_length == 4096
