"""How often does the untrained model write a well-formed calculator call? (before spending CPU on training)

    python bench/agent_calculator/probe.py [examples/agent_calculator.yaml] [n_prompts]
"""

from __future__ import annotations

import json
import sys
import time

from rl_core.backends import SamplingParams, WorkerContext
from rl_core.cli.train_cmd import materialise_builtin_model
from rl_core.config.load import load_config
from rl_core.data.dataset import build_loaders
from rl_core.modeling import load_tokenizer
from rl_core.plugins import get_registry
from rl_core.rollout.hf import factory
from rl_core.rollout.multi_turn import agent_runtime

path = sys.argv[1] if len(sys.argv) > 1 else "examples/agent_calculator.yaml"
n_prompts = int(sys.argv[2]) if len(sys.argv) > 2 else 8
cfg = materialise_builtin_model(load_config(path, [f"data.train_batch_size={n_prompts}", "model.dtype=float32"]))
tok = load_tokenizer(cfg.model.path)
loader, _, _ = build_loaders(cfg.data, tok, seed=0)
prompts = loader.next_batch()
agent, problems = agent_runtime(cfg, get_registry())  # what the resolver puts on the stack (Stack.agent)
assert not problems, problems
engine = factory(cfg, WorkerContext(agent=agent))
t = time.time()
out = engine.generate(prompts, SamplingParams(n=cfg.rollout.n, max_new_tokens=cfg.data.max_response_length, temperature=1.0, seed=0))
took = time.time() - t
infos = out.non_tensors["extra_info"]
ok_calls = sum(1 for i in infos for turn in i["agent"]["turns"] for r in turn.get("tool_results", []) if r["status"] == "ok")
print(json.dumps({"seconds": round(took, 1), "trajectories": len(infos), "meta": out.meta, "ok_calls": ok_calls}, indent=1))
for i in infos[:6]:
    print("----", i["agent"]["stop_reason"])
    for m in i["messages"][2:]:
        print(f"  [{m['role']}] {m['content'][:160]!r}")
