"""The import-only stand-ins (``tests/cpu_shims``) are imported by SGLang but never called.

Named ``test_zz_*`` so it runs after the engine tests of the same session,
whose SGLang processes append every stand-in call to the log
(``RL_SGLANG_STUB_CALL_LOG``, set by ``conftest.py``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.sglang
STAND_IN_DIR = os.environ.get("RL_SGLANG_STAND_IN_DIR")  # set by conftest.py when stand-ins are in use

if not STAND_IN_DIR:
    pytest.skip("no stand-in is in use here (SGLang is not installed, or the real sgl_kernel and torchvision are)", allow_module_level=True)


def test_no_stand_in_function_was_called():
    log = Path(os.environ["RL_SGLANG_STUB_CALL_LOG"])
    calls = log.read_text().splitlines() if log.exists() else []
    assert calls == [], f"SGLang called functions of the import-only stand-ins: {calls[:10]}"


def test_a_stand_in_call_would_be_caught(tmp_path):
    """The check above can fail: a call raises and lands in the log, in a child process too."""
    log = tmp_path / "calls.log"
    code = (
        "import sys\n"
        "for name in ('sgl_kernel', 'torchvision'):\n"
        "    if name in sys.argv[1:]:\n"
        "        mod = __import__(name + '.sub.deeper', fromlist=['x'])\n"
        "        assert mod.RL_IMPORT_STAND_IN\n"
        "        try:\n"
        "            mod.some_op(1)\n"
        "        except RuntimeError as exc:\n"
        "            assert 'import-only stand-in' in str(exc), exc\n"
        "        else:\n"
        "            raise SystemExit('no error')\n"
    )
    names = [p.name for p in Path(STAND_IN_DIR).iterdir() if p.is_dir() and p.name in ("sgl_kernel", "torchvision")]
    env = {**os.environ, "RL_SGLANG_STUB_CALL_LOG": str(log)}
    subprocess.run([sys.executable, "-c", code, *names], check=True, env=env)
    assert sorted(line.split()[1] for line in log.read_text().splitlines()) == sorted(f"{n}.sub.deeper.some_op" for n in names)
