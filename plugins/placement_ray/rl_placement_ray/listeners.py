"""Which processes listen on which TCP addresses: the evidence for "binds loopback only" (``rlcore doctor --cluster``,
the loopback tests). Read from Linux's ``/proc`` (``/proc/net/tcp{,6}`` sockets by inode, ``/proc/<pid>/fd`` links);
:func:`listening_sockets` says ``None`` where it cannot tell (macOS, Windows) instead of guessing.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Iterable

_LISTEN = "0A"  # TCP state code of a listening socket in /proc/net/tcp*


def _hex_to_ip(text: str) -> str:
    raw = bytes.fromhex(text)
    if len(raw) == 4:
        return str(ipaddress.IPv4Address(raw[::-1]))
    # /proc prints an IPv6 address as four 32-bit words, each in host (little-endian) order
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    addr = ipaddress.IPv6Address(words)
    return f"::ffff:{addr.ipv4_mapped}" if addr.ipv4_mapped is not None else str(addr)


def _listening_inodes(proc: Path) -> dict[int, tuple[str, int]]:
    out: dict[int, tuple[str, int]] = {}
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if len(parts) < 10 or parts[3] != _LISTEN:
                continue
            host, port = parts[1].split(":")
            out[int(parts[9])] = (_hex_to_ip(host), int(port, 16))
    return out


def _socket_inodes(proc: Path, pid: int) -> set[int]:
    inodes: set[int] = set()
    try:
        fds = list((proc / str(pid) / "fd").iterdir())
    except OSError:
        return inodes
    for fd in fds:
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def process_name(pid: int, proc: Path = Path("/proc")) -> str:
    """What ``ps`` shows for ``pid``, short: ``raylet``, ``ray::RankWorker``, ``python monitor.py``."""
    try:
        argv = [a.decode(errors="replace").strip() for a in (proc / str(pid) / "cmdline").read_bytes().split(b"\0") if a.strip()]
    except OSError:
        return "?"
    if not argv:
        return "?"
    first = argv[0].split()[0]  # Ray rewrites a worker's argv into one padded string
    name = first.rsplit("/", 1)[-1]
    if name.startswith("python") and len(argv) > 1:
        script = next((a for a in argv[1:] if not a.startswith("-")), "")
        return f"{name} {script.rsplit('/', 1)[-1]}".strip()
    return name


def listening_sockets(pids: Iterable[int], proc: Path = Path("/proc")) -> list[dict] | None:
    """``[{pid, process, ip, port}]`` for every TCP socket those processes listen on; None off Linux."""
    if not (proc / "net" / "tcp").exists():
        return None
    listening = _listening_inodes(proc)
    out = []
    for pid in sorted(set(pids)):
        for inode in _socket_inodes(proc, pid):
            if inode in listening:
                ip, port = listening[inode]
                out.append({"pid": pid, "process": process_name(pid, proc), "ip": ip, "port": port})
    return sorted(out, key=lambda s: (s["pid"], s["port"]))


def is_loopback(ip: str) -> bool:
    """127.0.0.0/8, ::1, and IPv4-mapped loopback (``::ffff:127.0.0.1``, how a dual-stack socket shows it)."""
    addr = ipaddress.ip_address(ip)
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.is_loopback


def describe(sockets: list[dict] | None, indent: str = "  ") -> list[str]:
    """One line per listening socket: ``pid 123 raylet 127.0.0.1:40215``, non-loopback ones flagged."""
    if sockets is None:
        return [f"{indent}(cannot tell on this system: no /proc/net/tcp)"]
    lines = []
    for s in sockets:
        ip = f"[{s['ip']}]" if ":" in s["ip"] else s["ip"]
        flag = "" if is_loopback(s["ip"]) else "  <- reachable from the network"
        lines.append(f"{indent}pid {s['pid']} {s['process']} {ip}:{s['port']}{flag}")
    return lines or [f"{indent}(nothing listens)"]
