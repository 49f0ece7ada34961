"""Without rl-memory-estimate (blocked here as if not installed) `rlcore check` still resolves a config, prints no
estimate (memory or disk) and says how to get one; a --target with the node's RAM is checked without the host estimate."""

from __future__ import annotations

import pytest

from tests.conftest import REPO, run_rlcore


@pytest.mark.parametrize("extra", [[], ["--target", "gpu:1x80GB,ram=128GB"]])
def test_check_without_the_estimate_says_how_to_get_it(extra):
    blocked = {"RL_CORE_BLOCK_PLUGINS": "rl-memory-estimate"}
    res = run_rlcore("check", str(REPO / "examples" / "quickstart.yaml"), *extra, env=blocked, cwd=REPO)
    assert res.returncode == 0, res.stderr
    assert "memory estimate: not estimated" in res.stdout and "pip install rl-memory-estimate" in res.stdout
    assert "peak in" not in res.stdout and "host memory" not in res.stdout and "disk estimate" not in res.stdout  # nothing estimated
    assert "sizes:" in res.stdout  # the rest of the plan is printed as before
    if extra:  # the target's RAM part is the package's: not checked here, and said so
        assert "ram=128GB is not checked: rl-memory-estimate reads it" in res.stderr and "pip install rl-memory-estimate" in res.stderr
    with_it = run_rlcore("check", str(REPO / "examples" / "quickstart.yaml"), *extra, cwd=REPO)
    assert with_it.returncode == 0 and "peak in update" in with_it.stdout and "not estimated" not in with_it.stdout
    assert "disk estimate" in with_it.stdout and "final model" in with_it.stdout
    assert not extra or "the config resolves for 1 x cuda 80 GiB, 128 GiB RAM" in with_it.stderr  # the part described by its hook
