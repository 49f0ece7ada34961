"""Generated mutations of every example config: each bad one is rejected with a message, never a traceback.

For every leaf key of every ``examples/*.yaml``: a value of the wrong type,
and the key misspelt; for every section: a duplicated section (a YAML
mapping with the same key twice). The table counts how many were rejected
clearly (exit 1, the key named, no traceback); the test fails on any
traceback, on any misspelt key that is accepted (``reward.kwargs`` too: they
are checked against the reward function's parameters) and on any mutation whose
message does not name the key.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.reliability import tally
from tests.reliability.runs import cli

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))


def _leaves(d, prefix=()):
    for k, v in d.items():
        if isinstance(v, dict) and v:
            yield from _leaves(v, prefix + (k,))
        else:
            yield prefix + (k,), v


def _wrong_type(v):
    if isinstance(v, bool):
        return "sometimes"
    if isinstance(v, (int, float)):
        return "lots"
    if isinstance(v, str):
        return {"not": "a string"}
    if isinstance(v, list):
        return {"not": "a list"}
    if isinstance(v, dict):
        return 12345
    return ["unexpected"]


def _set(d, path, value, rename=None):
    node = d
    for p in path[:-1]:
        node = node[p]
    if rename is not None:
        node[rename] = node.pop(path[-1])
    else:
        node[path[-1]] = value


def _typo(name: str) -> str:
    swapped = name[:-2] + name[-1] + name[-2] if len(name) > 2 else name
    return swapped if swapped != name else name + "x"


def mutations(example: Path):
    base = yaml.safe_load(example.read_text())
    for path, value in _leaves(base):
        d = yaml.safe_load(example.read_text())
        _set(d, path, _wrong_type(value))
        yield f"{example.name}: {'.'.join(path)} of the wrong type", yaml.safe_dump(d), path[-1]
        d = yaml.safe_load(example.read_text())
        _set(d, path, None, rename=_typo(path[-1]))
        yield f"{example.name}: {'.'.join(path)} misspelt", yaml.safe_dump(d), _typo(path[-1])
    for section in base:
        text = example.read_text() + f"\n{section}:\n  {next(iter(base[section])) if isinstance(base[section], dict) and base[section] else 'x'}: 1\n"
        yield f"{example.name}: section {section} twice", text, section


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_config_mutations_are_rejected_without_traceback(tmp_path, example):
    tracebacks, typos_accepted, unclear = [], [], []
    for i, (case, text, key) in enumerate(mutations(example)):
        path = tmp_path / f"m{i}.yaml"
        path.write_text(text)
        try:
            code, out, err = cli("check", str(path))
        except Exception as exc:  # noqa: BLE001 - an escaped exception is a traceback for the user
            code, out, err = 1, "", f"Traceback: {type(exc).__name__}: {exc}"
        traceback = "Traceback" in out + err
        clear = code != 0 and not traceback and key in err
        tally.record("configs", case, clear)
        if traceback:
            tracebacks.append(case)
        if "misspelt" in case and code == 0:
            typos_accepted.append(case)
        elif not clear:
            unclear.append(f"{case} (exit {code}): {err.strip()[-300:]}")
    assert not tracebacks, tracebacks
    assert not typos_accepted, typos_accepted
    # an example that fails rlcore check unchanged here (no data, no CUDA) exits 1 whatever the mutation: the key named
    # in the message is what shows the mutation was found
    assert not unclear, unclear
