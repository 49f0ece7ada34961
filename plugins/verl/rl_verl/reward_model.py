"""verl's reward model served by a rollout engine (``reward.reward_model.rollout.*``, the older spelling
``reward_model.rollout.*``): what rl-core's reward model does in its place.

verl (its reward loop) serves the reward model with vLLM / SGLang and, when no custom reward function is
set, scores a discriminative model: the reward model's chat template over the prompt's messages and the
decoded response, sent to the engine's classify / embedding route; the score is the classification head's
logit (no activation). rl-core's ``classifier`` reward model computes that score with its own forward, so
the engine's serving knobs (``name``, ``gpu_memory_utilization``, ``tensor_model_parallel_size``) change
only speed and memory: accepted with a warning naming them. ``prompt_length`` / ``response_length`` cap
what verl's server *generates*; scoring generates nothing and verl does not cut the reward model's input
by them: warned the same way. What does change scores is the input's length limit: verl's server takes the
whole text up to ``max_model_len`` (unset: the model's ``max_position_embeddings``), so ``max_model_len``
maps to ``reward_model.max_length`` and, without it, ``reward_model.max_length`` becomes null (the model's
context) instead of rl-core's 4096 cut. A custom reward function beside the served model is verl's
generative reward model (user code calls the server over HTTP): refused, nearest ``reward_model.name=judge``.
"""

from __future__ import annotations

from typing import Any

from rl_core.config.load import set_dotted
from rl_core.config.schema import RunConfig
from rl_core.problems import Problem
from rl_verl.profile import get_dotted
from rl_verl.values import norm

#: HOLD names of rl_verl.keys' rows, by verl key part
PREFIX = "rm_rollout."
KNOBS = ("name", "gpu_memory_utilization", "tensor_model_parallel_size", "prompt_length", "response_length")
ENGINES = ("vllm", "sglang")
_SERVING = "serving knob of verl's reward-model server (speed / memory only): rl-core's reward model runs in its own workers (reward_model.strategy, reward_model.n_gpus_per_node)"
NOTES = {
    "name": "the engine serving verl's reward model: rl-core's classifier reward model computes the same score (the classification "
            "head's logit at the chat-templated prompt + response's last token) with its own forward",
    "gpu_memory_utilization": "a " + _SERVING,
    "tensor_model_parallel_size": "a " + _SERVING,
    "prompt_length": "caps what verl's server generates; scoring generates nothing and verl does not cut the reward model's input by it "
                     "(its limit is max_model_len): same scores",
    "response_length": "caps what verl's server generates; scoring generates nothing and verl does not cut the reward model's input by it "
                       "(its limit is max_model_len): same scores",
}


def apply(tree: dict[str, Any], tr: Any) -> tuple[list, list]:
    """The held ``reward.reward_model.rollout.*`` keys of ``tr`` on the translated ``tree``: ``(problems,
    defaults applied as (key, value, rl-core's own))``."""

    held = {name[len(PREFIX):]: tr.held[name] for name in list(tr.held) if name.startswith(PREFIX)}
    if not held:
        return [], []
    first = next(iter(held.values()))[0]
    if get_dotted(tree, "reward.custom.path", None):
        return [Problem(key=first, what="a custom reward function calling the reward model that verl serves (verl's generative reward model) "
                        "is a verl feature rl-core does not have",
                        fix="nearest rl-core setting: reward_model.name=judge with reward_model.judge.engine (an LLM asked for a score; "
                            "docs/reward-models.md), or remove the custom reward function for a sequence-classifier reward model")], []
    problems: list = []
    engine = str(norm(held["name"][1])) if "name" in held else "the engine"
    if "name" in held and engine not in ENGINES:
        written = held["name"][0]
        feature = ("a reward model served by TensorRT-LLM (verl itself refuses it)" if engine in ("trtllm", "hf_trtllm")
                   else f"a reward model served by {engine!r}")
        problems.append(Problem(key=written, what=f"{feature} is a verl feature rl-core does not have",
                                fix="nearest rl-core setting: name=vllm or sglang (rl-core scores with its own forward either way)"))
    for part, (written, value) in held.items():
        if part == "name" and engine not in ENGINES:
            continue
        what = (f"is {value!r}: rl-core scores with reward_model.name=classifier's own forward (the same score as verl's {engine} classify route)"
                if part == "name" else f"ignored: {NOTES[part]}")
        problems.append(Problem(key=written, what=what, severity="warning"))
    applied: list = []
    marker = object()
    if get_dotted(tree, "reward_model.name", "classifier") != "judge" and get_dotted(tree, "reward_model.max_length", marker) is marker:
        set_dotted(tree, "reward_model.max_length", None)  # verl's server scores the whole text, up to the model's context
        applied.append(("reward_model.max_length", None, RunConfig().reward_model.max_length))
    return problems, applied
