"""Loading compiled objects (MCJIT) and launching kernels on all cores, GIL released."""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from jit import watchdog
from jit.checked import (  # noqa: F401 (GlobalRange: part of this module's API)
    HEAP_ALLOC_ADDR,
    HEAP_FREE_ADDR,
    HEAP_SIZE,
    HEAPS,
    DeviceHeap,
    GlobalRange,
    for_ranges,
)
from jit.device import default as default_device
from jit.emit.abi import (
    L_ALLOWED,
    L_ASSERT,
    L_BADADDR,
    L_BLOCK,
    L_CHUNK,
    L_DYN,
    L_ERROR,
    L_GLOBALS,
    L_GRID,
    L_GRID_WS,
    L_HEAP,
    L_HEAP_ALLOC,
    L_HEAP_FREE,
    L_NBLOCKS,
    L_NEXT,
    L_NRANGES,
    L_NTHREADS,
    L_OS_YIELD,
    L_PARAMS,
    L_RANGES,
    L_ROOTS,
    L_SLOTS,
    RB_LO,
    W_SLOTS,
    WINDOW_GUARD,
    shared_window_bytes,
)
from jit.errors import (
    CUDA_ERROR_ASSERT,
    CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE,
    CUDA_ERROR_ILLEGAL_ADDRESS,
    CUDA_ERROR_INVALID_VALUE,
    CUDA_ERROR_LAUNCH_FAILED,
    CUDA_ERROR_LAUNCH_TIMEOUT,
    CUDA_ERROR_NOT_FOUND,
    JitError,
)
from jit.loader import LAUNCH_LOCK, LAUNCHES, loaded
from proto import launch as launch_rules
from proto.errors import CudaError


@dataclass(frozen=True)
class ParamInfo:
    name: str
    size: int
    align: int
    offset: int


@dataclass(frozen=True)
class GlobalInfo:
    name: str
    size: int
    address: int


@dataclass
class LaunchResult:
    printf: str = ""
    core_s: float = 0.0  # CPU seconds its workers used (shared launches: NOTE [spatial sharing])


# -- host services called from kernel code -------------------------------------------------------
# NOTE [the launching thread works too]
# A launch of several blocks used to hand every worker context to the pool and wait: two thread hand-offs (a wake-up
# of a pool thread, then of the launching one) on the path of every launch, ~140 us of a 175 us launch of 8 small
# blocks on these hosts. The launching thread now runs the first worker context itself (ctypes releases the GIL)
# while the pool runs the others. Blocks are claimed from the launch's counter, so when the launching thread is done
# every block is: a pool worker that has not started by then is cancelled (it would claim nothing), and only those
# already running are waited for. Small launches cost one submission; big ones still spread over every core.
_POOL: ThreadPoolExecutor | None = None
_POOL_SIZE = os.cpu_count() or 1


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=_POOL_SIZE, thread_name_prefix="wooly-jit")
    return _POOL


def _buffer(n: int) -> tuple[Any, int]:
    # page-aligned: .shared/.local variables may declare any .align up to that (offsets inside are aligned)
    buf = ctypes.create_string_buffer(max(n, 16) + 4096)
    addr = ctypes.addressof(buf)
    return buf, (addr + 4095) // 4096 * 4096


@dataclass(frozen=True)
class KernelCode:
    """A kernel's entry point with the per-launch scratch its code lays out for itself (thread records, reduction
    buffer): what a tier switch replaces, as one object (NOTE [compile tiers], jit/compiler.py)."""

    fn: Any
    rec_bytes: int = 0
    rec_threads: int = 0  # records laid out for this many threads; 0: for the launch's block (NOTE [thread records])
    red_bytes: int = 0

    @staticmethod
    def of(fn: Any, k: dict) -> KernelCode:
        return KernelCode(fn, k["rec_bytes"], k.get("rec_threads", 0), k.get("red_bytes", 0))


@dataclass
class CpuKernel:
    name: str
    params: list[ParamInfo]
    param_buffer_size: int
    static_shared_bytes: int
    local_bytes_per_thread: int
    max_threads_per_block: int
    num_regs: int
    _code: KernelCode = field(repr=False, default=KernelCode(None))
    _bc_roots: list[int] = field(default_factory=list)
    _func_stack: int = 0
    _dyn_offset: int = 0
    _module: Any = field(repr=False, default=None)
    # configurations already found valid on one device (its attribute table, held so its identity stays its own):
    # a kernel is launched the same way again and again, and the rules cost ~5 us a launch on a 2-core host
    _valid: tuple[Any, set[tuple[Any, ...]]] | None = field(repr=False, default=None)

    def launch(
        self,
        grid: tuple[int, ...] | int = (1, 1, 1),
        block: tuple[int, ...] | int = (1, 1, 1),
        shared_mem: int = 0,
        params: bytes | bytearray | memoryview | Any = b"",
        workers: int | None = None,
        allowed_ranges: Sequence[GlobalRange] | Sequence[tuple[int, int]] | None = None,
        cooperative: bool = False,
        deadline_s: float | None = None,
        cancel: watchdog.Cancel | None = None,
        share: Any = None,
        device: Mapping[Any, int] | None = None,
        depth: int = 0,
        tree: Any = None,
    ) -> LaunchResult:
        """Run the kernel. ``allowed_ranges`` (modules compiled with bounds_check=True only): the allocations this
        launch may access through global/generic pointers, besides the module's own globals and the block's
        shared/local memory; an access outside them fails the launch with CUDA_ERROR_ILLEGAL_ADDRESS (700). Pass
        the same tuple to many launches and its sorted table is built once (jit.checked.for_ranges).
        ``cooperative``: every block resident at once, on an OS thread of its own, with a grid-sync workspace
        (NOTE [grid sync], jit/emit/cpu/grid.py); at most COOPERATIVE_MAX_BLOCKS blocks.
        ``deadline_s``, ``cancel`` (bounds-checked modules): stop the launch when it runs longer, or when the token is
        cancelled, with CUDA_ERROR_LAUNCH_TIMEOUT (NOTE [watchdog], jit/watchdog.py).
        ``share`` (a jit.cores.Share): the launch runs on the cores the arbiter gives that tenant, re-divided between
        blocks (NOTE [spatial sharing], jit/cores.py); cooperative launches keep every block resident.
        The grids the kernel launches itself run after it, under the same ranges, deadline and token (NOTE [device
        launches], jit/devlaunch.py); ``depth`` and ``tree`` are theirs (a host launch leaves them out).
        ``device``: the attributes of the device it runs on (gpud's backend passes its own; default
        jit.device.default()): the launch rules of proto/launch.py check the launch against them, and device code
        reads them with cudaDeviceGetAttribute."""
        checked = self._module is not None and self._module.bounds_check
        if allowed_ranges is not None and not checked:
            raise JitError(
                CUDA_ERROR_INVALID_VALUE,
                f"allowed_ranges given for {self.name}, but its module was compiled without bounds_check",
            )
        code = self._code  # once: NOTE [compile tiers] may switch it between launches
        g, bl = _dims(grid, "grid"), _dims(block, "block")
        nt = bl[0] * bl[1] * bl[2]
        raw = bytes(params) if not isinstance(params, (bytes, bytearray)) else params
        dev = device if device is not None else default_device()
        valid = self._valid
        if valid is None or valid[0] is not dev:
            valid = self._valid = (dev, set())
        config = (g, bl, shared_mem, len(raw))
        if config not in valid[1]:
            try:  # the driver's launch rules (proto/launch.py), on the device's attributes: one owner of the limits
                launch_rules.check(
                    f"launch of {self.name}",
                    dev,
                    g,
                    bl,
                    shared_mem,
                    max_threads=self.max_threads_per_block,
                    static_shared=self.static_shared_bytes,
                    dynamic_shared=launch_rules.optin_shared_limit(dev, self.static_shared_bytes),
                    params=len(raw),
                )
            except CudaError as exc:
                raise JitError(CUDA_ERROR_INVALID_VALUE, exc.message) from None
            if len(valid[1]) < 64:
                valid[1].add(config)
        pbuf, paddr = _buffer(max(len(raw), self.param_buffer_size))
        ctypes.memmove(paddr, raw, len(raw))
        lctx = (ctypes.c_int64 * L_SLOTS)()
        nblocks = g[0] * g[1] * g[2]
        lctx[L_PARAMS] = paddr
        lctx[L_GLOBALS] = self._module._data_addr if self._module is not None else 0
        for k in range(3):
            lctx[L_GRID + k], lctx[L_BLOCK + k] = g[k], bl[k]
        lctx[L_NBLOCKS], lctx[L_NEXT], lctx[L_ERROR] = nblocks, 0, 0
        nw = max(1, min(workers or _POOL_SIZE, nblocks, _POOL_SIZE))
        lctx[L_CHUNK] = max(1, min(64, nblocks // (nw * 16)))  # ~16 claims per worker keeps the load balanced
        if cooperative:
            if nblocks > COOPERATIVE_MAX_BLOCKS:
                raise JitError(
                    CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE,
                    f"cooperative launch of {self.name}: "
                    f"{nblocks} blocks, at most {COOPERATIVE_MAX_BLOCKS} can be resident at once",
                )
            nw, lctx[L_CHUNK] = nblocks, 1  # one block per worker, each worker its own OS thread
            ws = (ctypes.c_uint64 * 8)()  # the grid-sync workspace, zeroed
            lctx[L_GRID_WS], lctx[L_OS_YIELD] = ctypes.addressof(ws), _sched_yield()
        lctx[L_DYN], lctx[L_NTHREADS], lctx[L_ASSERT] = shared_mem, nt, 0
        lctx[L_ALLOWED] = nw  # every worker may run, unless an arbiter says less (NOTE [spatial sharing])
        keep: list[Any] = [pbuf]
        wctxs = []
        extra_ranges: list[tuple[int, int]] = [(paddr, max(len(raw), self.param_buffer_size))]
        if cooperative:
            keep.append(ws)
            extra_ranges.append((lctx[L_GRID_WS], ctypes.sizeof(ws)))
        area = self.local_bytes_per_thread + self._func_stack  # .local, then .func frames (bounds checks)
        guard = WINDOW_GUARD if checked else 0  # NOTE [confined windows] (jit/emit/bounds.py): zones either side
        for _ in range(nw):
            window = shared_window_bytes(self._dyn_offset + shared_mem)  # whole allocation units (SHARED_UNIT)
            sb, sa = _buffer(window + 2 * guard)
            lb, la = _buffer(nt * area + 2 * guard)
            sa, la = sa + guard, la + guard
            rec_threads = code.rec_threads or (nt + 15) // 16 * 16  # NOTE [thread records] (jit/emit/cpu/records.py)
            rb, ra = _buffer(rec_threads * code.rec_bytes)
            extra_ranges += [(sa, window), (la, nt * area)]
            red = 0
            if code.red_bytes:  # NOTE [combined global reductions]: empty slots, lo = UINT64_MAX, hi = 0
                rbuf = (ctypes.c_int64 * (code.red_bytes // 8))()
                rbuf[RB_LO // 8] = -1
                red = ctypes.addressof(rbuf)
                keep.append(rbuf)
            w = (ctypes.c_int64 * W_SLOTS)(sa, la, ra, red, len(wctxs))
            keep += [sb, lb, rb, w]
            wctxs.append(w)
        if checked:
            heap = self._module.heap()
            lctx[L_HEAP_ALLOC], lctx[L_HEAP_FREE], lctx[L_HEAP] = HEAP_ALLOC_ADDR, HEAP_FREE_ADDR, id(heap)
            own = [(self._module._data_addr, max(1, self._module._data_size)), (heap.base, heap.size)]
            own += [(a, n) for a, n in extra_ranges]
            rt = for_ranges(allowed_ranges).with_spans(own)
            table, buf = rt.as_array()
            keep += [table, buf]
            lctx[L_RANGES], lctx[L_NRANGES] = ctypes.addressof(table), len(table) // 2
            if self._bc_roots:
                roots = rt.root_table(raw, self._bc_roots)
                keep.append(roots)
                lctx[L_ROOTS] = ctypes.addressof(roots)
        key = ctypes.addressof(lctx)
        rec: dict[str, Any] = {
            "printf": [],
            "assert": None,
            "kernel": self,
            "depth": depth,
            "tree": tree,
            "device": dev,
        }
        if tree is None and deadline_s:
            rec["t_end"] = time.monotonic() + deadline_s
        with LAUNCH_LOCK:
            LAUNCHES[key] = rec
        running = watchdog.start(lctx, deadline_s, cancel) if checked and (deadline_s or cancel) else None
        core_s = 0.0
        try:
            fn = code.fn
            if cooperative:
                _run_resident(fn, key, wctxs)
            elif share is not None:
                core_s = _SharedLaunch(fn, key, lctx, wctxs, nblocks).run(share)
            elif nw == 1:
                fn(key, ctypes.addressof(wctxs[0]))
            else:  # NOTE [the launching thread works too]
                futs = [_pool().submit(fn, key, ctypes.addressof(w)) for w in wctxs[1:]]
                try:
                    fn(key, ctypes.addressof(wctxs[0]))
                finally:
                    for f in futs:
                        if not f.cancel():  # a worker that never started claimed no block
                            f.result()
        finally:
            with LAUNCH_LOCK:
                LAUNCHES.pop(key, None)
            if running is not None:
                watchdog.finish(running, cancel)
        text = "".join(rec["printf"])
        err = int(lctx[L_ERROR])
        launches = rec.get("launches")
        if launches is not None:
            if err:
                launches.discard()
            else:  # NOTE [device launches]: the grids it launched run now
                try:
                    more, more_core_s = launches.run(
                        workers=workers, allowed_ranges=allowed_ranges, cancel=cancel, share=share, device=dev
                    )
                except Exception as e:
                    e.printf = text + getattr(e, "printf", "")  # type: ignore[attr-defined]
                    raise
                text += more
                core_s += more_core_s
        if err:
            if err == CUDA_ERROR_LAUNCH_TIMEOUT and running is not None:
                e = JitError(err, f"kernel {self.name} was stopped: {running.why}")
            elif err == CUDA_ERROR_ILLEGAL_ADDRESS:
                e = JitError(
                    err,
                    f"kernel {self.name}: illegal address 0x{int(lctx[L_BADADDR]) & (2**64 - 1):x} "
                    "outside the launch's allowed ranges",
                )
            elif err == CUDA_ERROR_ASSERT:
                e = JitError(err, f"device-side assert triggered in {self.name}: {rec['assert'] or ''}".strip())
            elif err == CUDA_ERROR_LAUNCH_FAILED:
                e = JitError(
                    err,
                    f"trap executed in kernel {self.name} (a trap instruction, or a thread out of "
                    "stack: alloca past its 4 KiB, NOTE [dynamic stack], .func frames, or .func "
                    "recursion too deep)",
                )
            else:
                e = JitError(err, f"kernel {self.name} failed")
            e.printf = text  # type: ignore[attr-defined]
            raise e
        return LaunchResult(printf=text, core_s=core_s)


class _SharedLaunch:
    """A launch whose workers run while the arbiter allows (NOTE [spatial sharing], jit/cores.py): worker i runs
    while i < L[L_ALLOWED]; the launching thread runs worker 0 and waits while it is allowed none."""

    def __init__(self, fn: Any, key: int, lctx: Any, wctxs: list[Any], nblocks: int) -> None:
        self.fn, self.key, self.lctx, self.wctxs, self.nblocks = fn, key, lctx, wctxs, nblocks
        self.demand = len(wctxs)
        self.chunk = int(lctx[L_CHUNK])
        self.cond = threading.Condition()
        self.running: set[int] = set()
        self.core_s = 0.0
        self.finished = False

    def done(self) -> bool:
        return bool(self.lctx[L_ERROR]) or self.lctx[L_NEXT] >= self.nblocks

    def allow(self, n: int, contended: bool = False) -> None:
        """The arbiter's word (under its lock): n workers may run. While tenants compete, workers claim one block
        at a time, so that a re-division takes effect at the next block boundary, not after a chunk of them."""
        self.lctx[L_CHUNK] = 1 if contended else self.chunk
        self.lctx[L_ALLOWED] = n
        with self.cond:
            self.cond.notify_all()
        self._grow()

    def _grow(self) -> None:
        with self.cond:
            if self.finished or self.done():
                return
            for i in range(1, min(int(self.lctx[L_ALLOWED]), self.demand)):
                if i not in self.running:
                    self.running.add(i)
                    _pool().submit(self._work, i)

    def _call(self, i: int) -> None:
        t = time.thread_time()
        try:
            self.fn(self.key, ctypes.addressof(self.wctxs[i]))
        finally:
            with self.cond:
                self.running.discard(i)
                self.core_s += time.thread_time() - t
                self.cond.notify_all()

    def _work(self, i: int) -> None:
        self._call(i)
        self._grow()  # the allowance may have grown while this worker was leaving

    def run(self, share: Any) -> float:
        arbiter = share.arbiter
        arbiter.enter(share, self)
        try:
            while True:
                with self.cond:
                    while self.lctx[L_ALLOWED] < 1 and not self.done():
                        self.cond.wait(0.05)
                    if self.done():
                        while self.running:
                            self.cond.wait(0.05)
                        self.finished = True
                        return self.core_s
                    self.running.add(0)
                self._grow()
                self._call(0)
        finally:
            arbiter.leave(share, self, self.core_s)


# Blocks of one cooperative launch: each gets an OS thread (NOTE [grid sync]); the devices gpud exposes report an
# occupancy that keeps grids well under this (MULTIPROCESSOR_COUNT = workers, 32 blocks per SM at most).
COOPERATIVE_MAX_BLOCKS = 4096
_SCHED_YIELD: int | None = None


def _sched_yield() -> int:
    """The address of libc's sched_yield, which wait loops of cooperative launches call (NOTE [grid sync])."""
    global _SCHED_YIELD
    if _SCHED_YIELD is None:
        _SCHED_YIELD = ctypes.cast(ctypes.CDLL(None).sched_yield, ctypes.c_void_p).value or 0
    return _SCHED_YIELD


def _run_resident(fn: Any, key: int, wctxs: list[Any]) -> None:
    """Run a cooperative launch: one OS thread per worker context (one block each), all at once. The calls
    release the GIL (ctypes), so the blocks really run side by side and can wait for each other."""
    threads = [
        threading.Thread(target=fn, args=(key, ctypes.addressof(w)), name=f"wooly-coop-{i}", daemon=True)
        for i, w in enumerate(wctxs)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _dims(d: tuple[int, ...] | int, what: str) -> tuple[int, int, int]:
    if isinstance(d, int):
        d = (d,)
    t = tuple(int(x) for x in d) + (1,) * (3 - len(d))
    if len(t) != 3 or any(x < 1 for x in t):
        raise JitError(CUDA_ERROR_INVALID_VALUE, f"invalid {what} dimensions {d}")
    return t  # type: ignore[return-value]


_HEAP_LOCK = threading.Lock()


class CpuModule:
    """A loaded PTX module: kernels (code shared per PTX hash) and this instance's own module-scope globals."""

    def __init__(
        self, obj: bytes, meta: dict, key: str | None = None, quick: bool = False, pending: Any = None
    ) -> None:
        """``pending``: the jit.compiler.Pending optimised compile this quick module switches to when it lands."""
        self._code = loaded(obj, meta, key)
        self._meta = meta
        self._pending = pending
        #: "quick" (NOTE [compile tiers], jit/compiler.py: switched to "optimized" when the background compile lands)
        self.tier = "quick" if quick else "optimized"
        # see NOTE [module globals live in a data block] (jit/lower/module.py)
        self.bounds_check = bool(meta.get("bounds_check", False))
        image = bytes.fromhex(meta.get("gdata", ""))
        self._data_size = max(len(image), int(meta.get("gsize", 0)))  # the image's zero tail is not in it
        self._data, self._data_addr = _buffer(self._data_size)
        ctypes.memmove(self._data_addr, image, len(image))
        for where, target, size in meta.get("grelocs", []):
            v = (self._data_addr + target) & ((1 << (8 * size)) - 1)
            ctypes.memmove(self._data_addr + where, v.to_bytes(size, "little"), size)
        frelocs = meta.get("frelocs", [])
        if frelocs:  # NOTE [function addresses in globals] (jit/emit/to_llvm.py)
            table = (ctypes.c_uint64 * (1 + max(i for _, i, _ in frelocs)))()
            self._code.ftab(ctypes.addressof(table), None)
            for where, i, size in frelocs:
                v = table[i] & ((1 << (8 * size)) - 1)
                ctypes.memmove(self._data_addr + where, v.to_bytes(size, "little"), size)
        self._patched_from = self._code if frelocs else None  # the code those addresses point into stays loaded
        self.globals: dict[str, GlobalInfo] = {}
        for name, (off, size) in meta["globals"].items():
            self.globals[name] = GlobalInfo(name, int(size), self._data_addr + int(off))
        self._kernels: dict[str, CpuKernel] = {}
        for k in meta["kernels"]:
            kern = CpuKernel(
                name=k["name"],
                params=[ParamInfo(**p) for p in k["params"]],
                param_buffer_size=k["param_size"],
                static_shared_bytes=k["static_shared"],
                local_bytes_per_thread=k["local_bytes"],
                max_threads_per_block=k["max_threads"],
                num_regs=k["num_regs"],
                _code=KernelCode.of(self._code.fns[k["name"]], k),
                _bc_roots=list(k.get("bc_roots", [])),
                _func_stack=k.get("func_stack", 0),
                _dyn_offset=int(meta["dyn_offset"]),
                _module=self,
            )
            self._kernels[k["name"]] = kern
        if pending is not None:
            pending.attach(self)  # may switch at once, if the optimised code has landed meanwhile

    def tier_up(self, obj: bytes, meta: dict, key: str | None) -> None:
        """Switch every kernel to the optimised code of the same PTX (called by the background compile)."""
        from jit.compiler import same_layout

        if self.tier == "optimized" or not same_layout(self._meta, meta):
            return  # different metadata would mean a different translation: keep the code we have
        code = loaded(obj, meta, key)
        for k in meta["kernels"]:
            self._kernels[k["name"]]._code = KernelCode.of(code.fns[k["name"]], k)
        self._code, self._meta, self.tier = code, meta, "optimized"

    def wait_optimized(self, timeout: float | None = None) -> bool:
        """Wait until this module runs optimised code (NOTE [compile tiers]). False: still quick after ``timeout``
        seconds, or for good (tier="quick", or its optimised compile failed)."""
        if self.tier != "optimized" and self._pending is not None:
            self._pending.done.wait(timeout)
        return self.tier == "optimized"

    def heap(self) -> DeviceHeap:
        """This instance's device-malloc arena (bounds-checked modules), mapped at the first launch."""
        h = self.__dict__.get("_heap")
        if h is None:
            with _HEAP_LOCK:
                h = self.__dict__.get("_heap")
                if h is None:
                    h = self._heap = DeviceHeap(HEAP_SIZE)
                    HEAPS[id(h)] = h
        return h

    def __del__(self) -> None:
        h = self.__dict__.get("_heap")
        if h is not None:
            HEAPS.pop(id(h), None)

    @property
    def kernel_names(self) -> list[str]:
        return list(self._kernels)

    def by_handle(self, handle: int) -> CpuKernel | None:
        """The kernel a device-side launch names (NOTE [device launches]); None for a value that names none."""
        lazy = self.__dict__.get("_lazy")
        if lazy is not None and lazy() is not None:  # the data block of a lazily translated module (jit/lazy.py)
            return lazy().by_handle(handle)
        table = self.__dict__.get("_by_handle")
        if table is None:
            from jit.emit.abi import kernel_handle

            table = self._by_handle = {kernel_handle(n): k for n, k in self._kernels.items()}
        return table.get(handle)

    def get_kernel(self, name: str) -> CpuKernel:
        k = self._kernels.get(name)
        if k is None:
            raise JitError(CUDA_ERROR_NOT_FOUND, f"no kernel named '{name}' in module")
        return k

    def get_global(self, name: str) -> GlobalInfo:
        g = self.globals.get(name)
        if g is None:
            raise JitError(CUDA_ERROR_NOT_FOUND, f"no global named '{name}' in module")
        return g
