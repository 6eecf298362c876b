"""Compilation front door for callers: kernel cache (memory + disk) and a warm pool of worker processes."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from jit.errors import CUDA_ERROR_INVALID_PTX, JitError
from jit.worker import read_frame, write_frame

TRANSLATOR_VERSION = "wooly-jit-2"


def _source_digest() -> str:
    """Hash of the translator's own source: a changed translator never reuses stale cache entries."""
    h = hashlib.sha256(TRANSLATOR_VERSION.encode())
    root = Path(__file__).resolve().parent
    for p in sorted(root.rglob("*.py")):
        h.update(p.relative_to(root).as_posix().encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]
_MEM_CACHE: dict[str, tuple[bytes, dict]] = {}
_MEM_LOCK = threading.Lock()


def _host_id() -> str:
    import llvmlite.binding as llvm

    from jit.passes.optimize import init_llvm
    init_llvm()
    return (f"{_source_digest()}|{llvm.llvm_version_info}|{llvm.get_host_cpu_name()}|"
            f"{llvm.get_host_cpu_features().flatten()}")


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
    return os.environ.get("WOOLY_JIT_CACHE", "1") not in ("0", "false", "no", "off")


def cache_dir() -> Path:
    d = os.environ.get("WOOLY_JIT_CACHE_DIR")
    return Path(d) if d else Path.home() / ".cache" / "wooly" / "jit"


class Worker:
    """One compile worker process; restarted on demand after it dies."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.lock = threading.Lock()

    def _start(self) -> subprocess.Popen[bytes]:
        root = str(Path(__file__).resolve().parent.parent)
        env = dict(os.environ)
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        return subprocess.Popen([sys.executable, "-m", "jit.worker"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, env=env, cwd=root)

    def ensure(self) -> subprocess.Popen[bytes]:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        return self.proc

    def compile(self, ptx: bytes, target: str, bounds_check: bool = False) -> tuple[bytes, dict]:
        with self.lock:
            p = self.ensure()
            assert p.stdin is not None and p.stdout is not None
            try:
                write_frame(p.stdin, json.dumps({"target": target, "bounds_check": bounds_check}).encode())
                write_frame(p.stdin, ptx)
                p.stdin.flush()
                hdr = read_frame(p.stdout)
                payload = read_frame(p.stdout)
            except (BrokenPipeError, OSError):
                hdr = payload = None
            if hdr is None or payload is None:
                rc = p.wait()
                self.proc = None
                raise JitError(CUDA_ERROR_INVALID_PTX,
                               f"PTX compiler worker died (exit status {rc}); LLVM rejected this module")
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


_POOL: list[Worker] = []
_POOL_LOCK = threading.Lock()
_NEXT = [0]


def _worker() -> Worker:
    with _POOL_LOCK:
        if not _POOL:
            n = max(1, int(os.environ.get("WOOLY_JIT_WORKERS", "1")))
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
    if cache_enabled():
        cache_key(b"", "cpu")  # computes the host id (translator source digest) once
    from jit.runtime import warm_loader
    warm_loader()


def shutdown() -> None:
    with _POOL_LOCK:
        for w in _POOL:
            w.close()
        _POOL.clear()


def compile_object(ptx: bytes, target: str = "cpu", bounds_check: bool = False) -> tuple[bytes, dict, str | None]:
    """(object bytes, metadata, cache key or None when caching is off) for a PTX module, from cache if possible."""
    use_cache = cache_enabled()
    key = cache_key(ptx, target + ("+bounds" if bounds_check else ""))
    if use_cache:
        with _MEM_LOCK:
            hit = _MEM_CACHE.get(key)
        if hit is not None:
            return hit[0], hit[1], key
        d = cache_dir()
        try:
            obj = (d / f"{key}.o").read_bytes()
            meta = json.loads((d / f"{key}.json").read_text())
            with _MEM_LOCK:
                _MEM_CACHE[key] = (obj, meta)
            return obj, meta, key
        except (OSError, ValueError):
            pass
    obj, meta = _worker().compile(ptx, target, bounds_check)
    if use_cache:
        with _MEM_LOCK:
            _MEM_CACHE[key] = (obj, meta)
        _store(key, obj, meta)
    return obj, meta, key if use_cache else None


def _store(key: str, obj: bytes, meta: dict) -> None:
    d = cache_dir()
    try:
        d.mkdir(parents=True, exist_ok=True)
        for name, data in ((f"{key}.o", obj), (f"{key}.json", json.dumps(meta).encode())):
            tmp = d / f".{name}.{os.getpid()}.{threading.get_ident()}"
            tmp.write_bytes(data)
            os.replace(tmp, d / name)  # the json lands last: a reader never sees half an entry
    except OSError:
        pass  # a read-only or full disk only costs a recompile
