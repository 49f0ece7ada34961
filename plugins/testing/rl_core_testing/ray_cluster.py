"""A real two-node Ray cluster on this machine: rl-placement-ray's tests (plugins/placement_ray/tests) and the
reliability and engine tests that run on Ray share it.

The head is ``ray start --head --num-cpus=1`` and the second node joins it with
``ray start --address=HEAD --num-cpus=1``; each node has one CPU and a custom
resource of its own, both started with ``--node-ip-address=127.0.0.1`` (Ray 2.60 may still register
the machine's own address, e.g. 192.0.2.2 here: the tests read the address each node registered, never
assume loopback; a run's own Ray instance binds loopback, tests/reliability/test_ray_loopback.py).
Both run with ``--block`` as children
of the test session, so stopping them (SIGTERM, by process id) takes down the
Ray processes each one started and nothing else on the machine. Token
authentication is disabled for these local clusters (Ray 2.60 turns it on by
default; see ENVIRONMENT.md).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NEEDS_RAY = "needs Ray (pip install 'ray==2.60.*'): the tests start a real two-node cluster"
RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive_nodes(address: str, env: dict) -> int:
    code = (
        "import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR');"
        "print(sum(1 for n in ray.nodes() if n['Alive']))"
    )
    out = subprocess.run([sys.executable, "-c", code, address], capture_output=True, text=True, env=env, timeout=60)
    return int(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 and out.stdout.strip() else 0


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


class TwoNodeCluster:
    def __init__(self, root: Path, pythonpath: tuple[Path, ...] = ()) -> None:
        """``pythonpath``: folders the nodes' workers import from besides the installed packages (a test module
        whose top-level functions a test sends to the workers: they are pickled by reference)."""
        self.root = root
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.env = {**os.environ, **RAY_ENV, "PYTHONUNBUFFERED": "1"}
        if pythonpath:
            self.env["PYTHONPATH"] = os.pathsep.join([*map(str, pythonpath), *filter(None, [os.environ.get("PYTHONPATH")])])
        ray_bin = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
        # a private temp dir (short: Ray's socket paths live under it): the head records its address there,
        # not in /tmp/ray where a later bare `ray.init()` elsewhere on the machine would find it
        self.temp_dir = tempfile.mkdtemp(prefix="rlray", dir="/tmp")
        common = ["--block", "--num-cpus=1", "--node-ip-address=127.0.0.1", "--disable-usage-stats", f"--temp-dir={self.temp_dir}"]
        self.head_log = root / "head.log"
        self.node_log = root / "node.log"
        self.head = subprocess.Popen(
            [ray_bin, "start", "--head", f"--port={self.port}", "--include-dashboard=false", '--resources={"rlcore_test_head": 1}', *common],
            stdout=self.head_log.open("w"), stderr=subprocess.STDOUT, env=self.env,
        )
        self.node = None
        try:
            self._wait_for(1, self.head)
            self.node = subprocess.Popen(
                [ray_bin, "start", f"--address={self.address}", '--resources={"rlcore_test_node": 1}', *common],
                stdout=self.node_log.open("w"), stderr=subprocess.STDOUT, env=self.env,
            )
            self._wait_for(2, self.node)
        except BaseException:
            self.stop()
            raise

    def _wait_for(self, n: int, proc: subprocess.Popen) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"ray start exited with {proc.returncode}:\n{self.head_log.read_text()}\n{self.node_log.read_text() if self.node_log.exists() else ''}")
            if _alive_nodes(self.address, self.env) >= n:
                return
            time.sleep(1)
        raise RuntimeError(f"the Ray cluster did not reach {n} node(s) within 120 s")

    def stop(self) -> None:
        for proc in (self.node, self.head):
            if proc is not None:
                _stop(proc)
        shutil.rmtree(self.temp_dir, ignore_errors=True)
