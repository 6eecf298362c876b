"""Compilation front door for callers: kernel cache (memory + disk) and a warm pool of worker processes."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from jit import disk_cache
from jit.errors import CUDA_ERROR_INVALID_PTX, CUDA_ERROR_INVALID_VALUE, JitError
from jit.worker import read_frame, write_frame
from proto import settings

TRANSLATOR_VERSION = "wooly-jit-2"


def _source_digest() -> str:
    """Hash of the translator's own source (and the PTX libraries it appends, jit/texture_lib.ptx): a changed
    translator never reuses stale cache entries."""
    h = hashlib.sha256(TRANSLATOR_VERSION.encode())
    root = Path(__file__).resolve().parent
    for p in sorted([*root.rglob("*.py"), *root.rglob("*.ptx")]):
        h.update(p.relative_to(root).as_posix().encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


_MEM_CACHE: dict[str, tuple[bytes, dict]] = {}
_MEM_LOCK = threading.Lock()


def _host_id() -> str:
    import llvmlite.binding as llvm

    from jit.passes.optimize import init_llvm

    init_llvm()
    return (
        f"{_source_digest()}|{llvm.llvm_version_info}|{llvm.get_host_cpu_name()}|"
        f"{llvm.get_host_cpu_features().flatten()}"
    )


_HOST: str | None = None


def cache_key(ptx: bytes, target: str) -> str:
    global _HOST
    if _HOST is None:
        _HOST = _host_id()
    h = hashlib.sha256()
    for part in (ptx, target.encode(), TRANSLATOR_VERSION.encode(), _HOST.encode()):
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()


def cache_enabled() -> bool:
    return disk_cache.enabled()


class Worker:
    """One compile worker process; restarted on demand after it dies."""

    def __init__(self, nice: int = 0) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.lock = threading.Lock()
        self.nice = nice

    def _start(self) -> subprocess.Popen[bytes]:
        root = str(Path(__file__).resolve().parent.parent)
        env = dict(os.environ)
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        s = settings.jit()
        # NOTE [bounded compiler] (jit/worker.py): the worker bounds itself, lowers its own priority (no
        # preexec_fn: threads) and dies with us
        limits = {"memory": s.jit_worker_memory, "cpu_s": s.jit_compile_cpu_s, "nice": self.nice, "parent": os.getpid()}
        return subprocess.Popen(
            [sys.executable, "-m", "jit.worker", json.dumps(limits)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd=root,
        )

    def ensure(self) -> subprocess.Popen[bytes]:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        return self.proc

    def compile(self, ptx: bytes, target: str, bounds_check: bool = False, opt: int = 2) -> tuple[bytes, dict]:
        with self.lock:
            p = self.ensure()
            assert p.stdin is not None and p.stdout is not None
            # NOTE [bounded compiler] (jit/worker.py): a worker that does not answer in time is killed
            late = threading.Event()

            def overdue() -> None:
                late.set()
                p.kill()

            timer = threading.Timer(settings.jit().jit_compile_wall_s, overdue)
            timer.daemon = True
            timer.start()
            try:
                write_frame(p.stdin, json.dumps({"target": target, "bounds_check": bounds_check, "opt": opt}).encode())
                write_frame(p.stdin, ptx)
                p.stdin.flush()
                hdr = read_frame(p.stdout)
                payload = read_frame(p.stdout)
            except (BrokenPipeError, OSError):
                hdr = payload = None
            finally:
                timer.cancel()
            if hdr is None or payload is None:
                rc = p.wait()
                self.proc = None
                raise JitError(CUDA_ERROR_INVALID_PTX, _death(rc, late.is_set()))
        reply = json.loads(hdr)
        if not reply["ok"]:
            raise JitError(reply["code"], reply["message"])
        return payload, reply["meta"]

    def close(self) -> None:
        if self.proc is not None:
            try:
                self.proc.stdin.close()  # type: ignore[union-attr]
                self.proc.wait(timeout=2)
            except Exception:
                self.proc.kill()
            self.proc = None


def _death(rc: int, late: bool) -> str:
    """Why a compile worker died, as the error of the compile it was doing (NOTE [bounded compiler])."""
    import signal

    if late:
        return (
            f"compiling this module took longer than {settings.jit().jit_compile_wall_s:g} s "
            "(WOOLY_JIT_COMPILE_WALL_S); the compile was stopped"
        )
    if rc == -signal.SIGXCPU:
        return (
            f"compiling this module needs more than {settings.jit().jit_compile_cpu_s:g} s of CPU "
            "time (WOOLY_JIT_COMPILE_CPU_S); the compile was stopped"
        )
    if rc in (-signal.SIGABRT, -signal.SIGSEGV, -signal.SIGKILL):
        return (
            f"PTX compiler worker died (exit status {rc}): LLVM rejected this module, or it needs more memory "
            "than a compile may use (WOOLY_JIT_WORKER_MEMORY)"
        )
    return f"PTX compiler worker died (exit status {rc}); LLVM rejected this module"


_POOL: list[Worker] = []
_POOL_LOCK = threading.Lock()
_NEXT = [0]


def _worker() -> Worker:
    with _POOL_LOCK:
        if not _POOL:
            n = settings.jit().jit_workers
            _POOL.extend(Worker() for _ in range(n))
        for w in _POOL:  # prefer an idle worker
            if not w.lock.locked():
                return w
        _NEXT[0] = (_NEXT[0] + 1) % len(_POOL)
        return _POOL[_NEXT[0]]


def warm_up() -> None:
    """Start the compile workers now so the first compile does not pay for a Python start, and warm the loader
    (shared MCJIT engine) so the first disk cache hit does not pay LLVM's one-time set-up."""
    w = _worker()
    with w.lock:
        w.ensure()
    if tiers_enabled():
        with _BACKGROUND.worker.lock:
            _BACKGROUND.worker.ensure()
    if cache_enabled():
        cache_key(b"", "cpu")  # computes the host id (translator source digest) once
        disk_cache.max_bytes()
    warm_load_path()


def warm_load_path() -> None:
    """What the first module load of a process would otherwise pay: importing the runtime (kernel and module
    classes) and LLVM's one-time loader set-up (the shared MCJIT engine)."""
    import jit.runtime  # noqa: F401
    from jit.loader import warm_loader

    warm_loader()


def shutdown() -> None:
    with _POOL_LOCK:
        for w in _POOL:
            w.close()
        _POOL.clear()
    _BACKGROUND.close()


def _cached(key: str) -> tuple[bytes, dict] | None:
    with _MEM_LOCK:
        hit = _MEM_CACHE.get(key)
    if hit is not None:
        return hit
    hit = disk_cache.read(key)
    if hit is not None:
        with _MEM_LOCK:
            _MEM_CACHE[key] = hit
    return hit


_ACCT = threading.local()


@contextlib.contextmanager
def accounting(sink: dict[str, float]) -> Any:
    """Count the JIT work this thread does inside the block into ``sink``: ``jit_compiles``, ``jit_cache_hits`` and
    ``jit_compile_s`` (gpud charges them to the tenant whose module load it is)."""
    prev = getattr(_ACCT, "sink", None)
    _ACCT.sink = sink
    try:
        yield sink
    finally:
        _ACCT.sink = prev


def _count(name: str, value: float = 1) -> None:
    sink = getattr(_ACCT, "sink", None)
    if sink is not None:
        sink[name] = sink.get(name, 0) + value


def _timed_compile(ptx: bytes, target: str, bounds_check: bool, **kw: Any) -> Any:
    t0 = time.perf_counter()
    out = _worker().compile(ptx, target, bounds_check, **kw)
    _count("jit_compiles")
    _count("jit_compile_s", time.perf_counter() - t0)
    return out


def compile_object(ptx: bytes, target: str = "cpu", bounds_check: bool = False) -> tuple[bytes, dict, str | None]:
    """(object bytes, metadata, cache key or None when caching is off) for a PTX module, from cache if possible."""
    use_cache = cache_enabled()
    key = cache_key(ptx, target + ("+bounds" if bounds_check else ""))
    if use_cache:
        hit = _cached(key)
        if hit is not None:
            _count("jit_cache_hits")
            return hit[0], hit[1], key
    obj, meta = _timed_compile(ptx, target, bounds_check)
    if use_cache:
        with _MEM_LOCK:
            _MEM_CACHE[key] = (obj, meta)
        disk_cache.store(key, obj, meta)  # NOTE [bounded disk cache]
    return obj, meta, key if use_cache else None


# NOTE [compile tiers]
# A cold CPU compile costs 100-300 ms, three quarters of it in LLVM's O2 pipeline and instruction selection. Like a
# managed runtime we compile twice: compile_module(tier="auto") returns a module running *quick* code at once (the
# same translation less the passes that only add speed (jit/pipeline.py SPEED_ONLY), then only SROA + one
# simplification round and codegen at O0: LLVM's share drops 5-25x; the code runs 1.2-6x slower) and queues the
# optimised compile on a background worker process (niced, one at a time). When it lands, every live module of that
# PTX switches its kernels to the optimised code between launches, and the optimised object goes to the memory and
# disk caches, so the next compile_module of the same PTX, in this process or a restarted one, starts optimised.
# Both tiers agree on everything a client or the module's memory sees (same_layout: parameters, data block,
# shared/local sizes, register counts); a kernel's entry point and the per-launch scratch its code needs switch
# together (a launch reads the kernel's KernelCode once), so a switch changes speed, never results. A module whose
# optimised compile fails keeps its quick code. tier="optimized" waits for the optimised code (what every compile
# did before tiers, and what WOOLY_JIT_TIERS=0 makes "auto" mean); tier="quick" never tiers up (tests, debugging).
# Only CPU modules tier; AMDGPU code objects are always optimised.


def tiers_enabled() -> bool:
    return settings.jit().jit_tiers


class Pending:
    """An optimised compile in flight for one cache key, and the modules waiting to switch to it."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.done = threading.Event()
        self.result: tuple[bytes, dict] | None = None
        self.error: str = ""
        self.lock = threading.Lock()
        self.modules: weakref.WeakSet[Any] = weakref.WeakSet()

    def attach(self, module: Any) -> None:
        """Switch ``module`` (any object with tier_up(obj, meta, key)) to the optimised code when it lands."""
        with self.lock:
            if not self.done.is_set():
                self.modules.add(module)
            elif self.result is not None:
                module.tier_up(*self.result, self.key)

    def finish(self, result: tuple[bytes, dict] | None, error: str = "") -> None:
        """Switch the waiting modules, then wake wait_optimized(): a woken waiter sees its module switched."""
        with self.lock:
            self.result, self.error = result, error
            if result is not None:
                for m in list(self.modules):
                    m.tier_up(*result, self.key)
            self.modules = weakref.WeakSet()
            self.done.set()


class _Background:
    """One daemon thread feeding a niced worker process with optimised compiles, oldest first."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.queue: list[tuple[bytes, str, bool, Pending]] = []
        self.wake = threading.Condition(self.lock)
        self.thread: threading.Thread | None = None
        self.worker = Worker(nice=settings.jit().jit_background_nice)

    def submit(self, ptx: bytes, target: str, bounds_check: bool, pending: Pending) -> None:
        with self.lock:
            self.queue.append((ptx, target, bounds_check, pending))
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="wooly-jit-tier-up", daemon=True)
                self.thread.start()
            self.wake.notify()

    def _run(self) -> None:
        while True:
            with self.lock:
                while not self.queue:
                    if not self.wake.wait(timeout=30):
                        self.thread = None
                        return
                ptx, target, bounds_check, pending = self.queue.pop(0)
            try:
                obj, meta = self.worker.compile(ptx, target, bounds_check)
            except Exception as e:  # noqa: BLE001 (whatever it was, the waiting modules must not wait forever)
                with _PENDING_LOCK:
                    _PENDING.pop(pending.key, None)
                    _FAILED.add(pending.key)
                pending.finish(None, e.message if isinstance(e, JitError) else f"{type(e).__name__}: {e}")
                continue
            if cache_enabled():
                with _MEM_LOCK:
                    _MEM_CACHE[pending.key] = (obj, meta)
                disk_cache.store(pending.key, obj, meta)
            with _PENDING_LOCK:
                _PENDING.pop(pending.key, None)
                _QUICK.pop(pending.key, None)  # new modules of this PTX start optimised (cache) from now on
            pending.finish((obj, meta))

    def close(self) -> None:
        self.worker.close()


_BACKGROUND = _Background()
_PENDING: dict[str, Pending] = {}
_QUICK: dict[str, tuple[bytes, dict]] = {}  # quick objects by optimised-tier key (cache on)
_FAILED: set[str] = set()  # keys whose optimised compile failed: their modules stay quick, no retries
_PENDING_LOCK = threading.Lock()


def wait_background(timeout: float | None = None) -> bool:
    """Wait until no optimised compile is queued or running (benchmarks, tests). False on timeout."""
    import time

    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        with _PENDING_LOCK:
            pend = next(iter(_PENDING.values()), None)
        if pend is None:
            return True
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return False
        pend.done.wait(left)


def compile_tiered(
    ptx: bytes, target: str, bounds_check: bool, tier: str = "auto"
) -> tuple[bytes, dict, str | None, bool, Pending | None]:
    """Like compile_object, for tier 'auto' | 'quick' | 'optimized' (NOTE [compile tiers]). Returns the object to
    load now, its metadata, its cache key (None: not to be shared), whether it is quick code and, for quick code
    that will be replaced, the Pending optimised compile to attach the module to."""
    if tier not in ("auto", "quick", "optimized"):
        raise JitError(CUDA_ERROR_INVALID_VALUE, f"unknown JIT tier '{tier}' (auto, quick, optimized)")
    if target != "cpu" or tier == "optimized" or (tier == "auto" and not tiers_enabled()):
        obj, meta, key = compile_object(ptx, target, bounds_check)
        return obj, meta, key, False, None
    key = cache_key(ptx, target + ("+bounds" if bounds_check else ""))
    use_cache = cache_enabled()
    if tier == "auto" and use_cache:
        hit = _cached(key)
        if hit is not None:
            _count("jit_cache_hits")
            return hit[0], hit[1], key, False, None
    with _PENDING_LOCK:
        quick = _QUICK.get(key) if use_cache else None
    if quick is not None:
        _count("jit_cache_hits")
    else:
        quick = _timed_compile(ptx, target, bounds_check, opt=0)
        if use_cache:
            with _PENDING_LOCK:
                if len(_QUICK) >= 512:
                    _QUICK.pop(next(iter(_QUICK)))
                quick = _QUICK.setdefault(key, quick)
    qkey = key + "#quick" if use_cache else None
    with _PENDING_LOCK:
        if tier == "quick" or key in _FAILED:
            return quick[0], quick[1], qkey, True, None
        pending = _PENDING.get(key)
        fresh = pending is None
        if fresh:
            pending = _PENDING[key] = Pending(key)
    assert pending is not None
    if fresh:
        _BACKGROUND.submit(ptx, target, bounds_check, pending)
    return quick[0], quick[1], qkey, True, pending


# What the two tiers of one PTX may disagree on: a kernel's symbol, and the scratch its code lays out for itself per
# launch (jit.runtime.KernelCode), which the quick tier's leaner translation can make smaller.
CODE_FIELDS = ("symbol", "rec_bytes", "rec_threads", "red_bytes")


def same_layout(a: dict, b: dict) -> bool:
    """Whether two compiles of one PTX agree on everything but code and its scratch (CODE_FIELDS): parameters,
    globals, the data block, shared and local sizes, register counts."""

    def strip(m: dict) -> dict:
        return {
            **m,
            "ftab": "",
            "kernels": [{k: v for k, v in kern.items() if k not in CODE_FIELDS} for kern in m["kernels"]],
        }

    return strip(a) == strip(b)
