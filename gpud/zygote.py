"""The zygote and the executor processes it forks (NOTE [executors] in gpud/executors.py).

``python -m gpud.zygote FD`` imports torch and the ATen executor once, then waits on FD (a unix socket to
gpud) for requests: ``fork`` makes one executor process for a tenant, ``reap`` collects one's exit status.
It never starts a thread, so forking it is safe; a fork costs milliseconds, where a fresh interpreter would
pay torch's import (seconds) for every tenant.

An executor process serves its tenant's sessions: its control socket brings one channel per session, each
served by a thread of its own running an ``aten_exec.Executor``. A request (an ATen batch, a call, a dedup'd
tensor) is answered by one reply; in between the executor may ask the broker for memory (``reserve``), which
the tenant's quota decides. When gpud goes away every socket reads end-of-file and the executor exits.
"""

from __future__ import annotations

import ctypes
import os
import resource
import shutil
import signal
import socket
import sys
import threading
import time
import weakref
from typing import Any

from gpud import chan

_forked: set[int] = set()  # executors not reaped yet
_GRANT_STEP = 4 << 20  # memory asked of the broker at a time, so small tensors do not each cost a round trip


def _set_name(name: str) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME: what ps and top show
    except (OSError, AttributeError):
        pass


# ---------------------------------------------------------------- the zygote
def zygote_main(fd: int) -> None:
    sock = chan.Conn(socket.socket(fileno=fd))
    _set_name("wooly-zygote")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # gpud's terminal's ^C is gpud's to handle
    import torch
    import torch._decomp  # noqa: F401 - NOTE [decomposed ops]

    import gpud.aten_exec  # noqa: F401 - preloaded for every executor
    import gpud.aten_portable  # noqa: F401
    from gpud.sandbox import protect_daemon, scratch_dir

    protect_daemon()  # NOTE [executor sandbox]: no process of gpud's uid reads the zygote (or what it forks)
    sock.send(["ready", os.getpid(), torch.__version__])
    while True:
        try:
            msg, fds = sock.recv()
        except (chan.ChannelClosed, OSError):
            for pid in _forked:  # their scratch directories (a confined executor cannot remove its own)
                shutil.rmtree(scratch_dir(pid), ignore_errors=True)
            os._exit(0)
        op = msg[0] if isinstance(msg, list) and msg else None
        if op == "fork" and len(fds) == 1:
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    sock.close()
                    executor_main(
                        fds[0], str(msg[1]), int(msg[2]), str(msg[3]), bool(msg[4]), float(msg[5]), bool(msg[6])
                    )
                except BaseException:  # noqa: BLE001 - the executor's last word goes to gpud's log
                    import traceback

                    traceback.print_exc()
                    code = 1
                finally:
                    os._exit(code)
            os.close(fds[0])
            _forked.add(pid)
            sock.send(["pid", pid])
        elif op == "reap":
            chan._close_all(fds)
            sock.send(["status", msg[1], _reap(int(msg[1]), float(msg[2]))])
        else:
            chan._close_all(fds)
            sock.send(["error", f"unknown zygote request {str(op)[:40]}"])


def _reap(pid: int, grace_s: float) -> int:
    """The executor's exit code (negative: the signal that ended it), killing it after ``grace_s``; its scratch
    directory (NOTE [executor sandbox]) goes with it."""
    try:
        return _wait(pid, grace_s)
    finally:
        from gpud.sandbox import scratch_dir

        shutil.rmtree(scratch_dir(pid), ignore_errors=True)
        _forked.discard(pid)


def _wait(pid: int, grace_s: float) -> int:
    deadline = time.monotonic() + grace_s
    while True:
        try:
            got, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return 0
        if got:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() >= deadline:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _, status = os.waitpid(pid, 0)
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.005)


# ---------------------------------------------------------------- an executor process
TIMEOUT_EXIT = 124  # the executor's exit status when its watchdog stopped an op (gpud: CUDA_ERROR_LAUNCH_TIMEOUT)
_live: list[Any] = []  # this process's executors (one per session), for the watchdog


def executor_main(
    fd: int, tenant: str, limit: int, device: str, permit_unsafe: bool, max_op_s: float, sandbox: bool = True
) -> None:
    _set_name(f"wooly-x:{tenant}")
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if limit > 0:
        # NOTE [executor memory limit]: what ATen allocates is charged to the tenant only once the op has made
        # it; the kernel's limit on this process's data bounds what an op can take before that (the
        # allocation-before-accounting hole of an in-process executor).
        base = _data_bytes()
        want = base + limit
        _, hard = resource.getrlimit(resource.RLIMIT_DATA)
        if hard != resource.RLIM_INFINITY:
            want = min(want, hard)
        resource.setrlimit(resource.RLIMIT_DATA, (want, hard))
    ctl = chan.Conn(socket.socket(fileno=fd))
    # NOTE [executor sandbox] (gpud/sandbox.py): confined while still one thread, before any request is read;
    # the first word on the control socket tells gpud what holds
    if sandbox:
        from gpud import sandbox as sb

        applied = sb.enter(device)
        ctl.send(["sandbox", applied.layers, applied.missing])
    else:
        ctl.send(["sandbox", [], ["turned off ([aten] sandbox = false)"]])
    if max_op_s > 0:
        threading.Thread(target=_watchdog, args=(max_op_s,), name="wooly-x-watchdog", daemon=True).start()
    while True:
        try:
            msg, fds = ctl.recv()
        except (chan.ChannelClosed, OSError):
            os._exit(0)  # gpud closed our control socket, or died: the sessions' threads go with us
        if isinstance(msg, list) and msg and msg[0] == "open" and len(fds) == 1:
            threading.Thread(
                target=_serve, args=(fds[0], device, permit_unsafe), name="wooly-x-session", daemon=True
            ).start()
        else:
            chan._close_all(fds)


def _watchdog(max_op_s: float) -> None:
    """The tenant's ``max_kernel_s`` for ATen ops: an op that runs longer ends this process (an op cannot be
    stopped half way; its tenant's sessions fail with CUDA_ERROR_LAUNCH_TIMEOUT, nobody else notices)."""
    period = min(0.05, max_op_s / 4)
    while True:
        time.sleep(period)
        now = time.monotonic()
        for ex in list(_live):
            started = ex.op_started
            if started and now - started > max_op_s:
                sys.stderr.write(
                    f"wooly executor {os.getpid()}: an ATen op ran {now - started:.1f} s, over "
                    f"max_kernel_s={max_op_s:g} s; stopping\n"
                )
                os._exit(TIMEOUT_EXIT)


def _data_bytes() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


class ChannelHost:
    """``aten_exec.Host`` over a channel: memory is granted by the broker, errors ride back with each reply."""

    def __init__(self, sock: chan.Conn) -> None:
        self.sock = sock
        self.grant = 0  # bytes the broker charged to the tenant that no storage uses yet
        self.errors: list[list[Any]] = []
        self.drops: list[int] = []  # dedup'd storages that died (their chunks go back to the store)
        self.lock = threading.Lock()  # drops are appended by finalisers, on any thread

    def charge(self, nbytes: int) -> None:
        from gpud.errors import CudaError, codes

        if nbytes > self.grant:
            need = nbytes - self.grant
            self.sock.send(["reserve", max(need, _GRANT_STEP), need])
            reply, fds = self.sock.recv()
            chan._close_all(fds)
            if not isinstance(reply, list) or len(reply) != 2:
                raise chan.ChannelClosed("malformed reserve reply")
            if reply[0] != "ok":
                raise CudaError(codes.OUT_OF_MEMORY, str(reply[1]))
            self.grant += int(reply[1])
            if nbytes > self.grant:
                raise CudaError(codes.OUT_OF_MEMORY, f"gpud granted {reply[1]} of {need} bytes")
        self.grant -= nbytes

    def uncharge(self, nbytes: int) -> None:
        self.grant += nbytes

    def record_error(self, exc: Any) -> None:
        if len(self.errors) < 16:
            self.errors.append([exc.code, exc.message])

    def settle(self) -> dict[str, Any]:
        """What the reply to a request carries back: memory not in use, errors, dead dedup'd storages."""
        with self.lock:
            drops, self.drops = self.drops, []
        out = {"release": self.grant, "errors": self.errors, "drops": drops}
        self.grant, self.errors = 0, []
        return out

    def dropped(self, token: int) -> None:
        with self.lock:
            self.drops.append(token)


def _serve(fd: int, device: str, permit_unsafe: bool) -> None:
    from gpud.aten_exec import Executor
    from gpud.errors import CudaError, codes

    sock = chan.Conn(socket.socket(fileno=fd))
    host = ChannelHost(sock)
    ex = Executor(host, device, permit_unsafe=permit_unsafe)
    _live.append(ex)
    try:
        while True:
            try:
                msg, fds = sock.recv()
            except (chan.ChannelClosed, OSError):
                return
            try:
                reply, out_fds = _handle(ex, host, msg, fds)
            except CudaError as exc:
                reply, out_fds = ["error", exc.code, exc.message, host.settle()], []
            except chan.ChannelClosed:
                return
            except Exception as exc:  # noqa: BLE001 - a request this executor cannot read
                reply, out_fds = (
                    ["error", codes.INVALID_VALUE, f"executor: {type(exc).__name__}: {exc}"[:2000], host.settle()],
                    [],
                )
            finally:
                chan._close_all(fds)
            try:
                sock.send(reply, out_fds)
            finally:
                chan._close_all(out_fds)
            if reply[0] == "closed":
                return
    finally:
        _live.remove(ex)
        try:
            ex.close()
        except Exception:  # noqa: BLE001 - the session is gone either way
            pass
        sock.close()


def _handle(ex: Any, host: ChannelHost, msg: Any, fds: list[int]) -> tuple[list[Any], list[int]]:
    from gpud.errors import CudaError, codes

    if not isinstance(msg, list) or not msg:
        raise CudaError(codes.INVALID_VALUE, "malformed executor request")
    op = msg[0]
    if op == "batch":
        _, ops, descs, grant = msg
        host.grant += grant
        ex.run_batch(ops, chan.unpack_bulk(descs, fds, set()), 0)
        return ["done", host.settle()], []
    if op == "call":
        _, call, descs, grant = msg
        host.grant += grant
        value, bulk = ex.run_call(call, chan.unpack_bulk(descs, fds, set()), 0)
        out_fds: list[int] = []
        packed = chan.pack_bulk(bulk, out_fds, seal=True)
        return ["value", value, packed, host.settle()], out_fds
    if op == "dedup":
        _, token, handle, dtype, shape, size, plan, grant = msg
        host.grant += grant
        _build_dedup(ex, host, token, handle, dtype, shape, size, plan, fds)
        return ["done", host.settle()], []
    if op == "close":
        ex.close()
        return ["closed", host.settle()], []
    raise CudaError(codes.INVALID_VALUE, f"unknown executor request {str(op)[:40]}")


def _build_dedup(
    ex: Any,
    host: ChannelHost,
    token: int,
    handle: int,
    dtype: str,
    shape: list[int],
    size: int,
    plan: list[list[int]],
    fds: list[int],
) -> None:
    """A tensor over a fresh region whose chunks map memfds ``MAP_PRIVATE`` (NOTE [tensor dedup]): the store's
    chunks, and one-off memfds for chunks gpud would not store. ``token`` names the region to the broker when it
    dies."""
    import mmap

    import torch

    from gpud import vmem
    from gpud.aten_exec import dtype_of

    region = mmap.mmap(-1, vmem.page_round(size), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    base = torch.frombuffer(region, dtype=torch.uint8, count=size) if size else torch.empty(0, dtype=torch.uint8)
    addr = base.data_ptr()
    for off, length, k in plan:
        if not (0 <= k < len(fds) and 0 <= off and off + length <= size and off % vmem.PAGE == 0):
            raise ValueError("malformed dedup plan")
        vmem.map_shared_private(addr + off, fds[k], length)
    t = base.view(dtype_of(dtype)).reshape(list(shape))
    ex.store(handle, t)
    weakref.finalize(region, host.dropped, token)


if __name__ == "__main__":
    zygote_main(int(sys.argv[1]))
