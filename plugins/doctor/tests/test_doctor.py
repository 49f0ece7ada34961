"""`rlcore doctor`: versions, plugins, devices, and a real all-reduce over spawned gloo processes."""

from __future__ import annotations

import json
import sys

import pytest
import torch
from rl_core.cli.main import main


def test_doctor_reports_versions_plugins_devices_and_a_working_allreduce(capsys):
    code = main(["doctor", "--nprocs", "2", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0, report
    assert report["versions"]["torch"] == torch.__version__
    assert report["versions"]["python"].startswith(f"{sys.version_info.major}.{sys.version_info.minor}.")
    assert any(p.startswith("rl-train-fsdp ") for p in report["plugins"]["plugins"])
    assert {"backend": "train fsdp"}.items() <= next(e for e in report["plugins"]["engines"] if e["backend"] == "train fsdp").items()
    assert "cores" in report["devices"]["cpu"]
    assert "bfloat16" in report["devices"]["cpu"]  # what model.dtype=auto will pick on this CPU (rl_core.util.precision)
    gloo = next(c for c in report["collectives"] if c["backend"] == "gloo")
    # the ranks checked the sum of every all-reduce, so ok means the collective gave the right answer
    assert gloo["ok"] is True and gloo["processes"] == 2
    assert gloo["latency_ms"] > 0 and gloo["busbw_GBps"] > 0


def test_doctor_text_output_without_collectives(capsys):
    assert main(["doctor", "--no-collectives"]) == 0
    out = capsys.readouterr().out
    assert "torch" in out and "backends and their engines:" in out and "rollout hf" in out and "devices:" in out


def _registry_with_placements(*cards):
    """The installed registry, its placement cards replaced by ``cards`` (a callable to patch get_registry with)."""
    import attrs
    from rl_core.plugins import get_registry

    base = get_registry()
    registry = attrs.evolve(base, cards={**base.cards, "placement": {c.name: c for c in cards}})
    return lambda **_: registry


def test_cluster_mode_absent_is_a_clear_message(monkeypatch, capsys):
    from rl_core.placement import LOCAL

    # no placement card with a cluster check installed (rl-placement-ray absent): the local card has none
    monkeypatch.setattr("rl_core.plugins.get_registry", _registry_with_placements(LOCAL))
    assert main(["doctor", "--cluster"]) == 1
    err = capsys.readouterr().err
    assert "pip install rl-placement-ray" in err and "Traceback" not in err


def test_cluster_mode_hands_over_to_the_placement_cards_doctor(monkeypatch):
    from rl_core.cards import PlacementCard

    seen = {}
    card = PlacementCard(name="elsewhere", factory="rl_core.placement:local_placement", doctor=lambda args: seen.setdefault("address", args.address) and 0)
    monkeypatch.setattr("rl_core.plugins.get_registry", _registry_with_placements(card))
    assert main(["doctor", "--cluster", "--address", "10.0.0.1:6379"]) == 0
    assert seen == {"address": "10.0.0.1:6379"}


@pytest.mark.parametrize("bad", ["0", "-2"])
def test_bad_nprocs(bad, capsys):
    assert main(["doctor", "--nprocs", bad]) == 1
    assert "--nprocs must be >= 1" in capsys.readouterr().err


def _fails_on_rank_1(rank, world):
    import os

    if rank == 1:
        raise ValueError("boom on rank 1")
    if world == 3 and rank == 2:
        os._exit(3)
    import time

    time.sleep(600)  # rank 0 hangs: stopped 2 s after another rank failed, not waited for
    return rank


@pytest.mark.dist
def test_local_group_names_the_failing_and_dead_ranks_and_stops_the_rest():
    """The doctor's runner (rl_doctor.local_group): a rank that raises or dies is named; nothing hangs."""
    import time

    from rl_doctor.local_group import LocalGroupError, run_on_local_group

    start = time.monotonic()
    with pytest.raises(LocalGroupError) as err:
        run_on_local_group(_fails_on_rank_1, 3, timeout=120.0)
    text = str(err.value)
    assert "3 rank(s) failed" in text and "--- rank 1 ---" in text and "ValueError: boom on rank 1" in text
    assert "exit code 3" in text and "stopped after another rank failed" in text
    assert time.monotonic() - start < 90  # not the 120 s timeout
    with pytest.raises(ValueError, match="world_size must be >= 1"):
        run_on_local_group(_fails_on_rank_1, 0)


def test_the_command_is_rl_doctors_card_and_names_its_install_when_missing(monkeypatch, capsys):
    from rl_core.plugins import Registry, get_registry

    assert get_registry().cards["command"]["doctor"].provider.distribution == "rl-doctor"
    monkeypatch.setattr("rl_core.plugins.get_registry", lambda **kw: Registry())  # rl-doctor not installed
    assert main(["doctor", "--cluster", "--json"]) == 1
    err = capsys.readouterr().err
    assert "`rlcore doctor` comes with the distribution rl-doctor, which is not installed: pip install rl-doctor" in err
    assert "Traceback" not in err
