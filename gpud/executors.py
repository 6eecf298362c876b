"""Per-tenant executor processes for the work gpud cannot check: ATen ops.

NOTE [executors]: a PTX kernel is checked by the JIT (every access against the session's memory), but an
ATen op is vendor code: an unchecked index, an ``unsafe=True`` flag or a bug in a kernel reads or writes
wherever its pointers say. If that happens inside gpud, every tenant's tensors are in reach and a crash takes
everyone down. So each tenant's ATen work runs in an executor process of its own, which holds that tenant's
tensors and nothing else; gpud (the broker) keeps the sockets, sessions, policies, memory accounting and the
scheduler. An op that reads out of bounds reads its own tenant's heap; an executor that crashes (SIGSEGV,
abort, OOM kill) fails that tenant's sessions with a sticky ``CUDA_ERROR_LAUNCH_FAILED`` naming the signal,
is reclaimed like a dead client (its charged memory and dedup pins released), and nobody else notices.

- **Per tenant, not per session.** The isolation boundary is the tenant (quotas and tokens are per tenant),
  and a process per session would multiply torch's per-process cost (thread pools, allocator caches) by the
  sessions a tenant opens. Each session gets a channel of its own into the tenant's executor, served by its
  own thread there, so sessions run side by side as before. The executor goes when its last session does.
- **Forked from a zygote** (gpud/zygote.py) that imported torch once: a fork is milliseconds, a fresh
  interpreter would pay torch's import (seconds) per tenant. The zygote and the executors get gpud's
  environment without secrets (tokens, keys).
- **The hop** (gpud/chan.py): the session's stream worker sends a request and waits for its reply on a unix
  socket; msgpack bodies, bulk data in memfds whose pages the executor adopts as tensor storage (one copy, as
  before), dedup'd weights as the store's own memfds mapped copy-on-write (shared across tenants as before).
- **Memory**: the broker grants memory from the tenant's quota with each request (``_PREGRANT``) and on
  request mid-way; the reply returns what no tensor used. So quotas hold exactly at rest, an op that would
  pass the quota fails alone with OUT_OF_MEMORY, and the kernel bounds the executor's heap (RLIMIT_DATA,
  NOTE [executor memory limit]) so an op cannot take far more before it is charged.
- **Runaway ops**: a request that outlives the tenant's ``max_kernel_s`` kills the executor
  (``CUDA_ERROR_LAUNCH_TIMEOUT``, sticky for the tenant's sessions).
- ``[aten] executors = false`` runs ATen in gpud as before (one trusted tenant); ``permit_unsafe = true`` lets
  executors run ops as sent where gpud would refuse them or switch their checks on (``unsafe=True``, the
  unchecked index and sparse constructors), which with executors can hurt only the tenant that sends them.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import threading
from typing import Any

from gpud import chan, log
from gpud.errors import CudaError, codes
from gpud.zygote import TIMEOUT_EXIT

_PREGRANT = 4 << 20  # granted with each request, returned unused with its reply
_HEADROOM = 1 << 30  # an executor's heap may pass its tenant's quota by this much (op temporaries)
_READY_S = 120.0  # the zygote's torch import
_CONFINE_S = 10.0  # a forked executor's report of its sandbox (milliseconds of prctl/landlock/seccomp)
_SECRET = re.compile(r"TOKEN|SECRET|PASSWORD|_KEY$|^WOOLY_SERVER_KEY$", re.IGNORECASE)
_MAX_ERRORS = 16


def _scrubbed_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not _SECRET.search(k)}
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join([p for p in (here, env.get("PYTHONPATH", "")) if p])
    return env


class Zygote:
    """gpud's handle on its zygote process: started at the first executor, asked to fork and reap."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sock: chan.Conn | None = None
        self.proc: subprocess.Popen[bytes] | None = None

    def _ensure(self) -> chan.Conn:
        if self.sock is not None and self.proc is not None and self.proc.poll() is None:
            return self.sock
        self._drop()
        ours, theirs = chan.pair()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gpud.zygote", str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                env=_scrubbed_env(),
                stdin=subprocess.DEVNULL,
                close_fds=True,
            )
        finally:
            theirs.close()
        ours.settimeout(_READY_S)
        try:
            msg, fds = ours.recv()
            chan._close_all(fds)
        except (OSError, chan.ChannelClosed) as exc:
            ours.close()
            self._drop()
            raise CudaError(codes.NOT_SUPPORTED, f"aten ops: gpud's executor zygote did not start ({exc})") from None
        ours.settimeout(None)
        if not (isinstance(msg, list) and msg and msg[0] == "ready"):
            ours.close()
            raise CudaError(codes.NOT_SUPPORTED, "aten ops: gpud's executor zygote did not start")
        self.sock = ours
        log.event("executors.zygote", pid=self.proc.pid, torch=str(msg[2])[:40])
        return ours

    def _drop(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.proc is not None:
            try:
                self.proc.kill()
                self.proc.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                pass
            self.proc = None

    def _ask(self, msg: list[Any], fds: list[int] = ()) -> list[Any]:  # type: ignore[assignment]
        sock = self._ensure()
        try:
            sock.send(msg, fds)
            reply, rfds = sock.recv()
            chan._close_all(rfds)
        except (OSError, chan.ChannelClosed) as exc:
            self._drop()
            raise CudaError(codes.LAUNCH_FAILED, f"gpud's executor zygote failed: {exc}") from None
        if not isinstance(reply, list) or len(reply) < 2:
            self._drop()
            raise CudaError(codes.LAUNCH_FAILED, "gpud's executor zygote answered out of turn")
        return reply

    def fork(
        self, tenant: str, limit: int, device: str, permit_unsafe: bool, max_op_s: float, sandbox: bool
    ) -> tuple[int, chan.Conn]:
        ours, theirs = chan.pair()
        try:
            with self.lock:
                reply = self._ask(["fork", tenant, limit, device, permit_unsafe, max_op_s, sandbox], [theirs.fileno()])
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        if reply[0] != "pid" or type(reply[1]) is not int:
            ours.close()
            raise CudaError(codes.LAUNCH_FAILED, f"gpud's executor zygote could not fork: {str(reply)[:200]}")
        return reply[1], ours

    def reap(self, pid: int, grace_s: float) -> int | None:
        with self.lock:
            if self.sock is None:
                return None
            try:
                reply = self._ask(["reap", pid, grace_s])
            except CudaError:
                return None
        return reply[2] if len(reply) > 2 and type(reply[2]) is int else None

    def close(self) -> None:
        with self.lock:
            self._drop()


def _exit_words(code: int | None) -> str:
    if code is None:
        return "its exit status is unknown"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


class TenantExecutor:
    """One tenant's executor process and the channels of its sessions."""

    def __init__(self, owner: Executors, tenant: str, pid: int, ctl: chan.Conn) -> None:
        self.owner = owner
        self.tenant = tenant
        self.pid = pid
        self.ctl = ctl
        self.channels: set[Channel] = set()
        self.lock = threading.Lock()
        self.failure: CudaError | None = None
        self.sandbox: list[str] = []  # what confines the process (NOTE [executor sandbox])

    def open(self, session: Any) -> Channel:
        ours, theirs = chan.pair()
        try:
            with self.lock:
                if self.failure is not None:
                    raise self.failure
                self.ctl.send(["open"], [theirs.fileno()])
                ch = Channel(self, session, ours)
                self.channels.add(ch)
        except OSError as exc:
            ours.close()
            raise self.fail(f"cannot reach it ({exc})") from None
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        return ch

    def fail(self, why: str = "") -> CudaError:
        """The executor is dead or must die: make sure of it, learn how it ended, fail every session of the
        tenant (sticky: their tensors are gone) and give back what they held."""
        with self.lock:
            if self.failure is not None:
                return self.failure
            self.ctl.close()  # an executor still alive reads end-of-file and exits
            status = self.owner.zygote.reap(self.pid, 0.5)
            if status == TIMEOUT_EXIT:
                code, ended = codes.LAUNCH_TIMEOUT, "was stopped: an op ran longer than the tenant's max_kernel_s"
            else:
                code, ended = codes.LAUNCH_FAILED, (f"{why}; " if why else "") + _exit_words(status)
            self.failure = CudaError(
                code,
                f"the ATen executor of tenant {self.tenant!r} (pid {self.pid}) {ended}; "
                "this session's tensors are lost (NOTE [executors])",
            )
            channels = list(self.channels)
        log.event("executors.failed", tenant=self.tenant, pid=self.pid, why=self.failure.message[:200])
        self.owner.forget(self)
        for ch in channels:
            ch.session.record_error(self.failure)
            ch.reclaim()
        return self.failure

    def closed(self, ch: Channel) -> None:
        with self.lock:
            self.channels.discard(ch)
            last = not self.channels and self.failure is None
        if last and self.owner.forget(self, only_if_idle=True):
            self.ctl.close()  # the executor reads end-of-file and exits
            threading.Thread(target=self.owner.zygote.reap, args=(self.pid, 2.0), daemon=True).start()


class Channel:
    """One session's line to its tenant's executor; only the session's stream worker uses it (one request at a
    time). ``charged`` is what the tenant is charged for this session's tensors: it is released when the
    session closes or the executor dies, whatever the executor says."""

    def __init__(self, executor: TenantExecutor, session: Any, sock: chan.Conn) -> None:
        self.executor = executor
        self.session = session
        self.sock = sock
        self.charged = 0
        self.dedup: dict[int, Any] = {}  # token -> what to release when that storage dies
        self.next_token = 1
        self.lock = threading.Lock()
        self.done = False

    # -------------------------------------------------------------- accounting
    def _grant(self, want: int, need: int = 0) -> int:
        hv = self.session.server.hv
        for n in (want, need) if need else (want,):
            try:
                hv.reserve(self.session, n)
            except CudaError as exc:
                err = exc
                continue
            self.charged += n
            return n
        if need:
            raise err
        return 0

    def _settle(self, acct: Any) -> None:
        if not isinstance(acct, dict):
            raise chan.ChannelClosed("reply without its accounting")
        release = acct.get("release")
        if type(release) is not int or release < 0:
            raise chan.ChannelClosed("bad release figure")
        release = min(release, self.charged)  # an executor cannot give back more than it was given
        if release:
            self.charged -= release
            self.session.server.hv.release(self.session, release)
        for token in acct.get("drops") or []:
            done = self.dedup.pop(token, None) if type(token) is int else None
            if done is not None:
                done()
        errors = acct.get("errors") or []
        for e in errors[:_MAX_ERRORS] if isinstance(errors, list) else []:
            if isinstance(e, list) and len(e) == 2 and type(e[0]) is int and isinstance(e[1], str):
                self.session.record_error(CudaError(e[0], e[1][:4000]))

    # -------------------------------------------------------------- requests
    def request(self, msg: list[Any], fds: list[int] = ()) -> tuple[list[Any], list[int]]:  # type: ignore[assignment]
        """Send ``msg`` (with a pre-grant appended) and wait for its reply, granting memory meanwhile."""
        ex = self.executor
        if ex.failure is not None:
            raise ex.failure
        if self.done:
            raise CudaError(codes.INVALID_CONTEXT, "the session's executor channel is closed")
        try:
            grant = self._grant(_PREGRANT)
            self.sock.send([*msg, grant], fds)
            while True:
                reply, rfds = self.sock.recv()
                if isinstance(reply, list) and len(reply) == 3 and reply[0] == "reserve":
                    chan._close_all(rfds)
                    want, need = reply[1], reply[2]
                    if type(want) is not int or type(need) is not int or not 0 < need <= want:
                        raise chan.ChannelClosed("bad reserve request")
                    try:
                        self.sock.send(["ok", self._grant(want, need)])
                    except CudaError as exc:
                        self.sock.send(["oom", exc.message])
                    continue
                break
            if not isinstance(reply, list) or not reply or not isinstance(reply[0], str):
                chan._close_all(rfds)
                raise chan.ChannelClosed("malformed reply")
            self._settle(reply[-1])
            return reply, rfds
        except (OSError, chan.ChannelClosed) as exc:
            gone = isinstance(exc, chan.ChannelClosed) and "closed" in str(exc) or isinstance(exc, ConnectionError)
            raise ex.fail("" if gone else f"broke its channel ({exc})") from None

    def close(self) -> None:
        """The session ends: its tensors go (in the executor) and its charges with them (here)."""
        if self.done:
            return
        if self.executor.failure is None:
            try:
                reply, fds = self.request(["close"])
                chan._close_all(fds)
            except CudaError:
                pass
        self.reclaim()
        self.executor.closed(self)

    def reclaim(self) -> None:
        with self.lock:
            if self.done:
                return
            self.done = True
        self.sock.close()
        if self.charged:
            self.session.server.hv.release(self.session, self.charged)
            self.charged = 0
        for done in list(self.dedup.values()):
            done()
        self.dedup.clear()


class Executors:
    """The tenants' executor processes of one gpud (``server.executors``)."""

    def __init__(self, hv: Any) -> None:
        self.hv = hv
        self.zygote = Zygote()
        self.lock = threading.Lock()
        self.by_tenant: dict[str, TenantExecutor] = {}

    @property
    def enabled(self) -> bool:
        return self.hv.config.aten.executors

    def channel(self, session: Any, device: str) -> Channel:
        tenant = session.info.tenant
        with self.lock:
            ex = self.by_tenant.get(tenant)
            if ex is None or ex.failure is not None:
                policy = self.hv.config.policy(tenant)
                quota = policy.quota_bytes(session.backend.total_memory)
                limit = quota + _HEADROOM
                aten = self.hv.config.aten
                pid, ctl = self.zygote.fork(
                    tenant, limit, device, aten.permit_unsafe, policy.max_kernel_s, aten.sandbox
                )
                ex = self.by_tenant[tenant] = TenantExecutor(self, tenant, pid, ctl)
                ex.sandbox = self._confinement(ex)
            return ex.open(session)

    def _confinement(self, ex: TenantExecutor) -> list[str]:
        """Read the executor's first word (NOTE [executor sandbox]): what confines it, logged once; a layer the
        kernel lacks is a warning, an executor that cannot say is failed before it serves anything."""
        try:
            ex.ctl.settimeout(_CONFINE_S)  # the executors' lock is held: a silent executor must not stall them all
            msg, fds = ex.ctl.recv()
            chan._close_all(fds)
        except (chan.ChannelClosed, OSError) as exc:  # socket.timeout is an OSError
            raise ex.fail(f"it did not say how it is confined ({exc or 'timed out'})") from None
        finally:
            if ex.failure is None:
                ex.ctl.settimeout(None)
        ok = isinstance(msg, list) and len(msg) == 3 and msg[0] == "sandbox"
        if not ok or not all(isinstance(x, list) and all(isinstance(w, str) for w in x) for x in msg[1:]):
            raise ex.fail("it answered out of turn instead of saying how it is confined")
        layers, missing = [str(w)[:120] for w in msg[1][:8]], [str(w)[:200] for w in msg[2][:8]]
        log.event(
            "executors.start",
            logging.WARNING if missing else logging.INFO,
            tenant=ex.tenant,
            pid=ex.pid,
            sandbox=", ".join(layers) or "none",
            **({"not_confined": "; ".join(missing)} if missing else {}),
        )
        return layers

    def forget(self, ex: TenantExecutor, only_if_idle: bool = False) -> bool:
        with self.lock:
            if self.by_tenant.get(ex.tenant) is not ex:
                return False
            if only_if_idle and ex.channels:
                return False
            del self.by_tenant[ex.tenant]
            return True

    def pids(self) -> dict[str, int]:
        with self.lock:
            return {t: ex.pid for t, ex in self.by_tenant.items()}

    def confinement(self) -> dict[str, list[str]]:
        """Each live executor's sandbox layers (NOTE [executor sandbox]), by tenant."""
        with self.lock:
            return {t: list(ex.sandbox) for t, ex in self.by_tenant.items()}

    def close(self) -> None:
        with self.lock:
            exs, self.by_tenant = list(self.by_tenant.values()), {}
        for ex in exs:
            ex.ctl.close()
        self.zygote.close()
