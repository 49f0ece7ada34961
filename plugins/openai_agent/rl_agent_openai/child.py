"""``python -m rl_agent_openai.child MODULE:FUNCTION``: run an agent callable in its own process.

The function is called as ``function(task)``; ``task`` is the JSON of ``RL_AGENT_TASK_FILE`` plus ``base_url``,
``api_key`` and ``session``. Its return value (JSON-able: a number, an object with ``reward``, or None) is written
to ``RL_AGENT_RESULT_FILE``. ``MODULE`` is a dotted module name, or a ``.py`` path (relative to the run's working
directory, ``RL_AGENT_CWD``).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys


def load(spec: str):
    target, _, name = spec.rpartition(":")
    if target.endswith(".py"):
        path = target if os.path.isabs(target) else os.path.join(os.environ.get("RL_AGENT_CWD", "."), target)
        mod_spec = importlib.util.spec_from_file_location("rl_agent_program", path)
        if mod_spec is None or mod_spec.loader is None:
            raise SystemExit(f"rollout.multi_turn.program.callable: cannot load {path!r}")
        module = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    try:
        return getattr(module, name)
    except AttributeError:
        raise SystemExit(f"rollout.multi_turn.program.callable: {target!r} has no {name!r}") from None


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m rl_agent_openai.child MODULE:FUNCTION", file=sys.stderr)
        return 2
    fn = load(argv[0])
    with open(os.environ["RL_AGENT_TASK_FILE"], encoding="utf-8") as f:
        task = json.load(f)
    task.update(base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"], session=os.environ["RL_AGENT_SESSION"])
    result = fn(task)
    with open(os.environ["RL_AGENT_RESULT_FILE"], "w", encoding="utf-8") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
