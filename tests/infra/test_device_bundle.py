"""bench/device_bundle.py: any prefix of the parts installs exactly the segments it covers; a broken part is refused.

Data-only segments (no pip), parts of ~1 KB, the install folders under a scratch DEV_TMP; two short subprocesses."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "device_bundle.py"


def _run(*args, tmp: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "DEV_TMP": str(tmp / "dev_tmp")}
    return subprocess.run([sys.executable, str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=120)


def test_a_prefix_of_parts_installs_the_segments_it_covers_and_a_broken_part_is_refused(tmp_path):
    src = tmp_path / "src"
    files = {"m/config.json": os.urandom(700), "m/tokenizer.json": b'{"vocab": 1}' * 100, "d/rows.bin": os.urandom(2500),
             "w/big.bin": os.urandom(3000)}
    for name, data in files.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_bytes(data)
    listing = tmp_path / "list.txt"
    listing.write_text("base data m/config.json\nbase data m/tokenizer.json\nmid data d/rows.bin\nlast data w/big.bin\n")
    built = _run("build", "--list", str(listing), "--gpu-dir", str(src), "--out", str(tmp_path / "out"), "--part-mib", "0.001", tmp=tmp_path)
    assert built.returncode == 0, built.stdout + built.stderr
    folders = sorted((tmp_path / "out").glob("dv[0-9][0-9]"))
    assert len(folders) >= 4, built.stdout
    parts = tmp_path / "dev_tmp" / "parts" / "dv"
    parts.mkdir(parents=True)

    def carry(k: int) -> None:  # what bench/device_setup.sh's dev_part does with .gpu/dvNN
        for f in folders[k].iterdir():
            shutil.copy(f, parts / f.name)

    index = json.loads((folders[0] / "INDEX.json").read_text())
    mid = next(s for s in index["segments"] if s["name"] == "mid")
    for k in range(mid["last_part"]):  # every part but the one that completes "mid"
        carry(k)
    first = _run("install", tmp=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    data = tmp_path / "dev_tmp" / "dev" / "data"
    assert (data / "m/config.json").read_bytes() == files["m/config.json"]
    assert (data / "m/tokenizer.json").read_bytes() == files["m/tokenizer.json"]
    assert not (data / "d").exists()
    assert f"segment mid: waits for part {mid['last_part']:02d} (carry dv{mid['last_part']:02d} next" in first.stdout

    for k in range(mid["last_part"], len(folders)):
        carry(k)
    last = parts / f"part-{len(folders) - 1:02d}"
    good = last.read_bytes()
    last.write_bytes(bytes([good[0] ^ 1]) + good[1:])  # one flipped bit in the last segment's bytes
    broken = _run("install", tmp=tmp_path)
    assert broken.returncode != 0 and "segment last: sha256 differs" in broken.stdout + broken.stderr
    assert "segment base: installed earlier" in broken.stdout
    assert (data / "d/rows.bin").read_bytes() == files["d/rows.bin"]  # mid arrived whole before the broken part
    last.write_bytes(good)
    done = _run("install", tmp=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (data / "w/big.bin").read_bytes() == files["w/big.bin"]
