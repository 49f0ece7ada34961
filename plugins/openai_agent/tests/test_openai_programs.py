"""Agent programs that crash, hang or flood: the rollout call completes, each is scored as configured, and no process
it started is left behind; the ``agent_reward`` reward reads those scores."""

from __future__ import annotations

import time

import pytest
from openai_testkit import run_rollout

pytest.importorskip("openai", reason="the programs use the openai client (pip install -e 'plugins/openai_agent[test]')")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("program, status, limits", [
    ("crashes", "crash", {}),
    ("hangs", "timeout", {"timeout_s": 15}),
    ("eats_memory", "crash", {"memory_mb": 1024}),
    ("floods_output", "output_limit", {"max_output_bytes": 200_000}),
    ("floods_calls", "too_many_calls", {"max_calls": 5}),
])
def test_failing_program_is_scored_and_leaves_nothing(model_dir, tmp_path, program, status, limits):
    from rl_agent_openai.reward import agent_reward

    t0 = time.monotonic()
    batch, rec, _ = run_rollout(model_dir, {"callable": program, "failure_reward": 0.25, "env": {"PID_DIR": str(tmp_path)}, **limits}, rows=2, n=2, R=32)
    took = time.monotonic() - t0
    infos = batch.non_tensors["extra_info"]
    assert len(infos) == 4 and batch["responses"].shape[0] == 4
    for info in infos:
        agent = info["agent"]
        assert agent["status"] == status, (agent["status"], agent["output_tail"])
        assert agent["reward"] == 0.25
        assert agent_reward(solution_str="", extra_info=info) == 0.25
    assert took < 90, f"the rollout call took {took:.0f} s"
    pids = [int(p) for f in tmp_path.glob("*.pid") for p in f.read_text().split()]
    if program != "crashes":
        assert pids, "the programs recorded their processes"
    time.sleep(0.2)
    assert not [p for p in pids if _alive(p)], "a program's process (or one it started) outlived the rollout"
    if program == "eats_memory":
        assert all("MemoryError" in info["agent"]["output_tail"] for info in infos)
    if program == "floods_calls":  # 5 served calls per trajectory at most, then 429 and the program is stopped
        assert len(rec.calls) <= 4 * 5
    # a crashed program's served call is still in its trajectory (trained with the failure score)
    if program == "crashes":
        assert len(rec.calls) == 4
        for r, info in enumerate(infos):
            assert [t["sampled"] for t in info["agent"]["turns"]] == [2]
            assert int(batch["response_mask"][r].sum()) == 2


def test_no_reward_uses_the_fallback_or_says_so(model_dir, tmp_path):
    from rl_agent_openai.reward import agent_reward

    batch, _, _ = run_rollout(model_dir, {"callable": "returns_nothing"}, R=32)
    info = batch.non_tensors["extra_info"][0]
    assert info["agent"]["status"] == "ok" and info["agent"]["reward"] is None and info["agent"]["result"] == {"note": "no reward"}
    fallback = tmp_path / "fb.py"
    fallback.write_text("def score(data_source=None, solution_str='', ground_truth=None, extra_info=None, **kw):\n"
                        "    return 0.75 if extra_info['agent']['result']['note'] == 'no reward' else 0.0\n")
    assert agent_reward(solution_str="x", extra_info=info, fallback=f"{fallback}:score") == 0.75
    with pytest.raises(ValueError, match="returned no reward"):
        agent_reward(solution_str="x", extra_info=info)


def test_command_program(model_dir, tmp_path):
    """A command (not a callable): it gets the base URL, the token and the task in its environment; its result file is read."""
    script = tmp_path / "agent.sh"
    script.write_text(
        "#!/bin/sh\n"
        "python3 - <<'PY'\n"
        "import json, os, urllib.request\n"
        "task = json.load(open(os.environ['RL_AGENT_TASK_FILE']))\n"
        "req = urllib.request.Request(os.environ['OPENAI_BASE_URL'] + '/chat/completions', method='POST',\n"
        "    data=json.dumps({'model': 'p', 'messages': task['messages'], 'max_tokens': 3}).encode(),\n"
        "    headers={'Authorization': 'Bearer ' + os.environ['OPENAI_API_KEY'], 'Content-Type': 'application/json'})\n"
        "out = json.load(urllib.request.urlopen(req))\n"
        "json.dump({'reward': 0.5, 'finish': out['choices'][0]['finish_reason'], 'keys': sorted(task)}, open(os.environ['RL_AGENT_RESULT_FILE'], 'w'))\n"
        "PY\n")
    script.chmod(0o755)
    batch, rec, _ = run_rollout(model_dir, {"command": [str(script)]}, R=32)
    agent = batch.non_tensors["extra_info"][0]["agent"]
    assert agent["status"] == "ok", agent["output_tail"]
    assert agent["reward"] == 0.5 and agent["result"] == {"finish": "length", "keys": ["extra_info", "index", "messages"]}
    assert len(rec.calls) == 1


def test_program_options_are_checked():
    from rl_agent.config import MultiTurnConfig
    from rl_agent_openai.options import program_options

    with pytest.raises(ValueError, match="exactly one of callable"):
        program_options(MultiTurnConfig(program={}))
    with pytest.raises(ValueError, match="unknown key 'timeout'.*timeout_s"):
        program_options(MultiTurnConfig(program={"callable": "a:b", "timeout": 3}))
    with pytest.raises(ValueError, match="timeout_s must be a positive number"):
        program_options(MultiTurnConfig(program={"callable": "a:b", "timeout_s": -1}))
    assert program_options(MultiTurnConfig(program={"command": "python agent.py --x 1"})).command == ("python", "agent.py", "--x", "1")
