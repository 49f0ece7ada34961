"""CI runs the numerics-heavy tests under other CPU kernel choices (issue 55, .ci/kernels.sh): every file it names
exists (a moved test file would silently drop out of it), .ci/run uses at least two choices, and a bad choice is named."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / ".ci" / "kernels.sh"


def test_every_file_the_kernel_runs_name_exists():
    files = re.search(r"^FILES=\(\n(.*?)^\)", SCRIPT.read_text(), re.S | re.M).group(1).split()
    assert files
    missing = [f for f in files if not (REPO / f.split("::")[0]).is_file()]
    assert not missing, f".ci/kernels.sh names test files that do not exist (moved? update its FILES): {missing}"


def test_ci_runs_them_under_two_kernel_choices():
    calls = [line for line in (REPO / ".ci" / "run").read_text().splitlines() if "kernels.sh" in line and not line.lstrip().startswith("#")]
    assert len(calls) == 1
    choices = calls[0].split("kernels.sh", 1)[1].split(")")[0].split()
    assert len(set(choices) & {"default", "avx2", "avx512"}) >= 2, calls[0]


def test_an_unknown_choice_is_named():
    out = subprocess.run(["bash", str(SCRIPT), "avx3"], capture_output=True, text=True)
    assert out.returncode == 2 and "unknown kernel choice 'avx3'" in out.stderr
