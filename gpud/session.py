"""A session: one client process, its handle tables, and the handlers of its driver calls.

Every handle a client names is looked up in *this* session's tables only, so no session can name
another's allocation, module, stream or event. Handlers either return a value at once, or a
``Later`` (markers to wait for + a function producing the reply) for calls that wait on device
work; queued calls return ``None`` and their errors become the session's pending error, reported
by the next synchronous call as CUDA reports asynchronous errors.
"""

from __future__ import annotations

import bisect
import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpud import log
from gpud.backends.base import Allocation, Backend, Function, Module
from gpud.errors import CudaError, codes
from gpud.streams import Marker, StreamEngine, when_all
from proto import messages as m

if TYPE_CHECKING:
    from gpud.server import Server


# Handlers contributed by other gpud modules (the ATen executor, the hypervisor ...):
# message kind -> fn(session, msg, bulk). Registered at import time with ``@extension("kind")``.
EXTENSIONS: dict[str, Callable[[Session, Any, list[Any]], Any]] = {}
# Called with the session when it closes, after its driver-level state is freed.
CLOSE_HOOKS: list[Callable[[Session], None]] = []
# Asked with (session, allocation) when an allocation is freed (cuMemFree or the session closing): a hook that
# returns True keeps the memory and frees it itself later (gpud/ipc.py: another session still has it open).
KEEP_HOOKS: list[Callable[[Session, Any], bool]] = []
# Calls that belong to no session (gpud/migrate.py: a peer gpud moving a session in, an admin's move_out, a client
# resuming a moved session): kind -> fn(server, identity, rid, msg, bulk); a non-None result is the reply.
PEER_CALLS: dict[str, Callable[..., Any]] = {}


def extension(kind: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        EXTENSIONS[kind] = fn
        return fn

    return deco


@dataclass
class Later:
    markers: list[Marker]
    produce: Callable[[], tuple[Any, list[Any]]]


# Copies up to this size run on the I/O loop when their stream is idle (NOTE in gpud/streams.py).
INLINE_BYTES = 4 << 20


@dataclass
class Event:
    flags: int
    marker: Marker | None = None
    ipc_token: bytes = b""  # NOTE [ipc events] (gpud/ipc.py): set once it has an IPC handle


@dataclass
class Region:
    """An address range a session may touch: its allocations and its modules' globals."""

    start: int
    size: int
    allocation: Allocation | None  # None for module globals (not freeable)


_PAGE = 4096


def _mapped_extent(r: Region) -> int:
    """Bytes of a region a bounds-checked kernel may touch: page-aligned allocations (the CPU backend maps every
    allocation as whole pages) up to their last page; anything else (module globals, host mappings) exactly."""
    if r.allocation is not None and r.start % _PAGE == 0:
        return (r.size + _PAGE - 1) // _PAGE * _PAGE
    return r.size


def _mark() -> None:
    """The op of an event record or a stream wait: a point in the stream, no work (and no core: TenantGate.run)."""


_mark.spatial = True  # type: ignore[attr-defined]


@dataclass
class SessionInfo:
    tenant: str
    pid: int
    host_id: str
    program: str
    local: bool  # proven on gpud's host (NOTE [proven locality] in gpud/shm.py), not claimed
    created: float = field(default_factory=time.time)
    uid: int = -1  # the client's user on gpud's host, once local


class Session:
    def __init__(self, server: Server, sid: str, identity: bytes, info: SessionInfo, backend: Backend) -> None:
        self.server = server
        self.id = sid
        self.identity = identity
        self.info = info
        self.backend = backend
        self.last_seen = time.monotonic()
        self._lock = threading.Lock()
        self.pending_error: CudaError | None = None
        self.sticky_error: CudaError | None = None
        self._output: list[str] = []
        self.regions: dict[int, Region] = {}
        self._starts: list[int] = []
        self._allowed: tuple[tuple[int, int], ...] | None = None  # allowed_ranges(), until a region comes or goes
        self.memory_used = 0
        self.modules: dict[int, Module] = {}
        self.module_images: dict[int, tuple[bytes, str]] = {}  # what a move re-loads on the target (NOTE [migration])
        self.functions: dict[int, Function] = {}
        self.events: dict[int, Event] = {}
        self.engine = StreamEngine(server.pool, on_error=self.record_error)
        self.stop_launches = backend.new_cancel()  # NOTE [watchdog]: cancelled when the session closes
        self.loads_in_flight = 0  # NOTE [bounded daemon state]
        self.outbound: list[tuple[Any, int]] = []  # (zmq MessageTracker, bytes) of big replies not yet sent
        self.parked: list[list[Any]] = []  # requests waiting for the client to read its replies
        self.parked_bytes = 0
        self.closed = False
        self.ext: dict[str, Any] = {}  # per-session state of extensions, by extension name
        self.arena: Any = None  # NOTE [session arenas]: this session's address range, made at its first allocation
        self.messages = 0  # requests handled (not pings): where a moved client resumes (NOTE [migration])
        self.deferred = 0  # replies owed (Later) that are not sent yet
        self.moving: Any = None  # a gpud.migrate.MoveOut while the session is being moved (requests are held)

    # ------------------------------------------------------------------ errors and output
    def record_error(self, error: CudaError) -> None:
        with self._lock:
            if error.sticky and self.sticky_error is None:
                self.sticky_error = error
                first = True
            else:
                first = False
                if self.pending_error is None:
                    self.pending_error = error
        if first:  # the operator sees why a tenant's context died (the program may only see a code)
            log.event(
                "session.sticky_error",
                logging.WARNING,
                session=self.id,
                tenant=self.info.tenant,
                error=error.name,
                message=error.message[:2000],
            )

    def check_errors(self) -> None:
        with self._lock:
            if self.sticky_error is not None:
                raise self.sticky_error
            err, self.pending_error = self.pending_error, None
        if err is not None:
            raise err

    def add_output(self, text: str) -> None:
        if text:
            with self._lock:
                self._output.append(text)

    def take_output(self) -> str:
        with self._lock:
            if not self._output:
                return ""
            out = "".join(self._output)
            self._output.clear()
            return out

    # ------------------------------------------------------------------ address ranges
    def _add_region(self, r: Region) -> None:
        bisect.insort(self._starts, r.start)
        self.regions[r.start] = r
        self._allowed = None

    def _remove_region(self, start: int) -> Region:
        r = self.regions.pop(start)
        i = bisect.bisect_left(self._starts, start)
        del self._starts[i]
        self._allowed = None
        return r

    def allowed_ranges(self) -> tuple[tuple[int, int], ...]:
        """What a kernel of this session may touch: its regions (NOTE [bounds check]), each allocation to the end of
        its last page (that memory is the allocation's own mapping; a GPU, whose allocations are mapped in pages
        too, does not fault on reads or writes past the requested size inside it, and numba's own tests launch 16
        threads over 10-element arrays). One tuple, rebuilt only when a region comes or goes: the JIT keeps the
        sorted table of a tuple it has seen (jit.checked.for_ranges), so a launch costs O(1) here however many
        allocations the session holds."""
        a = self._allowed
        if a is None:
            a = self._allowed = tuple((r.start, _mapped_extent(r)) for r in self.regions.values())
        return a

    def find(self, addr: int, size: int, what: str) -> Region:
        i = bisect.bisect_right(self._starts, addr) - 1
        if i >= 0:
            r = self.regions[self._starts[i]]
            if addr + size <= r.start + r.size:
                return r
            if addr < r.start + r.size:
                raise CudaError(
                    codes.INVALID_VALUE,
                    f"{what}: range 0x{addr:x}+{size} overruns the allocation 0x{r.start:x}+{r.size}",
                )
        raise CudaError(codes.INVALID_VALUE, f"{what}: 0x{addr:x} is not a device address of this context")

    # ------------------------------------------------------------------ dispatch
    def handle(self, msg: Any, bulk: list[Any]) -> Any:
        self.server.hv.check_message(self, msg, bulk)
        handler = getattr(self, "on_" + msg.kind, None)
        if handler is not None:
            return handler(msg, bulk)
        ext = EXTENSIONS.get(msg.kind)
        if ext is None:
            raise CudaError(codes.NOT_SUPPORTED, f"message kind {msg.kind!r} is not supported by this gpud")
        return ext(self, msg, bulk)

    def on_batch(self, msg: m.Batch, bulk: list[Any]) -> None:
        for call in msg.calls:
            try:
                self.handle(call, bulk)
            except CudaError as exc:
                self.record_error(exc)
        return None

    def on_sync(self, msg: m.Sync, bulk: list[Any]) -> Any:
        return None

    def on_idle(self, msg: m.Idle, bulk: list[Any]) -> Any:
        return None

    # ------------------------------------------------------------------ memory
    # NOTE [bounded daemon state]
    # Nothing a client sends may make gpud hold without bound: sessions in all and per tenant (Hypervisor.admit),
    # handles per session (``room``: allocations, modules, functions, streams, events; OUT_OF_MEMORY past gpud's
    # limits.*), module loads queued at once (each is a compile on gpud's pool), and replies it has not read
    # (Server: past limits.reply_bytes of unsent replies the session's requests wait unread; past
    # limits.parked_bytes of waiting requests the session is closed).
    def room(self, held: int, what: str) -> None:
        limit = getattr(self.server.hv.config.limits, what)
        if held >= limit:
            raise CudaError(
                codes.OUT_OF_MEMORY, f"this session holds {held} {what}, the most gpud allows one (limits.{what})"
            )

    def on_mem_alloc(self, msg: m.MemAlloc, bulk: list[Any]) -> int:
        if msg.size == 0:
            raise CudaError(codes.INVALID_VALUE, "cuMemAlloc: size must be > 0")
        self.room(len(self.regions), "allocations")
        self.server.reserve_memory(self, msg.size)
        try:
            if self.arena is None:
                self.arena = self.backend.new_arena()
            a = self.backend.alloc(msg.size, self.arena)
        except CudaError:
            self.server.release_memory(self, msg.size)
            raise
        self._add_region(Region(a.addr, a.size, a))
        self.memory_used += a.size
        return a.addr

    def on_mem_free(self, msg: m.MemFree, bulk: list[Any]) -> None:
        r = self.regions.get(msg.addr)
        if r is None or r.allocation is None:
            raise CudaError(codes.INVALID_VALUE, f"cuMemFree: 0x{msg.addr:x} is not an allocation of this context")
        self._remove_region(msg.addr)
        self._release_allocation(r)

    def add_allocation(self, a: Allocation) -> None:
        """An allocation made for the session other than by cuMemAlloc (NOTE [device memory aliases]: a torch
        tensor's memory handed to the driver API); the caller has charged it. On the I/O loop."""
        self._add_region(Region(a.addr, a.size, a))
        self.memory_used += a.size

    def drop_allocation(self, start: int) -> None:
        """Free an allocation as cuMemFree does (uncharged, given back after the work that may use it); on the I/O
        loop. Nothing if it is gone already."""
        r = self.regions.get(start)
        if r is not None and r.allocation is not None:
            self._remove_region(start)
            self._release_allocation(r)

    def _release_allocation(self, r: Region) -> None:
        """Uncharge a removed allocation region and give its memory back to the backend once the work that may
        still use it is done (cuMemFree waits for it), unless a KEEP_HOOKS hook keeps it."""
        self.memory_used -= r.size
        self.server.release_memory(self, r.size)
        alloc = r.allocation
        if alloc is not None and not any(keep(self, alloc) for keep in KEEP_HOOKS):
            when_all(self.engine.tails(), lambda: self.backend.free(alloc))

    def free_all(self) -> None:
        self.backend.cancel(self.stop_launches, "its session closed")  # a dead client's kernels stop now
        for start in list(self.regions):
            r = self._remove_region(start)
            if r.allocation is not None:
                self._release_allocation(r)
        for mod in self.modules.values():
            when_all(self.engine.tails(), functools.partial(self.backend.unload_module, mod))
        self.modules.clear()
        self.functions.clear()
        self.events.clear()
        if self.arena is not None:  # unmapped once its last allocation is freed (after the work that used it)
            arena = self.arena
            when_all(self.engine.tails(), arena.close)
        for hook in CLOSE_HOOKS:
            try:
                hook(self)
            except Exception:  # noqa: BLE001 - a failing hook must not stop the cleanup of others
                import traceback

                traceback.print_exc()
        self.server.hv.on_close(self)  # last: the tenant's figures after everything it held is freed

    def on_mem_get_info(self, msg: m.MemGetInfo, bulk: list[Any]) -> list[int]:
        return list(self.server.mem_info(self))

    def on_memcpy_htod(self, msg: m.MemcpyHtoD, bulk: list[Any]) -> None:
        data = _frame(bulk, msg.frame)
        size = data.nbytes if isinstance(data, memoryview) else len(data)
        self.find(msg.dst, size, "cuMemcpyHtoD")
        if size:
            self.engine.enqueue(msg.stream, lambda: self.backend.copyin(msg.dst, data), inline=size <= INLINE_BYTES)

    def on_memcpy_dtoh(self, msg: m.MemcpyDtoH, bulk: list[Any]) -> Later:
        self.find(msg.src, msg.size, "cuMemcpyDtoH")
        out: list[bytearray] = []
        marker = self.engine.enqueue(
            msg.stream, lambda: out.append(self.backend.copyout(msg.src, msg.size)), inline=msg.size <= INLINE_BYTES
        )

        def produce() -> tuple[Any, list[Any]]:
            self.check_errors()
            return None, [out[0] if out else bytearray(msg.size)]

        return Later([marker], produce)

    def on_memcpy_dtod(self, msg: m.MemcpyDtoD, bulk: list[Any]) -> None:
        self.find(msg.src, msg.size, "cuMemcpyDtoD (source)")
        self.find(msg.dst, msg.size, "cuMemcpyDtoD (destination)")
        if msg.size:
            self.engine.enqueue(
                msg.stream, lambda: self.backend.copy(msg.dst, msg.src, msg.size), inline=msg.size <= INLINE_BYTES
            )

    def on_memset(self, msg: m.Memset, bulk: list[Any]) -> None:
        if msg.dst % msg.elem_size:
            raise CudaError(codes.INVALID_VALUE, f"cuMemsetD{8 * msg.elem_size}: 0x{msg.dst:x} is misaligned")
        self.find(msg.dst, msg.count * msg.elem_size, f"cuMemsetD{8 * msg.elem_size}")
        if msg.count:
            self.engine.enqueue(
                msg.stream,
                lambda: self.backend.memset(msg.dst, msg.value, msg.elem_size, msg.count),
                inline=msg.count * msg.elem_size <= INLINE_BYTES,
            )

    # ------------------------------------------------------------------ vendor libraries
    def on_blas_gemm(self, msg: m.BlasGemm, bulk: list[Any]) -> None:
        from gpud.blas import check_types
        from proto.blas import ITEM, extents

        check_types(msg)
        for operand, addr, size in extents(msg):
            self.find(addr, size, f"cublas gemm ({operand})")
        if msg.scalars_on_device:
            for name, addr in (("alpha", msg.alpha_ptr), ("beta", msg.beta_ptr)):
                self.find(addr, ITEM[msg.compute_type], f"cublas gemm ({name})")
        self.engine.enqueue(msg.stream, lambda: self.backend.gemm(msg))

    def on_blas_geam(self, msg: m.BlasGeam, bulk: list[Any]) -> None:
        from proto.blas import geam_extents

        for operand, addr, size in geam_extents(msg):
            self.find(addr, size, f"cublas geam ({operand})")
        self.engine.enqueue(msg.stream, lambda: self.backend.geam(msg))

    def on_blas_vector(self, msg: m.BlasVector, bulk: list[Any]) -> None:
        from proto.blas import scalar_size, vector_extents

        extents = vector_extents(msg)
        for operand, addr, size, _ in extents:
            self.find(addr, size, f"cublas {msg.op} ({operand})")
        if msg.scalars_on_device and msg.op in ("axpy", "scal") and extents:  # no extents: quick return
            self.find(msg.alpha_ptr, scalar_size(msg.type, msg.alpha_real), f"cublas {msg.op} (alpha)")
        self.engine.enqueue(msg.stream, lambda: self.backend.blas_vector(msg))

    def on_blas_matrix(self, msg: m.BlasMatrix, bulk: list[Any]) -> None:
        from proto.blas import ITEM, SCALARS, matrix_extents

        extents = matrix_extents(msg)
        for operand, addr, size, _ in extents:
            self.find(addr, size, f"cublas {msg.op} ({operand})")
        if msg.scalars_on_device and extents:
            for name in SCALARS[msg.op]:
                self.find(getattr(msg, name + "_ptr"), ITEM[msg.type], f"cublas {msg.op} ({name})")
        self.engine.enqueue(msg.stream, lambda: self.backend.blas_matrix(msg))

    def on_sparse_mv(self, msg: m.SparseMv, bulk: list[Any]) -> None:
        from proto.blas import ITEM
        from proto.sparse import extents

        for operand, addr, size, _ in extents(msg):
            self.find(addr, size, f"cusparse spmv ({operand})")
        if msg.scalars_on_device:
            for name, addr in (("alpha", msg.alpha_ptr), ("beta", msg.beta_ptr)):
                self.find(addr, ITEM[msg.type], f"cusparse spmv ({name})")
        self.engine.enqueue(msg.stream, lambda: self.backend.spmv(msg))

    # NOTE [vendor libraries]: cuSPARSE's conversions write where they are told once their source is checked;
    # the operations whose result's size is data answer it (``count``) when the stream reaches them
    def _sparse_conversion(self, msg: Any, bulk: list[Any]) -> None:
        for operand, addr, size, _ in msg.extents():
            self.find(addr, size, f"cusparse {msg.kind.removeprefix('sparse_')} ({operand})")
        self.engine.enqueue(msg.stream, lambda: self.backend.sparse_convert(msg))

    on_sparse_indices = on_sparse_transpose = on_sparse_sort = on_sparse_gather = _sparse_conversion

    def _sparse_counted(
        self,
        msg: m.SparseFromDense | m.SparseGeam | m.SparseGemm | m.SparseCompress | m.SparseIlu0 | m.SparseSolve,
        bulk: list[Any],
    ) -> Later | None:
        """cuSPARSE operations whose result's size is data (SpGEMM, csrgeam2, DenseToSparse, csr2csr_compress): the
        ``count`` phase answers it once the stream reaches it; the other phase writes, queued."""
        for operand, addr, size, _ in msg.extents():
            self.find(addr, size, f"cusparse {msg.kind.removeprefix('sparse_')} ({operand})")
        out: list[int] = []
        marker = self.engine.enqueue(msg.stream, lambda: out.append(self.backend.sparse_counted(msg)))
        if not msg.count:
            return None

        def produce() -> tuple[Any, list[Any]]:
            self.check_errors()
            return (out[0] if out else 0), []

        return Later([marker], produce)

    on_sparse_gemm = on_sparse_geam = on_sparse_from_dense = on_sparse_compress = on_sparse_ilu0 = _sparse_counted
    on_sparse_solve = _sparse_counted

    def on_rand_generate(self, msg: m.RandGenerate, bulk: list[Any]) -> None:
        from proto.rand import check

        check(msg)
        if msg.n:
            self.find(msg.out, msg.writes(bulk)[0][1], f"curandGenerate ({msg.dist})")
            self.engine.enqueue(msg.stream, lambda: self.backend.rand(msg))

    def on_solver(self, msg: m.SolverCall, bulk: list[Any]) -> None:
        from proto.solver import extents

        for operand, addr, size, _ in extents(msg):
            self.find(addr, size, f"cusolver {msg.op} ({operand})")
        self.engine.enqueue(msg.stream, lambda: self.backend.solve(msg))

    def on_fft_exec(self, msg: m.FftExec, bulk: list[Any]) -> None:
        from proto.fft import extents

        for side, addr, size in extents(msg):
            self.find(addr, size, f"cufft exec ({side})")
        self.engine.enqueue(msg.stream, lambda: self.backend.fft(msg))

    # ------------------------------------------------------------------ streams
    def on_stream_create(self, msg: m.StreamCreate, bulk: list[Any]) -> None:
        if msg.stream < 16:
            raise CudaError(codes.INVALID_VALUE, f"stream handles below 16 are reserved, got {msg.stream}")
        self.room(len(self.engine.streams), "streams")
        self.engine.create(msg.stream, msg.flags, msg.priority)

    def on_stream_destroy(self, msg: m.StreamDestroy, bulk: list[Any]) -> None:
        self.engine.destroy(msg.stream)

    def on_stream_synchronize(self, msg: m.StreamSynchronize, bulk: list[Any]) -> Later:
        tail = self.engine.get(msg.stream).tail
        deps = [tail]
        if msg.stream == 0:  # the legacy stream also waits for the blocking streams
            deps += [s.tail for s in self.engine.streams.values() if s.blocking]
        return Later(deps, self._sync_reply)

    def on_stream_query(self, msg: m.StreamQuery, bulk: list[Any]) -> None:
        if not self.engine.get(msg.stream).idle():
            raise CudaError(codes.NOT_READY, "stream has pending work")

    def on_stream_wait_event(self, msg: m.StreamWaitEvent, bulk: list[Any]) -> None:
        ev = self._event(msg.event)
        deps = [ev.marker] if ev.marker is not None else []
        self.engine.enqueue(msg.stream, _mark, deps)

    def on_ctx_synchronize(self, msg: m.CtxSynchronize, bulk: list[Any]) -> Later:
        return Later(self.engine.tails(), self._sync_reply)

    def _sync_reply(self) -> tuple[Any, list[Any]]:
        self.check_errors()
        return None, []

    # ------------------------------------------------------------------ events
    def _event(self, handle: int) -> Event:
        ev = self.events.get(handle)
        if ev is None:
            raise CudaError(codes.INVALID_HANDLE, f"invalid event handle {handle}")
        return ev

    def on_event_create(self, msg: m.EventCreate, bulk: list[Any]) -> None:
        if msg.event in self.events:
            raise CudaError(codes.INVALID_HANDLE, f"event handle {msg.event} is already in use")
        self.room(len(self.events), "events")
        self.events[msg.event] = Event(flags=msg.flags)

    def on_event_record(self, msg: m.EventRecord, bulk: list[Any]) -> None:
        ev = self._event(msg.event)
        ev.marker = self.engine.enqueue(msg.stream, _mark)

    def on_event_query(self, msg: m.EventQuery, bulk: list[Any]) -> None:
        ev = self._event(msg.event)
        if ev.marker is not None and not ev.marker.done:
            raise CudaError(codes.NOT_READY, "event has not completed")

    def on_event_synchronize(self, msg: m.EventSynchronize, bulk: list[Any]) -> Later:
        ev = self._event(msg.event)
        return Later([ev.marker] if ev.marker else [], self._sync_reply)

    def on_event_elapsed(self, msg: m.EventElapsed, bulk: list[Any]) -> float:
        start, end = self._event(msg.start), self._event(msg.end)
        for ev in (start, end):
            if ev.flags & 2:  # CU_EVENT_DISABLE_TIMING
                raise CudaError(codes.INVALID_HANDLE, "event was created with CU_EVENT_DISABLE_TIMING")
            if ev.marker is None:
                raise CudaError(codes.INVALID_HANDLE, "event has not been recorded")
            if not ev.marker.done:
                raise CudaError(codes.NOT_READY, "event has not completed")
        assert start.marker is not None and end.marker is not None
        return (end.marker.t_ns - start.marker.t_ns) / 1e6

    def on_event_destroy(self, msg: m.EventDestroy, bulk: list[Any]) -> None:
        self._event(msg.event)
        del self.events[msg.event]

    # ------------------------------------------------------------------ modules and launches
    def on_module_load(self, msg: m.ModuleLoad, bulk: list[Any]) -> Later:
        if msg.module in self.modules:
            raise CudaError(codes.INVALID_HANDLE, f"module handle {msg.module} is already in use")
        self.room(len(self.modules), "modules")
        image = bytes(_frame(bulk, msg.frame))
        # Compilation can take a while: run it off the I/O loop and reply when it is done.
        marker, box = self._compile_off_loop(lambda: self.backend.load_module(image, msg.format))

        def produce() -> tuple[Any, list[Any]]:
            if marker.error is not None:
                raise marker.error
            mod: Module = box["value"]
            if self.closed:
                self.backend.unload_module(mod)
                raise CudaError(codes.INVALID_CONTEXT, "session closed")
            self.modules[msg.module] = mod
            self.module_images[msg.module] = (image, msg.format)
            for addr, size in mod.globals.values():
                if size and addr not in self.regions:
                    self._add_region(Region(addr, size, None))
            return {"kernels": mod.kernel_names, "globals": {k: list(v) for k, v in mod.globals.items()}}, []

        return Later([marker], produce)

    def on_module_unload(self, msg: m.ModuleUnload, bulk: list[Any]) -> None:
        mod = self.modules.pop(msg.module, None)
        self.module_images.pop(msg.module, None)
        if mod is None:
            raise CudaError(codes.INVALID_HANDLE, f"invalid module handle {msg.module}")
        for addr, _size in mod.globals.values():
            r = self.regions.get(addr)
            if r is not None and r.allocation is None:
                self._remove_region(addr)
        for h in [h for h, f in self.functions.items() if getattr(f, "module", None) is mod]:
            del self.functions[h]
        when_all(self.engine.tails(), lambda: self.backend.unload_module(mod))

    def on_module_get_function(self, msg: m.ModuleGetFunction, bulk: list[Any]) -> dict[str, Any] | Later:
        mod = self.modules.get(msg.module)
        if mod is None:
            raise CudaError(codes.INVALID_HANDLE, f"invalid module handle {msg.module}")
        if msg.function not in self.functions:
            self.room(len(self.functions), "functions")

        def found(fn: Any) -> dict[str, Any]:
            fn.module = mod
            self.functions[msg.function] = fn
            return {
                "name": fn.name,
                "params": [[p.size, p.align, p.offset] for p in fn.params],
                "attributes": fn.attributes,
            }

        compiled = getattr(mod.native, "compiled", None)
        if compiled is None or compiled(msg.name) or msg.name not in mod.kernel_names:
            return found(self.backend.get_function(mod, msg.name))
        # a lazily loaded module translates this kernel now (NOTE [lazy modules]): off the I/O loop, as a load
        marker, box = self._compile_off_loop(lambda: self.backend.get_function(mod, msg.name))

        def produce() -> tuple[Any, list[Any]]:
            if marker.error is not None:
                raise marker.error
            return found(box["value"]), []

        return Later([marker], produce)

    def _compile_off_loop(self, work: Any) -> tuple[Any, dict[str, Any]]:
        """Run ``work`` (a module load or a kernel's translation) on the server's pool, counted against the
        session's ``loads_in_flight`` limit; returns its marker and the box its result lands in."""
        self.room(self.loads_in_flight, "loads_in_flight")
        box: dict[str, Any] = {}
        with self._lock:
            self.loads_in_flight += 1

        def run() -> None:
            from jit.compiler import accounting

            acct: dict[str, float] = {}
            try:
                with accounting(acct):
                    box["value"] = work()
            finally:
                with self._lock:
                    self.loads_in_flight -= 1
                if acct:  # charged on the I/O loop, where every other charge is made
                    self.server.call_on_loop(functools.partial(self._charge_all, acct))

        return self.server.run_async(run), box

    def on_module_get_global(self, msg: m.ModuleGetGlobal, bulk: list[Any]) -> list[int]:
        mod = self.modules.get(msg.module)
        if mod is None:
            raise CudaError(codes.INVALID_HANDLE, f"invalid module handle {msg.module}")
        g = mod.globals.get(msg.name)
        if g is None:
            raise CudaError(codes.NOT_FOUND, f"named symbol not found: {msg.name}")
        return list(g)

    def on_launch(self, msg: m.Launch, bulk: list[Any]) -> None:
        self.charge("launches")
        fn = self.functions.get(msg.function)
        if fn is None:
            raise CudaError(codes.INVALID_HANDLE, f"cuLaunchKernel: invalid function handle {msg.function}")
        expected = fn.attributes.get("param_buffer_size")
        if expected is not None and len(msg.params) < expected:
            raise CudaError(
                codes.INVALID_VALUE,
                f"cuLaunchKernel({fn.name}): parameter buffer of {len(msg.params)} bytes, the kernel takes {expected}",
            )
        (gx, gy, gz), (bx, by, bz), params = msg.grid, msg.block, msg.params  # three each (the schema)
        grid, block = (gx, gy, gz), (bx, by, bz)
        allowed = self.allowed_ranges()  # this session's regions at launch time
        limit = self.server.hv.config.policy(self.info.tenant).max_kernel_s or None  # NOTE [watchdog]

        share = getattr(self.engine.gate, "share", None)  # NOTE [spatial sharing]: the tenant's cores

        def run() -> None:
            res = self.backend.launch(
                fn,
                grid,
                block,
                msg.shared_mem,
                params,
                allowed,
                cooperative=msg.cooperative,
                deadline_s=limit,
                cancel=self.stop_launches,
                share=share,
            )
            if res.printf:
                self.add_output(res.printf)

        run.spatial = True  # type: ignore[attr-defined]  # takes its cores itself (TenantGate.run)
        self.engine.enqueue(msg.stream, run)

    # ------------------------------------------------------------------ description
    def charge(self, key: str, value: float = 1) -> None:
        """Add ``value`` to this session's tenant's accounting (``Tenant.acct``: wooly_tenant_*_total). Called on
        the I/O loop only, so the counters need no lock."""
        t = self.ext.get("hv.tenant")
        if t is not None:
            t.acct[key] = t.acct.get(key, 0) + value

    def _charge_all(self, acct: dict[str, float]) -> None:
        for k, v in acct.items():
            self.charge(k, v)

    def describe(self) -> dict[str, Any]:
        return {
            "session": self.id,
            "tenant": self.info.tenant,
            "pid": self.info.pid,
            "program": self.info.program,
            "local": self.info.local,
            "memory_used": self.memory_used,
            "allocations": sum(1 for r in self.regions.values() if r.allocation is not None),
            "modules": len(self.modules),
            "functions": len(self.functions),
            "streams": len(self.engine.streams),
            "events": len(self.events),
            "age_s": round(time.time() - self.info.created, 3),
            "idle_s": round(time.monotonic() - self.last_seen, 3),
            "device": self.backend.ordinal,
            "moves": int(self.ext.get("moves", 0)),  # NOTE [migration]: moves and restores before it came here
            "checkpoint": self.ext["ckpt"].describe() if "ckpt" in self.ext else None,  # NOTE [checkpoints]
            "restored_from": self.ext.get("restored_from"),
        }


def _frame(bulk: list[Any], index: int) -> Any:
    if index >= len(bulk):
        raise CudaError(codes.INVALID_VALUE, f"message names bulk frame {index}, but only {len(bulk)} arrived")
    return bulk[index]
