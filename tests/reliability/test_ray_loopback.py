"""The Ray instance a run starts (``trainer.placement=ray``, no ``ray.address``) listens on loopback only.

A real 2-rank `rlcore train` on Ray (its gloo group meets through a FileStore) is read mid-run from
``/proc/net/tcp{,6}``: every TCP socket the controller and every process it started (GCS, raylet, agents,
the workers) listen on; then it gets SIGTERM, which must stop it as locally (tests/reliability/test_signals.py).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from rl_core.placement.listeners import descendants
from rl_core_testing.ray_cluster import NEEDS_RAY, RAY_ENV

from tests.reliability import tally
from tests.reliability.runs import make_run, set_config

NEEDS_PLUGIN = "needs the rl-placement-ray plugin (pip install -e plugins/placement_ray)"


def test_opting_out_of_loopback_is_a_warning():
    exposure_warnings = pytest.importorskip("rl_placement_ray.loopback", reason=NEEDS_PLUGIN).exposure_warnings
    from rl_placement_ray.config import RayConfig
    assert exposure_warnings(RayConfig()) == []
    lines = exposure_warnings(RayConfig(node_ip_address="10.1.2.3", dashboard_host="0.0.0.0"))
    assert len(lines) == 2 and "ray.node_ip_address=10.1.2.3" in lines[0] and "ray.dashboard_host=0.0.0.0" in lines[1]


@pytest.mark.dist
@pytest.mark.parametrize("to_group", [False, True], ids=["controller", "process-group"])
def test_a_ray_run_listens_on_loopback_only_and_stops_on_sigterm(tmp_path, to_group):
    """A 2-rank `rlcore train` with trainer.placement=ray (its own local Ray instance), mid-run: every listening
    socket of the controller and of every process it started is on loopback; then SIGTERM: one line, exit 143,
    the step saved, no Ray process left. ``to_group``: SIGTERM to the run's whole process group, as Slurm's scancel
    sends it (the GCS and raylet used to die under the controller: Ray's "GCS may have been killed" after 60 s)."""
    pytest.importorskip("ray", reason=NEEDS_RAY)
    pytest.importorskip("rl_placement_ray", reason=NEEDS_PLUGIN)
    from rl_placement_ray.listeners import describe, is_loopback, listening_sockets
    pytest.importorskip("rl_train_fsdp", reason="needs the rl-train-fsdp plugin (pip install -e plugins/train_fsdp)")
    if not Path("/proc/net/tcp").exists():
        pytest.skip("reads /proc/net/tcp (Linux)")
    cfg = make_run(tmp_path, nprocs=2)
    set_config(cfg, trainer__total_training_steps=200, trainer__placement="ray", ray__num_cpus=2, ray__cpus_per_worker=0.5)
    temp = tempfile.mkdtemp(prefix="rlray", dir="/tmp")  # short: Ray's socket paths live under it
    env = {**os.environ, **RAY_ENV, "RAY_TMPDIR": temp}
    env.pop("RAY_ADDRESS", None)
    log_path = tmp_path / "run.log"
    with log_path.open("w") as log:
        p = subprocess.Popen([sys.executable, "-m", "rl_core", "train", str(cfg), "--no-progress"], stdout=log, stderr=subprocess.STDOUT, env=env,
                             start_new_session=to_group)
    try:
        deadline = time.monotonic() + 300
        metrics = tmp_path / "out" / "metrics.jsonl"  # a first step logged: Ray and the workers' group are up
        while not (metrics.exists() and metrics.stat().st_size > 0) and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert p.poll() is None, log_path.read_text()[-3000:]
        pids = descendants(p.pid)
        sockets = listening_sockets(pids)
        if to_group:
            os.killpg(p.pid, signal.SIGTERM)  # the run's group: the controller, Ray's processes, the workers
        else:
            p.send_signal(signal.SIGTERM)
        code = p.wait(120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        shutil.rmtree(temp, ignore_errors=True)
    text = log_path.read_text()
    for s in sockets:
        tally.record("ray_loopback", f"{s['process']} port {s['port']}", is_loopback(s["ip"]))
    names = {s["process"] for s in sockets}
    # not vacuous: the GCS, the raylet, and the workers each listen on something
    assert "gcs_server" in names and "raylet" in names and any(n.startswith("ray::RankWorker") for n in names), describe(sockets)
    exposed = [s for s in sockets if not is_loopback(s["ip"])]
    assert not exposed, "listening beyond loopback:\n" + "\n".join(describe(exposed))
    assert "node 127.0.0.1" in text, text[-3000:]

    time.sleep(1)
    left = [pid for pid in pids if pid != p.pid and Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1][:3]]
    ok = code == 143 and "Traceback" not in text and "stopped by SIGTERM after step" in text and "run the same command to resume" in text and not left
    tally.record("signals", f"SIGTERM to the {'process group' if to_group else 'controller'} of a 2-rank Ray run (local instance)", ok)
    assert code == 143 and "Traceback" not in text, text[-3000:]
    assert "stopped by SIGTERM after step" in text and "run the same command to resume" in text, text[-3000:]
    assert not left, f"processes of the run still alive: {left}"
