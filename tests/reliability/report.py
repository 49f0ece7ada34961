"""``python -m tests.reliability.report``: run tests/reliability and print the summary table.

Extra arguments go to pytest (e.g. ``-x``). The table is also written to
``RL_CORE_RELIABILITY_TABLE`` (default: a temporary file) and printed last.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time


def main(argv: list[str]) -> int:
    fd, table = tempfile.mkstemp(prefix="rl-core-reliability-", suffix=".md")
    os.close(fd)
    env = {**os.environ, "RL_CORE_RELIABILITY_TABLE": os.environ.get("RL_CORE_RELIABILITY_TABLE", table)}
    start = time.monotonic()
    code = subprocess.call([sys.executable, "-m", "pytest", "tests/reliability", "-q", "-p", "no:cacheprovider", *argv], env=env)
    minutes = (time.monotonic() - start) / 60
    path = env["RL_CORE_RELIABILITY_TABLE"]
    text = open(path).read() if os.path.exists(path) else "(no table: the tests did not run)\n"
    print(f"\nrl-core reliability (pytest exit code {code}, {minutes:.1f} min):\n")
    print(text)
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
