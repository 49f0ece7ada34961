"""CI runs the README's own set-up and test commands (issue 31): the markers exist and `.ci/run` uses them."""

from __future__ import annotations

import runpy
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
block = runpy.run_path(str(REPO / ".ci" / "readme_block.py"))["block"]


def test_readme_marks_its_set_up_and_test_blocks():
    setup, test = block("setup"), block("test")
    assert "pip install -r requirements-dev.txt" in setup and "python3 -m venv .venv" in setup
    assert test.strip() == "python -m pytest"
    # printed exactly as the README shows them (what .ci/run reads)
    out = subprocess.run([sys.executable, str(REPO / ".ci" / "readme_block.py"), "setup"], capture_output=True, text=True, check=True).stdout
    assert out == setup


def test_ci_runs_the_blocks_before_anything_it_adds():
    run = (REPO / ".ci" / "run").read_text()
    lines = [line for line in run.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    at = {name: next(i for i, line in enumerate(lines) if f"readme_block.py {name}" in line) for name in ("setup", "test")}
    executed = next(i for i, line in enumerate(lines) if '$SETUP' in line and "bash -euo pipefail" in line)
    assert at["setup"] < executed and at["test"] < executed
    # before it, only parts that install into folders of their own (the wheels' build venv, the engine venvs) are
    # started, in the background; nothing is pip-installed into the README's venv or any other before its set-up
    before = lines[:executed]
    assert not [line for line in before if "pip install" in line], "something is installed before the README's own set-up runs"
    assert not [line for line in before if "$CLONE/.venv" in line], "the README's venv is used before its set-up runs"
    started = [line for line in before if "wheels.sh" in line or "engine_venv.sh" in line]
    assert started and all(line.startswith("start ") for line in started), started
    # the wheels' checks need the README's venv (pytest): they come after it
    assert "wheels.sh check" not in "\n".join(before) and any("wheels.sh check" in line for line in lines[executed:])


def test_requirements_hold_what_the_packaging_tests_need():
    reqs = {line.split("=")[0].split(">")[0].strip() for line in (REPO / "requirements-dev.txt").read_text().splitlines() if line and not line.startswith(("#", "-e"))}
    assert {"wheel", "build", "setuptools"} <= reqs


def test_a_missing_marker_is_named():
    with pytest.raises(LookupError, match="ci:setup"):
        block("setup", "# readme\n```bash\npip install x\n```\n")
    with pytest.raises(LookupError, match="not followed by a fenced code block"):
        block("test", "<!-- ci:test -->\nsome words\n```bash\nx\n```\n")
