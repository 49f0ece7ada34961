"""Long silent phases say what they do with the elapsed time; a busy CPU is named (issue 31, point 6)."""

from __future__ import annotations

import io
import time

from rl_core.util import console


def test_a_long_phase_says_what_it_does_and_how_long_it_took():
    out = io.StringIO()
    with console.phase("loading the model", out, quiet_s=0.05, every_s=0.1):
        time.sleep(0.35)
    lines = out.getvalue().splitlines()
    assert lines[0] == "loading the model..."
    assert any("so far" in line for line in lines[1:-1])
    assert lines[-1].startswith("loading the model: done in ")


def test_a_short_phase_prints_nothing():
    out = io.StringIO()
    with console.phase("quick", out, quiet_s=5):
        pass
    assert out.getvalue() == ""


def test_busy_cpu_is_a_warning_with_the_numbers(monkeypatch):
    monkeypatch.setattr(console, "cpu_load", lambda: (16.3, 2))
    text = console.busy_cpu_warning()
    assert "load average 16.3 on 2 cores" in text and "~9x" in text
    monkeypatch.setattr(console, "cpu_load", lambda: (2.5, 2))
    assert console.busy_cpu_warning() is None
    monkeypatch.setattr(console, "cpu_load", lambda: (5.5, 2))
    assert console.busy_cpu_warning(own_processes=3) is None  # this run's own processes are not "others"
