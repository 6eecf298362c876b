"""The confinement an executor process enters before it runs a tenant's first op.

NOTE [executor sandbox]: an executor (NOTE [executors] in gpud/executors.py) runs vendor code on a tenant's
behalf. Its own process already keeps a wild read away from other tenants' tensors, but an op bug that
gives the tenant *code execution* would run as gpud's user, with everything that user can reach: gpud's
configuration (tenant tokens), the user's files, the network, and the other tenants' executors (same uid:
ptrace, ``/proc/PID/mem``, signals). So the executor, freshly forked and still single-threaded, confines
itself before it reads its first request, in four layers, each one useful alone:

1. **No capabilities, not dumpable, no core files, no new privileges**: a gpud running as root gives its
   executors uid 0 without any capability (nothing overrides file permissions or ptrace checks); a process
   of the same uid can no longer ptrace an executor or open its ``/proc/PID/mem`` (what protects one
   tenant's executor from another's on any kernel); a crash writes no core file holding tenant data, and
   nothing it executes could gain privileges. gpud marks itself not dumpable too (``protect_daemon``), so
   its own memory and ``/proc/PID/environ`` (tokens, keys) are out of an executor's reach.
2. **Landlock scopes** (kernel ABI >= 6): it cannot signal or ptrace a process outside its own domain
   (gpud, the zygote, the other executors: each executor's domain is its own), nor connect to an abstract
   unix socket outside it.
3. **Landlock file-system rules** (ABI >= 1, the CPU device): reading only beneath the directories its code
   was loaded from (the interpreter's prefix, the import roots of the modules it has loaded: stdlib,
   site-packages, gpud's own tree), ``/usr`` and the system library directories, ``/sys``, its own
   ``/proc/PID`` and a few machine-wide ``/proc`` files (no other process's), the user database, and a few
   device files; writing only in a scratch directory of its own (its ``TMPDIR``, 0700, removed when it ends). gpud's configuration, its keys and the user's home are out of
   reach unless the code itself was installed there. The memfds the broker passes are not opened by path,
   so they work as before. Where the kernel also handles TCP (ABI >= 4) binding and connecting are refused.
   On a GPU device the file-system layer is left off for now: a GPU runtime opens device nodes, driver
   files and caches of its own, and that list has not been checked on a device (NOTE in docs/security.md).
4. **A seccomp filter** refusing (EPERM) the system calls an executor never needs and an attacker would:
   running programs (``execve``), other processes' memory (``ptrace``, ``process_vm_readv``,
   ``pidfd_getfd``, ``kcmp``), new sockets (``socket``, ``connect``, ``bind``...: its channels exist
   before it starts), namespaces and mounts, kernel modules and kexec, eBPF, perf, keyrings,
   ``userfaultfd`` and io_uring (whose work would bypass the filter), file handles that skip path checks.
   A call from another ABI (i386 or x32 on x86-64) kills the process: its numbers are not the ones listed.
   On a GPU device ``socket`` and ``connect`` stay allowed: the GPU runtime reaches daemons of its own (MPS)
   over unix sockets; Landlock still refuses TCP there.

``enter()`` returns what it applied; a layer the kernel lacks is reported (gpud logs it once per executor),
never silently skipped. ``[aten] sandbox = false`` turns the whole thing off (debugging an executor with a
debugger needs it off).
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import resource
import shutil
import struct
import sys
import tempfile
from dataclasses import dataclass, field

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.restype = ctypes.c_int

PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_CAP_VERSION_3 = 0x20080522
SECCOMP_MODE_FILTER = 2

# Landlock (include/uapi/linux/landlock.h); the three system calls have one number on every architecture.
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
_FS_ALL_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1, 5: (1 << 16) - 1}
_FS_FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | (1 << 14) | (1 << 15)  # + truncate, ioctl_dev
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1

# seccomp: the system calls refused, per architecture (numbers from the kernel's uapi headers).
_DENIED = (
    "execve execveat ptrace process_vm_readv process_vm_writev pidfd_getfd pidfd_open kcmp "
    "socket connect bind listen accept accept4 "
    "mount umount2 pivot_root chroot setns unshare open_tree move_mount fsopen fsconfig fsmount mount_setattr "
    "kexec_load kexec_file_load init_module finit_module delete_module bpf perf_event_open "
    "keyctl add_key request_key userfaultfd io_uring_setup io_uring_enter io_uring_register "
    "personality reboot swapon swapoff acct quotactl open_by_handle_at name_to_handle_at fanotify_init "
    "syslog vhangup settimeofday clock_settime adjtimex"
).split()
_X86_64 = dict(
    execve=59, execveat=322, ptrace=101, process_vm_readv=310, process_vm_writev=311, pidfd_getfd=438,
    pidfd_open=434, kcmp=312, socket=41, connect=42, bind=49, listen=50, accept=43, accept4=288, mount=165,
    umount2=166, pivot_root=155, chroot=161, setns=308, unshare=272, open_tree=428, move_mount=429, fsopen=430,
    fsconfig=431, fsmount=432, mount_setattr=442, kexec_load=246, kexec_file_load=320, init_module=175,
    finit_module=313, delete_module=176, bpf=321, perf_event_open=298, keyctl=250, add_key=248,
    request_key=249, userfaultfd=323, io_uring_setup=425, io_uring_enter=426, io_uring_register=427,
    personality=135, reboot=169, swapon=167, swapoff=168, acct=163, quotactl=179, open_by_handle_at=304,
    name_to_handle_at=303, fanotify_init=300, syslog=103, vhangup=153, settimeofday=164, clock_settime=227,
    adjtimex=159,
)  # fmt: skip
_AARCH64 = dict(
    execve=221, execveat=281, ptrace=117, process_vm_readv=270, process_vm_writev=271, pidfd_getfd=438,
    pidfd_open=434, kcmp=272, socket=198, connect=203, bind=200, listen=201, accept=202, accept4=242, mount=40,
    umount2=39, pivot_root=41, chroot=51, setns=268, unshare=97, open_tree=428, move_mount=429, fsopen=430,
    fsconfig=431, fsmount=432, mount_setattr=442, kexec_load=104, kexec_file_load=294, init_module=105,
    finit_module=273, delete_module=106, bpf=280, perf_event_open=241, keyctl=219, add_key=217,
    request_key=218, userfaultfd=282, io_uring_setup=425, io_uring_enter=426, io_uring_register=427,
    personality=92, reboot=142, swapon=224, swapoff=225, acct=89, quotactl=60, open_by_handle_at=265,
    name_to_handle_at=264, fanotify_init=262, syslog=116, vhangup=58, settimeofday=170, clock_settime=112,
    adjtimex=171,
)  # fmt: skip
# machine -> (AUDIT_ARCH_*, syscall table, bit marking a foreign ABI's numbers or 0)
_ARCHES = {"x86_64": (0xC000003E, _X86_64, 0x40000000), "aarch64": (0xC00000B7, _AARCH64, 0)}

# Where an executor may read: system directories beside its own code (see the NOTE).
_SYSTEM_READ = (
    "/usr", "/lib", "/lib64", "/lib32", "/sys",
    # the loader's cache, the time zone, and the user database (getpwuid: torch's cache directories ask who
    # runs them); /etc/shadow and the rest of /etc stay out of reach
    "/etc/ld.so.cache", "/etc/localtime", "/etc/passwd", "/etc/group", "/etc/nsswitch.conf",
)  # fmt: skip
# /proc: its own entries and the machine-wide files a runtime reads, never another process's directory
_PROC_READ = ("/proc/cpuinfo", "/proc/meminfo", "/proc/stat", "/proc/sys", "/proc/filesystems", "/proc/mounts")
_TMP = tempfile.gettempdir()  # where scratch directories go (read before an executor makes its own the default)
_DEVICES_RW = ("/dev/null", "/dev/zero")
_DEVICES_R = ("/dev/urandom", "/dev/random")


@dataclass
class Applied:
    """What ``enter()`` put in place, and what it could not (each a short reason)."""

    layers: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    def summary(self) -> str:
        out = "sandbox: " + (", ".join(self.layers) or "nothing")
        if self.missing:
            out += "; not applied: " + "; ".join(self.missing)
        return out


def landlock_abi() -> int:
    """The kernel's Landlock ABI version (0: none, or disabled at boot)."""
    r = _libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return int(r) if r > 0 else 0


def read_roots() -> list[str]:
    """Directories an executor reads beneath: the interpreter's prefixes and the import roots of the modules
    loaded so far (a later import of the same packages finds its files there), then the system's."""
    roots: set[str] = set()
    for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))):
        roots.add(os.path.realpath(p))
    entries = sorted({os.path.realpath(p or os.getcwd()) for p in sys.path}, key=len, reverse=True)
    for mod in list(sys.modules.values()):
        f = getattr(mod, "__file__", None)
        if not isinstance(f, str):
            continue
        f = os.path.realpath(f)
        for e in entries:  # the longest import root that holds it: its package tree, not the whole disk
            if f.startswith(e.rstrip("/") + "/"):
                roots.add(e)
                break
    roots.update(p for p in _SYSTEM_READ + _PROC_READ if os.path.exists(p))
    roots.add(f"/proc/{os.getpid()}")  # /proc/self and /proc/thread-self lead here
    return sorted(r for r in roots if r and r != "/" and r != "/proc")


def _add_path(ruleset: int, path: str, access: int) -> bool:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if not os.path.isdir(path):
            access &= _FS_FILE_RIGHTS  # directory rights on a file are EINVAL
        attr = struct.pack("=Qi", access, fd)
        buf = ctypes.create_string_buffer(attr, len(attr))
        return _libc.syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, buf, 0) == 0
    finally:
        os.close(fd)


def _landlock(abi: int, files: bool, applied: Applied, scratch: str = "") -> None:
    handled_fs = _FS_ALL_BY_ABI[min(abi, 5)] if files else 0
    handled_net = (NET_BIND_TCP | NET_CONNECT_TCP) if abi >= 4 else 0
    scoped = (SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL) if abi >= 6 else 0
    if not (handled_fs or handled_net or scoped):
        applied.missing.append(f"landlock ABI {abi} has no scopes (signals and ptrace are not confined)")
        return
    attr = struct.pack("=QQQ", handled_fs, handled_net, scoped)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    buf = ctypes.create_string_buffer(attr, len(attr))
    rs = int(_libc.syscall(_SYS_CREATE_RULESET, buf, ctypes.c_size_t(size), ctypes.c_uint32(0)))
    if rs < 0:
        applied.missing.append(f"landlock ruleset: {os.strerror(ctypes.get_errno())}")
        return
    try:
        if handled_fs:
            read = FS_READ_FILE | FS_READ_DIR | FS_EXECUTE
            for root in read_roots():
                _add_path(rs, root, read & handled_fs)
            if scratch:
                _add_path(rs, scratch, handled_fs & ~FS_EXECUTE)
            for dev in _DEVICES_R:
                _add_path(rs, dev, FS_READ_FILE)
            for dev in _DEVICES_RW:
                _add_path(rs, dev, FS_READ_FILE | FS_WRITE_FILE)
        if _libc.syscall(_SYS_RESTRICT_SELF, rs, 0) != 0:
            applied.missing.append(f"landlock restrict_self: {os.strerror(ctypes.get_errno())}")
            return
    finally:
        os.close(rs)
    if handled_fs:
        applied.layers.append("landlock files (read-only beneath its code and the system's)")
    else:
        applied.missing.append("landlock file rules (off on a GPU device)")
    if handled_net:
        applied.layers.append("landlock tcp")
    if scoped:
        applied.layers.append("landlock scopes (signals, abstract sockets)")
    else:
        applied.missing.append(f"landlock scopes (kernel ABI {abi} < 6: signals not confined)")


# A GPU runtime talks to daemons of its own over unix sockets (MPS's control and server pipes): on a GPU device
# an executor may open client sockets (Landlock still refuses TCP, and abstract sockets outside its domain).
_GPU_ALLOWED = frozenset({"socket", "connect"})


def seccomp_program(machine: str | None = None, gpu: bool = False) -> bytes:
    """The BPF filter for ``machine`` (default: this one): EPERM for the denied calls, kill for a foreign ABI."""
    arch, table, foreign = _ARCHES[machine or platform.machine()]
    ins: list[bytes] = []

    def op(code: int, k: int, jt: int = 0, jf: int = 0) -> None:
        ins.append(struct.pack("=HBBI", code, jt, jf, k))

    ld_w_abs, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    kill, allow, eperm = 0x80000000, 0x7FFF0000, 0x00050000 | errno.EPERM
    nrs = sorted({table[n] for n in _DENIED if not (gpu and n in _GPU_ALLOWED)})
    op(ld_w_abs, 4)  # seccomp_data.arch
    op(jeq, arch, 1, 0)
    op(ret, kill)
    op(ld_w_abs, 0)  # seccomp_data.nr
    if foreign:
        op(jge, foreign, 0, 1)
        op(ret, kill)
    for i, nr in enumerate(nrs):  # a match jumps to the EPERM at the end
        op(jeq, nr, len(nrs) - i, 0)
    op(ret, allow)
    op(ret, eperm)
    return b"".join(ins)


def _seccomp(applied: Applied, gpu: bool = False) -> None:
    machine = platform.machine()
    if machine not in _ARCHES:
        applied.missing.append(f"seccomp (no system call table for {machine})")
        return
    prog = seccomp_program(machine, gpu)
    filt = ctypes.create_string_buffer(prog, len(prog))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(prog) // 8, ctypes.addressof(filt))
    if _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        applied.missing.append(f"seccomp: {os.strerror(ctypes.get_errno())}")
        return
    refused = sum(1 for n in _DENIED if not (gpu and n in _GPU_ALLOWED))
    applied.layers.append(f"seccomp ({refused} calls refused)")


def _drop_capabilities() -> bool:
    """Give up every capability (bounding, ambient, effective, permitted, inheritable): an executor of a gpud
    running as root keeps uid 0's file ownership but loses what overrides permissions and ptrace checks."""
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last = int(f.read())
    except (OSError, ValueError):
        last = 63
    for cap in range(last + 1):
        _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # EPERM without CAP_SETPCAP: then there is none to drop
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = struct.pack("=Ii", _CAP_VERSION_3, 0)
    data = bytes(24)  # two {effective, permitted, inheritable} words, all zero
    return _libc.capset(ctypes.c_char_p(header), ctypes.c_char_p(data)) == 0


def protect_daemon() -> bool:
    """Mark gpud itself not dumpable: a process of its uid without CAP_SYS_PTRACE (an executor, a tenant's
    program on the same host) can no longer read its memory or ``/proc/PID/environ`` (tokens, keys)."""
    return _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0


def scratch_dir(pid: int) -> str:
    """The one directory an executor may write (its ``TMPDIR``: torch's caches ask for a temporary directory);
    private to it (0700), removed by the zygote when the executor has ended."""
    return os.path.join(_TMP, f"wooly-x-{pid}")


def enter(device: str = "cpu") -> Applied:
    """Confine this process (single-threaded: Landlock and seccomp bind the calling thread and its future
    threads). ``device`` is the executor's torch device: on a GPU the file-system rules stay off."""
    applied = Applied()
    if _drop_capabilities():
        applied.layers.append("no capabilities")
    else:
        applied.missing.append(f"capset: {os.strerror(ctypes.get_errno())}")
    ok = _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 and ok:
        applied.layers.append("not dumpable, no new privileges")
    else:
        applied.missing.append(f"prctl: {os.strerror(ctypes.get_errno())}")
        return applied  # Landlock and seccomp both need no_new_privs
    abi = landlock_abi()
    scratch = scratch_dir(os.getpid())
    try:
        shutil.rmtree(scratch, ignore_errors=True)  # a dead executor's, of the same pid
        os.mkdir(scratch, 0o700)
        os.environ["TMPDIR"] = scratch
        tempfile.tempdir = scratch
    except OSError as exc:
        applied.missing.append(f"scratch directory {scratch}: {exc.strerror}")
        scratch = ""
    if abi:
        _landlock(abi, files=device == "cpu", applied=applied, scratch=scratch)
    else:
        applied.missing.append("landlock (the kernel has none, or it is disabled)")
    _seccomp(applied, gpu=device != "cpu")
    return applied
