"""The python tool's sandbox without bubblewrap: namespaces made by ``unshare`` and a small launcher.

:func:`fallback_command` wraps the program in ``unshare -r -m -n -p -f --mount-proc --kill-child`` (a user,
mount, network and PID namespace with its own ``/proc``) and a launcher (:data:`LAUNCHER`, Python run by
the same interpreter) that, inside those namespaces and before the model's code runs:

- makes the whole filesystem read-only (``mount_setattr(AT_RECURSIVE, MOUNT_ATTR_RDONLY)``);
- mounts a private ``tmpfs`` on ``/tmp`` (the working directory) and on ``/dev/shm``, each capped in size
  (``SandboxLimits.tmp_mb``) and in files (``SandboxLimits.max_files``); ``/var/tmp`` and ``/run`` become
  empty read-only mounts (hiding the host's Unix sockets there). The mounts live in the run's mount
  namespace only: they, and every file written in them, are gone when its last process ends;
- installs the seccomp filter of :func:`seccomp_filter` (no ``socket(AF_UNIX, ...)``: a read-only mount does
  not stop ``connect`` to a host's Unix socket elsewhere; abstract sockets are the network namespace's;
  no ``io_uring``, which would bypass the filter);
- drops every capability for good (``setpriv``: empty bounding set, ``noroot`` securebits, no new
  privileges), so the program cannot undo the mounts.

Where any of this fails (no user namespaces, an old kernel, no ``setpriv``), the probe in
:func:`rl_agent.sandbox.containment` says ``"rlimits"`` and the python tool is refused (by ``rlcore check`` and
at the call): there is no sandbox without it.

:func:`set_parent_death_signal` is called in every sandbox start (bwrap too): the first process of a run
gets ``SIGKILL`` when the rl-core thread that started it ends, so no program outlives rl-core, however it ends
(a second Ctrl-C, ``SIGTERM`` to the process group, ``kill -9``).
"""

from __future__ import annotations

import ctypes
import platform
import shutil
import signal
import struct

PR_SET_PDEATHSIG = 1

# seccomp: (audit arch, socket's syscall number) per machine; io_uring_setup is 425 everywhere
_ARCHES = {"x86_64": (0xC000003E, 41), "aarch64": (0xC00000B7, 198)}
_IO_URING_SETUP = 425
_AF_UNIX = 1
_EPERM = 1
_RET_ALLOW, _RET_ERRNO, _RET_KILL = 0x7FFF0000, 0x00050000, 0x80000000


def set_parent_death_signal() -> None:
    """SIGKILL this (forked, not yet exec'd) process when the thread that started it ends (``PR_SET_PDEATHSIG``).

    Called after the process changed its user: a change of credentials clears the setting."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


def seccomp_filter() -> bytes | None:
    """A classic-BPF seccomp program (``struct sock_filter[]``): ``socket(AF_UNIX, ...)`` and ``io_uring_setup``
    fail with EPERM, a system call of another ABI (i386, x32) kills the process, everything else is allowed.
    None on a machine this does not know."""
    known = _ARCHES.get(platform.machine())
    if known is None:
        return None
    arch, nr_socket = known
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    # (code, jump-if-true label, jump-if-false label, k); labels: None = next instruction
    prog: list[tuple[int, str | None, str | None, int]] = [
        (ld, None, None, 4),  # seccomp_data.arch
        (jeq, None, "kill", arch),
        (ld, None, None, 0),  # seccomp_data.nr
    ]
    if platform.machine() == "x86_64":
        prog.append((jge, "kill", None, 0x40000000))  # x32 system calls
    prog += [
        (jeq, "eperm", None, _IO_URING_SETUP),
        (jeq, None, "allow", nr_socket),
        (ld, None, None, 16),  # seccomp_data.args[0], low 32 bits (little-endian)
        (jeq, "eperm", "allow", _AF_UNIX),
    ]
    labels = {"allow": len(prog), "eperm": len(prog) + 1, "kill": len(prog) + 2}
    prog += [(ret, None, None, _RET_ALLOW), (ret, None, None, _RET_ERRNO | _EPERM), (ret, None, None, _RET_KILL)]
    out = b""
    for i, (code, jt, jf, k) in enumerate(prog):
        off = lambda label: 0 if label is None else labels[label] - i - 1  # noqa: E731
        out += struct.pack("<HBBI", code, off(jt), off(jf), k)
    return out


# Run as ``python -I -c LAUNCHER tmp_mb max_files setpriv filter_hex program...`` inside the namespaces (root there).
LAUNCHER = r"""
import ctypes, os, sys
tmp_mb, files, setpriv, prog_hex = sys.argv[1:5]
program = sys.argv[5:]
libc = ctypes.CDLL(None, use_errno=True)
def fail(what):
    err = ctypes.get_errno()
    sys.stderr.write("rl-core sandbox: cannot set up " + what + ": " + os.strerror(err) + "\n")
    os._exit(125)
class MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64), ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]
attr = MountAttr(1, 0, 0, 0)
if libc.syscall(442, -100, b"/", 0x8000, ctypes.byref(attr), ctypes.sizeof(attr)) != 0:
    fail("a read-only filesystem (mount_setattr)")
def tmpfs(where, options, flags=0):
    if os.path.isdir(where) and not os.path.islink(where):
        if libc.mount(b"tmpfs", where.encode(), b"tmpfs", flags, options.encode()) != 0:
            fail("a private " + where)
tmpfs("/tmp", "size=%sm,nr_inodes=%s,mode=1777" % (tmp_mb, files))
tmpfs("/dev/shm", "size=%sm,nr_inodes=%s,mode=1777" % (tmp_mb, files))
for where in ("/var/tmp", "/run"):
    tmpfs(where, "size=4k,nr_inodes=4,mode=755", 1)
os.chdir("/tmp")
if libc.prctl(38, 1, 0, 0, 0) != 0:
    fail("no_new_privs")
code = bytes.fromhex(prog_hex)
class Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]
if libc.prctl(22, 2, ctypes.byref(Prog(len(code) // 8, code)), 0, 0) != 0:
    fail("the seccomp filter")
sys.stdout.flush()
os.execv(setpriv, [setpriv, "--bounding-set=-all", "--inh-caps=-all",
                   "--securebits=+noroot,+noroot_locked,+no_setuid_fixup,+no_setuid_fixup_locked,+keep_caps_locked",
                   "--no-new-privs", "--"] + program)
"""


def fallback_command(python: str, program: list[str], *, tmp_mb: int, max_files: int) -> list[str] | None:
    """The command that runs ``program`` (argv) contained without bubblewrap; None when ``unshare`` or ``setpriv`` is
    missing or this machine has no known seccomp filter."""
    unshare, setpriv = shutil.which("unshare"), shutil.which("setpriv")
    prog = seccomp_filter()
    if not unshare or not setpriv or prog is None:
        return None
    return [unshare, "-r", "-m", "-n", "-p", "-f", "--mount-proc", "--kill-child", python, "-I", "-c", LAUNCHER,
            str(int(tmp_mb)), str(int(max_files)), setpriv, prog.hex(), *program]
