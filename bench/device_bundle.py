"""Everything the next device session carries, as ONE stream of segments split into equal parts (one part per call).

The GPU machine has no package registry and takes at most 64 MiB of working tree per call (the repository's
tracked files included: ~9 MiB in session 9). Its /tmp persists only while the machine stays warm (~30 s after a
call) and each machine goes back after 30 minutes held, so every machine is carried to from scratch. This file
builds the stream here and installs it there:

    python bench/device_bundle.py build                    # here: .gpu/dv00/ .gpu/dv01/ ... (+ .gpu/bundle/)
    python bench/device_bundle.py install                  # there: every segment whose bytes have all arrived

Segments, in stream order (bench/device_bundle.txt lists every file of each, with the folder it installs into):

- ``base``    (~10 MB, xz): the small wheels rl-core and TRL need (tensordict 0.15.3, peft, hydra, TRL, datasets,
  gguf, ...), the reference model folders (tokenizer only; random weights) and the GSM8K prompts;
- ``vllm``    (~365 MB): vLLM 0.26.0's closure for the image (torch 2.11 cu130, Python 3.12);
- ``sglang``  (~617 MiB): SGLang 0.5.17's closure for the image (sglang-kernel 0.4.5 for CUDA 13; its own folder,
  ``sgl`` -> /tmp/site_sgl, since its pins differ from vLLM's); ``build --segments base sglang`` for a machine that
  runs only SGLang;
- ``verl``    (~96 MB): verl 0.9.1, Ray 2.60, the transformers verl pins (its own folder), tensordict 0.10;
- ``smollm2`` (~93 MB): the SmolLM2-135M wheel (the agent_calculator example's model).

A part holds the stream's bytes [k * P, (k + 1) * P) and a copy of INDEX.json (each segment's offset, size and
sha256), so ANY prefix of parts installs the segments it covers: the first part alone gives ``base`` (rl-core's hf
rows and TRL can run), the parts up to the end of ``vllm`` add the vLLM rows (TRL + rl-core's LoRA anchor), and so on; ``install`` says which part
it needs next. Wheels are installed with ``pip --no-index --no-deps`` into a staging folder, then merged into their
group's folder (``site`` -> /tmp/site, ``rl`` -> /tmp/site_rl, ``verl`` -> /tmp/site_verl, ``tf59`` -> /tmp/site_tf59:
bench/verl/run_verl_gpu.sh's layout; ``sgl`` -> /tmp/site_sgl); ``data`` files go to /tmp/dev/data (bench/device_setup.sh links them as .gpu/).

Compression, measured (session 9, this 2-core machine): the wheels are zip files already; xz of vLLM's largest
library UNzipped (_vllm_fa2_C.abi3.so, 304.7 MB, 129.5 MB as zipped in the wheel) gives 85.2 MB (zstd -19: 80.3 MB)
but took 2 min 46 s of both cores for that one file, and the device would have to re-zip or unpack ~2 GB before
pip: about 1 part (~6 s of device time) saved per 45 MB, for minutes of device-side unpacking. So only ``base``
(tokenizer JSON: compresses 5x) is xz'd; the wheel segments are plain tar.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import lzma
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIST = Path(__file__).resolve().parent / "device_bundle.txt"
# where things go on the device machine; DEV_TMP (default /tmp) moves all of it (the CPU smoke uses a folder of its own)
TMP = os.environ.get("DEV_TMP", "/tmp")
GROUP_DIRS = {"site": f"{TMP}/site", "rl": f"{TMP}/site_rl", "verl": f"{TMP}/site_verl", "tf59": f"{TMP}/site_tf59",
              "sgl": f"{TMP}/site_sgl"}
DATA_DIR = f"{TMP}/dev/data"
STATE_DIR = f"{TMP}/dev/installed"
MIB = 2**20
#: folders under --gpu-dir searched for each listed file, in this order (then --gpu-dir itself: the data files)
SOURCES = ("wheels", "vllm/wheels", "sglang/wheels", "verl/wheels", "dl", "qs", "trl", "whl")


def read_list(path: Path = LIST) -> list[tuple[str, str, str, str]]:
    """(segment, group, name in the bundle, source) per line of ``SEGMENT GROUP NAME [SOURCE]`` (# comments).

    ``SEGMENT GROUP @FILE`` includes a wheel list (a path relative to the repository): its lines are ``WHEEL`` (in GROUP)
    or ``GROUP WHEEL`` (bench/verl/wheels-verl-0.9.1.txt's form, GROUP from the file)."""
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) not in (3, 4):
            raise SystemExit(f"{path}:{n}: expected 'SEGMENT GROUP NAME [SOURCE]', got {line!r}")
        seg, group, name = parts[:3]
        if name.startswith("@"):
            for m, inc in enumerate((ROOT / name[1:]).read_text().splitlines(), 1):
                inc = inc.split("#", 1)[0].split()
                if not inc:
                    continue
                if len(inc) not in (1, 2):
                    raise SystemExit(f"{name[1:]}:{m}: expected 'WHEEL' or 'GROUP WHEEL'")
                rows.append((seg, inc[0] if len(inc) == 2 else group, inc[-1], inc[-1]))
            continue
        rows.append((seg, group, name, parts[3] if len(parts) == 4 else name))
    for seg, group, name, _ in rows:
        if group != "data" and group not in GROUP_DIRS:
            raise SystemExit(f"{path}: {seg} {name}: group {group!r} is none of {', '.join([*GROUP_DIRS, 'data'])}")
    return rows


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(8 * MIB), b""):
            h.update(block)
    return h.hexdigest()


# ----------------------------------------------------------------------------------------------------- build (here)
def find(source: str, search: list[Path]) -> Path:
    """A file by its name (a file name, or a path like qwen05b-gpt2/config.json) in the first of ``search`` that has it."""
    for d in search:
        if (d / source).is_file():
            return d / source
    raise SystemExit(f"build: {source} is in none of: {', '.join(map(str, search))} (how each set is fetched: bench/device_bundle.txt)")


def build(args) -> int:
    rows = read_list(Path(args.list))
    gpu = Path(args.gpu_dir) if Path(args.gpu_dir).is_absolute() else ROOT / args.gpu_dir
    search = [gpu / d for d in SOURCES] + [gpu]
    out = Path(args.out) if Path(args.out).is_absolute() else ROOT / args.out
    work = out / "bundle"
    work.mkdir(parents=True, exist_ok=True)
    order = list(dict.fromkeys(seg for seg, *_ in rows))
    if args.segments:
        unknown = set(args.segments) - set(order)
        if unknown:
            raise SystemExit(f"build: no segment {sorted(unknown)} in {args.list} (it has {', '.join(order)})")
        order = [s for s in order if s in args.segments]
    seen: dict[tuple[str, str], str] = {}
    index = {"part_bytes": int(args.part_mib * MIB), "built": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "segments": []}
    offset = 0
    for seg in order:
        members = []
        for s, group, name, source in rows:
            if s != seg:
                continue
            if (group, name) in seen:  # the same file for the same folder in an earlier segment: carried once
                print(f"  {seg}: {group} {name} already in segment {seen[group, name]}, skipped")
                continue
            seen[group, name] = seg
            members.append((group, name, find(source, search)))
        xz = seg == "base"
        path = work / f"{seg}.tar{'.xz' if xz else ''}"
        manifest = "".join(f"{g} {n}\n" for g, n, _ in members).encode()
        with tarfile.open(path, "w:xz" if xz else "w", format=tarfile.PAX_FORMAT, **({"preset": 6} if xz else {})) as tar:
            info = tarfile.TarInfo("MANIFEST")
            info.size, info.mtime = len(manifest), 0
            tar.addfile(info, io.BytesIO(manifest))
            for group, name, src in members:
                tar.add(src, arcname=f"{group}/{name}", recursive=False)
        size = path.stat().st_size
        index["segments"].append({"name": seg, "file": path.name, "offset": offset, "size": size, "sha256": sha256(path),
                                  "files": len(members), "raw_bytes": sum(src.stat().st_size for *_, src in members)})
        print(f"segment {seg}: {len(members)} files, {size / MIB:.1f} MiB at offset {offset / MIB:.1f} MiB")
        offset += size
    # the parts: the concatenated segments cut every part_bytes, each with INDEX.json
    for old in out.glob("dv[0-9][0-9]"):
        shutil.rmtree(old)
    nparts = -(-offset // index["part_bytes"])
    index["parts"] = nparts
    index["total_bytes"] = offset
    for seg in index["segments"]:
        seg["last_part"] = (seg["offset"] + seg["size"] - 1) // index["part_bytes"]
    blob = json.dumps(index, indent=1)
    segfiles = [work / s["file"] for s in index["segments"]]
    stream = _Stream(segfiles)
    for k in range(nparts):
        d = out / f"dv{k:02d}"
        d.mkdir()
        with open(d / f"part-{k:02d}", "wb") as f:
            stream.copy_to(f, index["part_bytes"])
        (d / "INDEX.json").write_text(blob)
    (work / "INDEX.json").write_text(blob)
    if not args.keep_segments:
        for f in segfiles:
            f.unlink()
    print(f"{nparts} parts of {args.part_mib} MiB: {out}/dv00 .. dv{nparts - 1:02d} ({offset / MIB:.1f} MiB in all)")
    for seg in index["segments"]:
        print(f"  {seg['name']:8s} complete after part {seg['last_part']:02d} (carry dv00 .. dv{seg['last_part']:02d})")
    return 0


class _Stream:
    """Sequential reads over several files as one byte stream."""

    def __init__(self, files: list[Path]):
        self.files, self.i, self.f = list(files), 0, None

    def copy_to(self, dst, n: int) -> None:
        while n > 0 and self.i < len(self.files):
            if self.f is None:
                self.f = open(self.files[self.i], "rb")
            block = self.f.read(min(n, 8 * MIB))
            if not block:
                self.f.close()
                self.f, self.i = None, self.i + 1
                continue
            dst.write(block)
            n -= len(block)


# -------------------------------------------------------------------------------------------------- install (there)
def arrived(parts_dir: Path) -> tuple[dict | None, int, list[int]]:
    """(INDEX, bytes of the stream present from its start, part numbers present)."""
    idx = next(iter(sorted(parts_dir.glob("INDEX*.json"))), None)
    index = json.loads(idx.read_text()) if idx else None
    have = sorted(int(p.name.split("-")[1]) for p in parts_dir.glob("part-[0-9][0-9]"))
    if index is None:
        return None, 0, have
    contiguous = 0
    for k in range(index["parts"]):
        p = parts_dir / f"part-{k:02d}"
        if not p.exists():
            break
        want = min(index["part_bytes"], index["total_bytes"] - k * index["part_bytes"])
        if p.stat().st_size != want:
            print(f"install: {p} has {p.stat().st_size} bytes, the index says {want} (a broken copy: carry dv{k:02d} again)")
            break
        contiguous += want
    return index, contiguous, have


def extract_segment(parts_dir: Path, index: dict, seg: dict, dest: Path) -> Path:
    """The segment's bytes, from the parts that hold them, into ``dest``; checked against its sha256."""
    pb, start, left = index["part_bytes"], seg["offset"], seg["size"]
    h = hashlib.sha256()
    with open(dest, "wb") as out:
        while left:
            k, within = divmod(start, pb)
            with open(parts_dir / f"part-{k:02d}", "rb") as f:
                f.seek(within)
                block = f.read(min(left, pb - within))
            out.write(block)
            h.update(block)
            start += len(block)
            left -= len(block)
    if h.hexdigest() != seg["sha256"]:
        dest.unlink()
        raise SystemExit(f"install: segment {seg['name']}: sha256 differs from INDEX.json (parts from two builds?)")
    return dest


def merge(stage: Path, target: Path) -> None:
    """Move what pip put in ``stage`` into ``target``: new top-level entries are renamed in (no copy), folders that
    exist are merged (pip --target --upgrade would replace whole top-level folders, bin/ or a namespace package, that
    wheels of an earlier segment also wrote to), files replaced."""
    for entry in stage.iterdir():
        dst = target / entry.name
        if not dst.exists() and not dst.is_symlink():
            os.rename(entry, dst)
        elif entry.is_dir() and not entry.is_symlink() and dst.is_dir():
            shutil.copytree(entry, dst, dirs_exist_ok=True, symlinks=True)
        else:
            shutil.rmtree(dst) if dst.is_dir() and not dst.is_symlink() else dst.unlink()
            os.rename(entry, dst)


def install_segment(tar_path: Path, name: str, pip_quiet: bool = True) -> None:
    work = Path(tempfile.mkdtemp(prefix=f"seg-{name}-", dir=TMP))
    try:
        with tarfile.open(tar_path) as tar:
            tar.extractall(work, filter="data")
        groups: dict[str, list[str]] = {}
        for line in (work / "MANIFEST").read_text().splitlines():
            g, n = line.split()
            groups.setdefault(g, []).append(n)
        for group, names in groups.items():
            if group == "data":
                for n in names:
                    dst = Path(DATA_DIR) / n
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(work / group / n, dst)
                continue
            stage = work / f"target-{group}"
            cmd = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-index", "--no-deps", "--no-compile",
                   "--no-cache-dir", "--target", str(stage), *[str(work / group / n) for n in names]]
            if pip_quiet:
                cmd.insert(4, "-q")
            subprocess.run(cmd, check=True)
            target = Path(GROUP_DIRS[group])
            target.mkdir(parents=True, exist_ok=True)
            merge(stage, target)
            print(f"  {name}: {len(names)} {'file' if group == 'data' else 'wheel'}(s) -> {target}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def install(args) -> int:
    parts_dir = Path(args.parts)
    index, got, have = arrived(parts_dir)
    if index is None:
        print(f"install: no INDEX.json in {parts_dir} (no dvNN part was carried yet)")
        return 1
    state = Path(STATE_DIR)
    state.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    for seg in index["segments"]:
        done = state / f"{seg['name']}.{seg['sha256'][:12]}"
        if done.exists():
            print(f"segment {seg['name']}: installed earlier")
            continue
        if seg["offset"] + seg["size"] > got:
            print(f"segment {seg['name']}: waits for part {seg['last_part']:02d} (carry dv{got // index['part_bytes']:02d} next; "
                  f"parts here: {' '.join(f'{k:02d}' for k in have) or 'none'})")
            continue
        tmp = Path(TMP) / "dev" / seg["file"]
        start = time.time()
        extract_segment(parts_dir, index, seg, tmp)
        install_segment(tmp, seg["name"])
        tmp.unlink()
        done.touch()
        print(f"segment {seg['name']}: installed in {time.time() - start:.1f} s")
    if args.drop_parts:  # parts wholly inside installed segments are no longer needed
        done_bytes = max((s["offset"] + s["size"] for s in index["segments"]
                          if (state / f"{s['name']}.{s['sha256'][:12]}").exists()), default=0)
        for k in range(done_bytes // index["part_bytes"]):
            (parts_dir / f"part-{k:02d}").unlink(missing_ok=True)
    print(f"install: {time.time() - t0:.1f} s")
    return 0


def verify(args) -> int:
    """Here, before a device session: the staged .gpu/dvNN folders hold every part, each the size INDEX.json says,
    and every segment's bytes across them match its sha256; prints each call's carry size with the repository's."""
    gpu = Path(args.gpu_dir) if Path(args.gpu_dir).is_absolute() else ROOT / args.gpu_dir
    folders = sorted(gpu.glob("dv[0-9][0-9]"))
    if not folders:
        print(f"verify: no dvNN folder in {gpu} (python bench/device_bundle.py build)")
        return 1
    index = json.loads((folders[0] / "INDEX.json").read_text())
    flat = Path(tempfile.mkdtemp(prefix="dv-verify-"))
    try:
        for d in folders:
            for f in d.glob("part-*"):
                os.symlink(f.resolve(), flat / f.name)
        (flat / "INDEX.json").write_text(json.dumps(index))
        _, got, have = arrived(flat)
        if got != index["total_bytes"]:
            print(f"verify: {got} of {index['total_bytes']} bytes present (parts: {have})")
            return 1
        for seg in index["segments"]:
            h = hashlib.sha256()
            pb, start, left = index["part_bytes"], seg["offset"], seg["size"]
            while left:
                k, within = divmod(start, pb)
                with open(flat / f"part-{k:02d}", "rb") as f:
                    f.seek(within)
                    block = f.read(min(left, pb - within, 8 * MIB))
                h.update(block)
                start += len(block)
                left -= len(block)
            ok = h.hexdigest() == seg["sha256"]
            print(f"segment {seg['name']:8s} {seg['size'] / MIB:7.1f} MiB, parts {seg['offset'] // pb:02d}-{seg['last_part']:02d}: "
                  f"{'sha256 ok' if ok else 'SHA256 DIFFERS'}")
            if not ok:
                return 1
    finally:
        shutil.rmtree(flat)
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    repo = sum((ROOT / f.decode()).stat().st_size for f in tracked if f and (ROOT / f.decode()).is_file())
    biggest = max(sum(f.stat().st_size for f in d.iterdir()) for d in folders)
    total = repo + biggest
    print(f"repository (tracked files) {repo / MIB:.2f} MiB + largest part folder {biggest / MIB:.2f} MiB = {total / MIB:.2f} MiB a call "
          f"({'fits' if total <= 63 * MIB else 'DOES NOT FIT'}: the limit is 64 MiB, checked against 63 to keep 1 MiB spare)")
    return 0 if total <= 63 * MIB else 1


def status(args) -> int:
    index, got, have = arrived(Path(args.parts))
    state = Path(STATE_DIR)
    for seg in (index or {}).get("segments", []):
        ok = (state / f"{seg['name']}.{seg['sha256'][:12]}").exists()
        print(f"{seg['name']:8s} {'installed' if ok else 'complete' if seg['offset'] + seg['size'] <= got else 'incomplete'}")
    print(f"parts here: {' '.join(f'{k:02d}' for k in have) or 'none'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="here: the segments and the parts under --out")
    b.add_argument("--list", default=str(LIST))
    b.add_argument("--out", default=".gpu")
    b.add_argument("--part-mib", type=float, default=50, help="bytes per part, MiB (64 MiB a call, the repository's ~9 MiB included)")
    b.add_argument("--keep-segments", action="store_true", help="keep .gpu/bundle/<segment>.tar (the parts hold the same bytes)")
    b.add_argument("--segments", nargs="*", help="only these segments (default: all, in the list's order)")
    b.add_argument("--gpu-dir", default=".gpu", help="where the downloaded sets are (SOURCES below it, then itself for the data files)")
    i = sub.add_parser("install", help="there: install every complete segment not installed yet")
    i.add_argument("--parts", default=f"{TMP}/parts/dv")
    i.add_argument("--drop-parts", action="store_true", help="delete parts wholly inside installed segments (disk)")
    v = sub.add_parser("verify", help="here: the staged parts are complete and match INDEX.json; a call's size fits")
    v.add_argument("--gpu-dir", default=".gpu")
    s = sub.add_parser("status")
    s.add_argument("--parts", default=f"{TMP}/parts/dv")
    args = ap.parse_args(argv)
    return {"build": build, "install": install, "status": status, "verify": verify}[args.cmd](args)


if __name__ == "__main__":
    raise SystemExit(main())
