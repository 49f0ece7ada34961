"""What the reliability tests tried and how it went, for the summary table.

Each test calls :func:`record` once per case it tries (``ok`` = the case was
handled as it must be); :func:`table` renders the counts. The conftest prints
the table at the end of the session and, when ``RL_CORE_RELIABILITY_TABLE`` names
a file, writes it there (``python -m tests.reliability.report`` does that).
"""

from __future__ import annotations

import json
import os
from collections import defaultdict

# row -> (what "tried" means, what "ok" means)
ROWS: dict[str, tuple[str, str]] = {
    "configs": ("config mutations tried", "rejected clearly (no traceback)"),
    "data": ("data faults tried", "handled (clear error naming the file/row, or dropped with a count)"),
    "kills": ("kill -9 runs (controller / worker)", "resumed with metrics identical to an uninterrupted run"),
    "disk": ("full disk / read-only output dir at save time", "clear error, previous checkpoint intact"),
    "nan": ("NaN / inf injections", "caught (step stopped, stage/role/tensor named, no hf_final)"),
    "malicious": ("malicious or damaged checkpoints", "refused or skipped (no code run)"),
    "rendezvous": ("listening sockets of a 2-rank run", "bound to 127.0.0.1 only"),
    "user_errors": ("user mistakes at the CLI", "a message without traceback"),
    "signals": ("SIGINT / SIGTERM to a running train", "one line, exit 130 / 143, workers stopped, the step saved or 'nothing was saved'"),
    "ray_loopback": ("listening sockets of the run's local Ray instance", "every one on loopback"),
    "reward_exits": ("reward functions that exit / kill their process", "contained, sample and function named, reward.on_error applied"),
    "secrets": ("secret-shaped values under ordinary key names", "masked in printouts, config.yaml and logger configs"),
    "check_probes": ("mistakes only a deeper rlcore check finds", "reported by rlcore check (not a traceback in train)"),
    "engines": ("rollout engines that die or hang mid-run", "replaced (weights re-synced and verified, the call repeated), the run finishes its steps"),
    "agent_output": ("malformed tool calls in a model's text (deep nesting, huge numbers, bad UTF-8, megabytes)", "a failed tool call, parsed in < 5 s"),
    "agent_tools": ("tools that exit / os._exit / return invalid text / flood / hang", "a failed tool call, the process lives"),
    "agent_loops": ("agent loops that break the trajectory contract", "an error naming the loop, its plugin and what was wrong"),
    "agent_sandbox": ("escapes of the python tool's sandbox without bubblewrap", "contained (no file left, no host socket, no other process's cmdline)"),
    "agent_orphans": ("a second Ctrl-C / SIGTERM to the group while python-tool programs run", "no tool process outlives rl-core"),
}

_counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
_failures: dict[str, list[str]] = defaultdict(list)


def record(row: str, case: str, ok: bool) -> bool:
    if row not in ROWS:
        raise KeyError(f"unknown tally row {row!r}; known: {sorted(ROWS)}")
    _counts[row][0] += 1
    _counts[row][1] += bool(ok)
    if not ok:
        _failures[row].append(case)
    return ok


def counts() -> dict[str, tuple[int, int]]:
    return {k: (v[0], v[1]) for k, v in _counts.items()}


def table() -> str:
    lines = ["| what | tried | ok | ok means |", "|---|---:|---:|---|"]
    for row, (tried_label, ok_label) in ROWS.items():
        tried, ok = _counts.get(row, (0, 0))
        lines.append(f"| {tried_label} | {tried} | {ok} | {ok_label} |")
    for row, cases in _failures.items():
        lines.append(f"\nnot ok ({row}): " + "; ".join(cases[:20]))
    return "\n".join(lines)


def dump(path: str) -> None:
    with open(path, "w") as f:
        f.write(table() + "\n")
    with open(path + ".json", "w") as f:
        json.dump({"counts": counts(), "failures": dict(_failures)}, f, indent=1)


def maybe_dump() -> None:
    path = os.environ.get("RL_CORE_RELIABILITY_TABLE")
    if path:
        dump(path)
