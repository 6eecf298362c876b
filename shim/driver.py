"""The CUDA driver API, in Python, over a gpud session: the semantics every client face builds on.

Method names follow the driver API in snake case (``mem_alloc`` is ``cuMemAlloc``). Failures raise
``CudaError`` carrying the CUresult a real driver would return. The client owns handle ids
(streams, events, modules, functions), so creating them costs no round trip; immutable device
facts are cached from the hello reply. Calls that return nothing are queued (see shim.client).
"""

from __future__ import annotations

import bisect
import itertools
import struct
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from proto import constants as C
from proto import errors as codes
from proto import launch as rules
from proto import messages as m
from proto import settings as config
from proto.errors import CudaError
from shim import progress
from shim.client import Connection
from shim.shm import MIN_SHM_BYTES, RingGone, StagingRing

DRIVER_VERSION = C.CUDA_VERSION  # the CUDA version the API surface corresponds to


@dataclass(frozen=True)
class FunctionInfo:
    handle: int
    module: int
    name: str
    params: tuple[tuple[int, int, int], ...]  # (size, align, offset) per kernel parameter
    attributes: dict[str, int]

    @property
    def param_buffer_size(self) -> int:
        return self.attributes.get("param_buffer_size", max((o + s for s, _, o in self.params), default=0))

    def pack_params(self, args: Sequence[bytes]) -> bytes:
        """Lay out one bytes object per parameter at its offset (the kernelParams marshalling)."""
        if len(args) != len(self.params):
            raise CudaError(codes.INVALID_VALUE, f"{self.name} takes {len(self.params)} parameters, got {len(args)}")
        buf = bytearray(self.param_buffer_size)
        for (size, _align, off), a in zip(self.params, args, strict=True):
            if len(a) != size:
                raise CudaError(
                    codes.INVALID_VALUE, f"{self.name}: parameter at offset {off} is {size} bytes, got {len(a)}"
                )
            buf[off : off + size] = a
        return bytes(buf)


# NOTE [devices of a program] (shim/runtime.py): a program with several devices has a driver per device, and the
# handles they make (streams, events, modules, functions) must not collide where the program holds them side by
# side; each driver numbers its own from ``index << HANDLE_SHIFT`` up, so a handle also says whose it is.
HANDLE_SHIFT = 40


class Driver:
    def __init__(self, conn: Connection, index: int = 0) -> None:
        self.conn = conn
        self.index = index  # the program's cuda:N this driver serves
        self._ids = itertools.count(16 + (index << HANDLE_SHIFT))
        self._lock = threading.Lock()
        self._alloc_starts: list[int] = []
        self._alloc_size: dict[int, int] = {}
        self._imported: dict[int, int] = {}  # opened from IPC handles: address -> open count
        # NOTE [device memory aliases]: allocations gpud made for torch tensors' memory (cupy.from_dlpack(t)):
        # address -> size, until gpud reports them gone or a new allocation lands on them
        self._lent: dict[int, int] = {}
        self.streams: set[int] = set()
        self.events: set[int] = set()
        self.modules: dict[int, dict[str, Any]] = {}
        self.functions: dict[int, FunctionInfo] = {}
        self._ring: StagingRing | None | bool = None
        conn.on_move.append(self._moved)  # NOTE [resume]: the new node has no staging ring of ours
        self._dedup_done: set[int] = set()  # addresses that had their content-addressed upload

    def _new_id(self) -> int:
        return next(self._ids)

    # ------------------------------------------------------------------ devices
    @property
    def devices(self) -> list[dict[str, Any]]:
        return self.conn.devices

    def device_get_count(self) -> int:
        return len(self.devices)

    def _dev(self, ordinal: int) -> dict[str, Any]:
        if not 0 <= ordinal < len(self.devices):
            raise CudaError(codes.INVALID_DEVICE, f"device ordinal {ordinal} out of range (have {len(self.devices)})")
        return self.devices[ordinal]

    def device_get_name(self, ordinal: int = 0) -> str:
        return self._dev(ordinal)["name"]

    def device_total_mem(self, ordinal: int = 0) -> int:
        return int(self._dev(ordinal)["total_mem"])

    def device_get_attribute(self, attribute: int, ordinal: int = 0) -> int:
        attrs = self._dev(ordinal)["attributes"]
        if attribute not in attrs:
            raise CudaError(codes.INVALID_VALUE, f"unknown device attribute {attribute}")
        return int(attrs[attribute])

    def device_compute_capability(self, ordinal: int = 0) -> tuple[int, int]:
        cc = self._dev(ordinal)["compute_capability"]
        return int(cc[0]), int(cc[1])

    def device_get_uuid(self, ordinal: int = 0) -> str:
        return self._dev(ordinal)["uuid"]

    # ------------------------------------------------------------------ memory
    def mem_alloc(self, size: int) -> int:
        if size <= 0:
            raise CudaError(codes.INVALID_VALUE, "cuMemAlloc: size must be > 0")
        addr, _ = self.conn.call(m.MemAlloc(size=int(size)))
        with self._lock:
            bisect.insort(self._alloc_starts, addr)
            self._alloc_size[addr] = int(size)
            if self._lent:  # gpud reuses addresses only once they are free: a lent range here is gone
                for base in [b for b, n in self._lent.items() if b < addr + size and addr < b + n]:
                    del self._lent[base]
        return int(addr)

    def lent(self, base: int, size: int, gone: list[int]) -> None:
        """A torch tensor's memory is at ``[base, base+size)`` now (NOTE [device memory aliases]); ``gone``: lent
        ranges gpud has freed since."""
        with self._lock:
            for b in gone:
                self._lent.pop(int(b), None)
            self._lent[int(base)] = int(size)

    def mem_free(self, addr: int) -> None:
        with self._lock:
            if addr in self._imported:
                raise CudaError(
                    codes.INVALID_VALUE,
                    f"cuMemFree: 0x{addr:x} was opened from an IPC handle: close it with cuIpcCloseMemHandle",
                )
            if addr not in self._alloc_size:
                raise CudaError(codes.INVALID_VALUE, f"cuMemFree: 0x{addr:x} is not an allocation of this context")
            size = self._alloc_size.pop(addr)
            self._alloc_starts.pop(bisect.bisect_left(self._alloc_starts, addr))
            if self._dedup_done:  # the addresses may come back in a new allocation
                self._dedup_done = {a for a in self._dedup_done if not addr <= a < addr + size}
        self.conn.post(m.MemFree(addr=int(addr)))

    # ------------------------------------------------------------------ IPC (NOTE [ipc] in proto/messages.py)
    def ipc_get_mem_handle(self, addr: int) -> bytes:
        with self._lock:
            if addr not in self._alloc_size or addr in self._imported:
                raise CudaError(
                    codes.INVALID_VALUE, f"cuIpcGetMemHandle: 0x{addr:x} is not an allocation of this context"
                )
        handle, _ = self.conn.call(m.IpcGet(addr=int(addr)))
        return bytes(handle)

    def ipc_open_mem_handle(self, handle: bytes) -> int:
        (addr, size), _ = self.conn.call(m.IpcOpen(handle=bytes(handle)))
        with self._lock:
            if addr not in self._alloc_size:
                bisect.insort(self._alloc_starts, addr)
                self._alloc_size[addr] = int(size)
            self._imported[addr] = self._imported.get(addr, 0) + 1
        return int(addr)

    def ipc_close_mem_handle(self, addr: int) -> None:
        with self._lock:
            n = self._imported.get(addr)
            if n is None:
                raise CudaError(
                    codes.INVALID_VALUE, f"cuIpcCloseMemHandle: 0x{addr:x} was not opened from an IPC handle"
                )
            if n > 1:
                self._imported[addr] = n - 1
            else:
                del self._imported[addr]
                del self._alloc_size[addr]
                self._alloc_starts.pop(bisect.bisect_left(self._alloc_starts, addr))
        self.conn.call(m.IpcClose(addr=int(addr)))

    def mem_get_info(self) -> tuple[int, int]:
        free, total = self.conn.call(m.MemGetInfo())[0]
        return int(free), int(total)

    def mem_get_address_range(self, ptr: int) -> tuple[int, int]:
        with self._lock:
            i = bisect.bisect_right(self._alloc_starts, ptr) - 1
            if i >= 0:
                base = self._alloc_starts[i]
                size = self._alloc_size[base]
                if ptr < base + size:
                    return base, size
            for base, size in self._lent.items():
                if base <= ptr < base + size:
                    return base, size
        raise CudaError(codes.NOT_FOUND, f"0x{ptr:x} is not inside an allocation of this context")

    def is_device_pointer(self, ptr: int) -> bool:
        try:
            self.mem_get_address_range(ptr)
            return True
        except CudaError:
            return False

    def _moved(self, conn: Any) -> None:
        self._ring = None

    def _staging(self) -> StagingRing | None:
        """The same-host shared-memory ring, opened on first large copy (None when remote)."""
        if self._ring is False:
            return None
        if self._ring is None:
            use = self.conn.same_host and "shm" in self.conn.server_capabilities and config.client().shm
            try:
                self._ring = StagingRing(self.conn) if use else False
            except (CudaError, OSError):
                self._ring = False
        return self._ring if isinstance(self._ring, StagingRing) else None

    @property
    def dedup_stats(self) -> Any:
        """Figures of content-addressed uploads (shim/dedup.py), or None when gpud does not dedup."""
        from shim import dedup

        up = dedup.uploader_for(self.conn)
        return up.stats if up is not None else None

    def memcpy_htod(self, dst: int, src: Any, stream: int = 0) -> None:
        """Copy a host buffer (bytes-like) to the device. The bytes are taken before return.

        The first large upload to a place in an allocation (loading weights, say) goes through the
        content-addressed path: gpud keeps one copy of identical content across tenants and the
        bytes it already holds are not sent (NOTE [dedup protocol] in gpud/hypervisor/dedup.py).
        Later copies to the same place are plain copies: steady-state traffic is not hashed."""
        view = memoryview(src)
        n = view.nbytes
        if n < progress.THRESHOLD:  # the hot path: no bar to consider
            self._htod(dst, view, src, n, stream)
            return
        with progress.transfer(n, f"uploading {n >> 20} MiB"):
            self._htod(dst, view, src, n, stream)

    def _htod(self, dst: int, view: memoryview, src: Any, n: int, stream: int) -> None:
        from shim import dedup

        if n >= dedup.MIN_DEDUP_BYTES and dst not in self._dedup_done:
            up = dedup.uploader_for(self.conn)
            if up is not None and self.is_device_pointer(dst):
                if not view.c_contiguous:
                    view = memoryview(view.tobytes())
                self._check_range(dst, n, "cuMemcpyHtoD")
                self._dedup_done.add(int(dst))
                up.upload(self, int(dst), view.cast("B"), self._stream(stream), self._htod_plain)
                return
        self._htod_plain(dst, src, stream)

    def _htod_plain(self, dst: int, src: Any, stream: int = 0) -> None:
        view = memoryview(src)
        if not view.c_contiguous:
            view = memoryview(view.tobytes())
        view = view.cast("B")
        n = view.nbytes
        if n == 0:
            return
        ring = self._staging() if n >= MIN_SHM_BYTES else None
        if ring is not None:
            self._check_range(dst, n, "cuMemcpyHtoD")
            try:
                ring.htod(int(dst), np.frombuffer(view, dtype=np.uint8).ctypes.data, n, self._stream(stream))
                return
            except RingGone:  # the session moved (NOTE [resume]): this copy goes inline, later ones a new ring
                self._ring = None
        self.conn.post(m.MemcpyHtoD(dst=int(dst), frame=0, stream=self._stream(stream)), [bytes(view)])
        progress.advance(n)

    def memcpy_dtoh(self, src: int, size: int, stream: int = 0, out: Any = None) -> Any:
        """Copy device memory to the host: returns a bytes-like object, or fills ``out`` (writable)."""
        if size == 0:
            return b"" if out is None else out
        ring = self._staging() if size >= MIN_SHM_BYTES else None
        if ring is not None:
            self._check_range(src, size, "cuMemcpyDtoH")
            target = out if out is not None else bytearray(size)
            view = memoryview(target).cast("B")
            if view.readonly or view.nbytes < size:
                raise CudaError(codes.INVALID_VALUE, "cuMemcpyDtoH: destination buffer is read-only or too small")
            try:
                ring.dtoh(int(src), int(size), np.frombuffer(view, dtype=np.uint8).ctypes.data, self._stream(stream))
                return target
            except RingGone:  # the session moved (NOTE [resume]): this copy comes inline, later ones by a new ring
                self._ring = None
        _, bulk = self.conn.call(m.MemcpyDtoH(src=int(src), size=int(size), stream=self._stream(stream)))
        data = bulk[0]
        if out is None:
            return bytes(data)
        memoryview(out).cast("B")[:size] = data
        return out

    def _check_range(self, ptr: int, size: int, what: str) -> None:
        """Fail fast on ranges that overrun one of this context's allocations (gpud checks again;
        addresses outside every allocation, such as module globals, are left to gpud)."""
        try:
            base, n = self.mem_get_address_range(ptr)
        except CudaError:
            return
        if ptr + size > base + n:
            raise CudaError(
                codes.INVALID_VALUE, f"{what}: range 0x{ptr:x}+{size} overruns the allocation 0x{base:x}+{n}"
            )

    def memcpy_dtod(self, dst: int, src: int, size: int, stream: int = 0) -> None:
        if size:
            self.conn.post(m.MemcpyDtoD(dst=int(dst), src=int(src), size=int(size), stream=self._stream(stream)))

    def memset(self, dst: int, value: int, elem_size: int, count: int, stream: int = 0) -> None:
        if elem_size not in (1, 2, 4):
            raise CudaError(codes.INVALID_VALUE, f"cuMemsetD: element size {elem_size} (1, 2 or 4)")
        mask = (1 << (8 * elem_size)) - 1
        self.conn.post(
            m.Memset(
                dst=int(dst),
                value=int(value) & mask,
                elem_size=cast(m.ElemSize, elem_size),
                count=int(count),
                stream=self._stream(stream),
            )
        )

    # ------------------------------------------------------------------ streams and events
    def stream_create(self, flags: int = 0, priority: int = 0) -> int:
        h = self._new_id()
        self.conn.post(m.StreamCreate(stream=h, flags=int(flags), priority=int(priority)))
        self.streams.add(h)
        return h

    def _stream(self, h: int) -> int:
        if h not in (0, 1, 2) and h not in self.streams:
            raise CudaError(codes.INVALID_HANDLE, f"invalid stream handle {h}")
        return 0 if h == 1 else h  # CU_STREAM_LEGACY (1) is the legacy default stream

    def stream_destroy(self, h: int) -> None:
        if h not in self.streams:
            raise CudaError(codes.INVALID_HANDLE, f"invalid stream handle {h}")
        self.streams.discard(h)
        self.conn.post(m.StreamDestroy(stream=h))

    def stream_synchronize(self, h: int = 0) -> None:
        self.conn.call(m.StreamSynchronize(stream=self._stream(h)), timeout_s=None)

    def stream_query(self, h: int = 0) -> bool:
        try:
            self.conn.call(m.StreamQuery(stream=self._stream(h)))
        except CudaError as exc:
            if exc.code == codes.NOT_READY:
                return False
            raise
        return True

    def stream_wait_event(self, stream: int, event: int) -> None:
        if event not in self.events:
            raise CudaError(codes.INVALID_HANDLE, f"invalid event handle {event}")
        self.conn.post(m.StreamWaitEvent(stream=self._stream(stream), event=event))

    def event_create(self, flags: int = 0) -> int:
        h = self._new_id()
        self.conn.post(m.EventCreate(event=h, flags=int(flags)))
        self.events.add(h)
        return h

    def _event(self, h: int) -> int:
        if h not in self.events:
            raise CudaError(codes.INVALID_HANDLE, f"invalid event handle {h}")
        return h

    def ipc_get_event_handle(self, event: int) -> bytes:
        """NOTE [ipc events] (gpud/ipc.py): a 64-byte handle another process of this tenant can open."""
        handle, _ = self.conn.call(m.IpcEventGet(event=self._event(event)))
        return bytes(handle)

    def ipc_open_event_handle(self, handle: bytes) -> int:
        h = self._new_id()
        self.conn.call(m.IpcEventOpen(handle=bytes(handle), event=h))
        self.events.add(h)
        return h

    def event_record(self, event: int, stream: int = 0) -> None:
        self.conn.post(m.EventRecord(event=self._event(event), stream=self._stream(stream)))

    def event_query(self, event: int) -> bool:
        try:
            self.conn.call(m.EventQuery(event=self._event(event)))
        except CudaError as exc:
            if exc.code == codes.NOT_READY:
                return False
            raise
        return True

    def event_synchronize(self, event: int) -> None:
        self.conn.call(m.EventSynchronize(event=self._event(event)))

    def event_elapsed_time(self, start: int, end: int) -> float:
        value, _ = self.conn.call(m.EventElapsed(start=self._event(start), end=self._event(end)))
        return float(value)

    def event_destroy(self, event: int) -> None:
        self.events.discard(self._event(event))
        self.conn.post(m.EventDestroy(event=event))

    def ctx_synchronize(self) -> None:
        ring = self._ring
        if isinstance(ring, StagingRing) and ring.synchronize():  # NOTE [local synchronisation] in shim/shm.py
            return
        self.conn.call(m.CtxSynchronize())

    def synchronize_errors(self) -> None:
        """Report errors of queued calls without waiting for device work."""
        self.conn.call(m.Sync())

    # ------------------------------------------------------------------ modules and launches
    def module_load_data(self, image: bytes | str, fmt: str = "ptx") -> int:
        data = image.encode() if isinstance(image, str) else bytes(image)
        h = self._new_id()
        with progress.waiting(f"compiling a {len(data) >> 10} KiB {fmt.upper()} module on gpud"):
            value, _ = self.conn.call(m.ModuleLoad(module=h, frame=0, format=cast(m.ModuleFormat, fmt)), [data])
        self.modules[h] = value
        return h

    def module_unload(self, module: int) -> None:
        if module not in self.modules:
            raise CudaError(codes.INVALID_HANDLE, f"invalid module handle {module}")
        del self.modules[module]
        for f in [f for f, info in self.functions.items() if info.module == module]:
            del self.functions[f]
        self.conn.post(m.ModuleUnload(module=module))

    def module_get_function(self, module: int, name: str) -> FunctionInfo:
        if module not in self.modules:
            raise CudaError(codes.INVALID_HANDLE, f"invalid module handle {module}")
        h = self._new_id()
        value, _ = self.conn.call(m.ModuleGetFunction(module=module, name=name, function=h))
        info = FunctionInfo(
            handle=h,
            module=module,
            name=value["name"],
            params=tuple(tuple(p) for p in value["params"]),
            attributes=dict(value["attributes"]),
        )
        self.functions[h] = info
        return info

    def module_get_global(self, module: int, name: str) -> tuple[int, int]:
        if module not in self.modules:
            raise CudaError(codes.INVALID_HANDLE, f"invalid module handle {module}")
        addr, size = self.conn.call(m.ModuleGetGlobal(module=module, name=name))[0]
        return int(addr), int(size)

    def launch_kernel(
        self,
        function: int | FunctionInfo,
        grid: Sequence[int],
        block: Sequence[int],
        params: bytes,
        shared_mem: int = 0,
        stream: int = 0,
        cooperative: bool = False,
        checked: bool = False,
    ) -> None:
        """``cooperative``: every block resident at once, grid sync allowed (cuLaunchCooperativeKernel).
        ``checked``: the caller has applied the launch rules already (shim/native/cu_launch.py)."""
        info = function if isinstance(function, FunctionInfo) else self.functions.get(function)
        if info is None:
            raise CudaError(codes.INVALID_HANDLE, f"cuLaunchKernel: invalid function handle {function}")
        g = [int(x) for x in grid]
        b = [int(x) for x in block]
        if not checked:  # proto/launch.py, with the function's own attributes (the CUDA API face checked already)
            a = info.attributes
            rules.check(
                info.name,
                self.devices[0]["attributes"],
                g,
                b,
                int(shared_mem),
                max_threads=a.get("max_threads_per_block"),
                static_shared=a.get("shared_size_bytes", 0),
                params=len(params),
                cooperative=cooperative,
            )
        self.conn.post(
            m.Launch(
                function=info.handle,
                grid=g,
                block=b,
                shared_mem=int(shared_mem),
                stream=self._stream(stream),
                params=bytes(params),
                cooperative=bool(cooperative),
            )
        )


def pack(fmt: str, *values: Any) -> bytes:
    """struct.pack shorthand for kernel parameters (little-endian, no padding)."""
    return struct.pack("<" + fmt, *values)
