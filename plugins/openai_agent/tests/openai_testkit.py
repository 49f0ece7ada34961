"""Helpers of rl-agent-openai's tests: a tiny random model whose chat template renders tools, and a rollout through the
endpoint on a rollout backend with the engine's decode calls recorded."""

from __future__ import annotations

from pathlib import Path

import numpy as np

PROGRAMS = str(Path(__file__).with_name("agent_programs.py"))

TOOLS_TEMPLATE = (
    "{% if tools %}{{ '<|im_start|>system\nTOOLS:' }}{% for t in tools %}{{ ' ' + t['function']['name'] + ': ' + t['function']['description'] }}"
    "{% endfor %}{{ '<|im_end|>\n' }}{% endif %}"
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


class Recording:
    """The openai_agent runtime with the engine's decode calls recorded: what the engine saw and produced."""

    def __init__(self, runtime) -> None:
        self.runtime = runtime
        self.calls: list[tuple[list[int], list[int], list[float] | None, tuple]] = []

    def tool_schemas(self):
        return self.runtime.tool_schemas()

    def setup(self, tokenizer):
        return self.runtime.setup(tokenizer)

    def rollout(self, setup, batch, params, decode, *, pad_id, eos_ids):
        def recorded(prompts, budgets, stop):
            outs = decode(prompts, budgets, stop)
            for p, o in zip(prompts, outs):
                self.calls.append((list(p), list(o.token_ids), None if o.log_probs is None else list(o.log_probs), tuple(stop)))
            return outs

        return self.runtime.rollout(setup, batch, params, recorded, pad_id=pad_id, eos_ids=eos_ids)


MESSAGES = [[{"role": "user", "content": "Count the letters of hello."}], [{"role": "user", "content": "abc"}]]


def run_rollout(model_dir, program: dict, *, rows=1, n=1, R=96, greedy=False, temperature=1.0, fmt="every_turn", max_tokens_per_turn=None,
                messages=None, backend="hf"):
    """(output batch, Recording) of one rollout call whose trajectories are runs of ``program``."""
    from rl_agent.config import MultiTurnConfig
    from rl_agent.testing import register_fixtures
    from rl_agent_openai.runtime import OpenAIAgentRuntime
    from rl_core.backends import SamplingParams, WorkerContext
    from rl_core.config.schema import DataConfig, ModelConfig, RolloutConfig, RunConfig, TrainerConfig
    from rl_core.config.sections import evolve_key
    from rl_core.modeling import load_tokenizer
    from rl_core_testing.distributed import torch_threads
    from rl_core_testing.rollout_conformance import prompt_batch

    registry = register_fixtures()
    program = dict(program)
    if "callable" in program and ":" not in program["callable"]:
        program["callable"] = f"{PROGRAMS}:{program['callable']}"
    mt = MultiTurnConfig(enable=True, agent_loop="openai_agent", format=fmt, max_tokens_per_turn=max_tokens_per_turn, program=program)
    cfg = RunConfig(model=ModelConfig(path=str(model_dir)), data=DataConfig(train_batch_size=rows, max_prompt_length=256, max_response_length=R),
                    rollout=RolloutConfig(name=backend, n=n, temperature=temperature), trainer=TrainerConfig(seed=0))
    cfg = evolve_key(cfg, "rollout.multi_turn", mt)
    tok = load_tokenizer(model_dir)
    msgs = (messages or MESSAGES)[:rows]
    prompts = prompt_batch(model_dir, [tok.apply_chat_template(m, tokenize=False, add_generation_prompt=True) for m in msgs])
    raw = np.empty(rows, dtype=object)
    raw[:] = msgs
    prompts.non_tensors["raw_prompt"] = raw
    infos = np.empty(rows, dtype=object)
    infos[:] = [{"index": i, "reward_model": {"ground_truth": "SECRET"}, "topic": "test"} for i in range(rows)]
    prompts.non_tensors["extra_info"] = infos
    recording = Recording(OpenAIAgentRuntime(mt, registry))
    if backend == "hf":
        from rl_core.rollout.hf import factory
    else:
        from rl_core.plugins import get_registry

        factory = get_registry().get("rollout", backend).load()
    with torch_threads(1):
        engine = factory(cfg, WorkerContext(agent=recording))
        try:
            batch = engine.generate(prompts, SamplingParams(n=n, max_new_tokens=R, temperature=temperature, greedy=greedy, seed=3, logprobs=True))
        finally:
            engine.shutdown()
    return batch, recording, tok
