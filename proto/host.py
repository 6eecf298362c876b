"""Identity of this host as both gpud and the shim see it, to tell same-host sessions apart."""

from __future__ import annotations

import functools
import os
import socket
import tempfile

# NOTE [proven locality]: the file a client creates to prove it shares gpud's host (and its /dev/shm)
PROOF_PREFIX = "wooly-proof-"


@functools.cache
def host_id() -> str:
    """Boot id + pid-namespace inode: equal exactly when a pid means the same process on both sides."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = socket.gethostname()
    try:
        ns = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        ns = 0
    return f"{boot}:{ns}"


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def shm_dir() -> str:
    """Where same-host shared memory files live (staging rings, mapped host memory, locality proofs)."""
    return "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
