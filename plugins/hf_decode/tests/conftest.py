"""Shared by the Triton kernels' tests: run a script in a child process under Triton's CPU interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest


def _interpreted(code: str, *args: str) -> dict:
    """Run ``code`` with ``TRITON_INTERPRET=1`` (it must be set before Triton is imported) and return the JSON object
    its last output line prints."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def interpreted():
    return _interpreted
