"""bench/stack_sampler.py: where a thread's wall time goes, against a thread whose time split is known by construction."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _sampler():
    spec = importlib.util.spec_from_file_location("stack_sampler", BENCH / "stack_sampler.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.StackSampler


def waits_long():
    time.sleep(0.3)  # releases the GIL, as a CUDA synchronize does


def spins_short():
    end = time.perf_counter() + 0.1
    while time.perf_counter() < end:  # holds the GIL, as Python bookkeeping does
        pass


def outer():
    waits_long()
    spins_short()


def test_shares_follow_the_time_each_function_took():
    with _sampler()(interval=0.002) as s:
        outer()
    inclusive = {name.rsplit(":", 1)[1]: c / s.samples for name, c in s.inclusive.items()}
    leaf = {name.rsplit(":", 1)[1]: c / s.samples for name, c in s.leaf.items()}
    assert s.samples > 40 and 0.38 < s.wall_s < 1.0
    assert inclusive["outer"] > 0.95  # every sample of the block is inside outer
    assert 0.55 < inclusive["waits_long"] < 0.9 and 0.1 < inclusive["spins_short"] < 0.45  # ~0.75 / ~0.25 of the time
    assert leaf.get("sleep_", 0) == 0 and leaf["waits_long"] > 0.5  # time.sleep is C: the leaf is its Python caller
    assert "| inclusive | function |" in s.table(5) and "waits_long" in s.table(5)


def test_a_recursive_function_counts_once_per_sample():
    def down(k):
        if k:
            return down(k - 1)
        time.sleep(0.1)

    with _sampler()(interval=0.002) as s:
        down(5)
    counts = {name.rsplit(":", 1)[1]: c for name, c in s.inclusive.items()}
    assert counts["down"] <= s.samples
