"""Kernels that launch kernels: CUDA dynamic parallelism on the CPU target.

NOTE [device launches]: a kernel built with relocatable device code (``nvcc -rdc=true``) launches a child grid with
``child<<<grid, block, shared, stream>>>(args)``, which nvcc turns into two calls into the device runtime (cudadevrt):
``__cudaCDP2GetParameterBufferV2(kernel, grid, block, shared)`` for a buffer the thread fills with the arguments,
then ``__cudaCDP2LaunchDeviceV2(buffer, stream)``. The JIT lowers the kernel's name used as a value
(``mov.u64 %rd, child``) to a handle naming that entry of its own module (jit.emit.abi.kernel_handle), and the two
calls, with ``cudaGetLastError``/``cudaPeekAtLastError``, to host functions (jit/loader.py) that reach the running
grid's ``DeviceLaunches``: the buffer comes from the module's device heap, so it lies inside the launch's allowed
ranges; a launch copies the buffer's bytes (the arguments are taken at the launch, as on a GPU) and queues the
grid. The rest of the device runtime (streams, events, cudaMalloc, error strings) is PTX (jit/devrt.py).

When a grid has finished, the grids it queued run one after another in the order they were launched, each with the
grids it queues in turn run right after it (depth first), the tail launches (``cudaStreamTailLaunch``) after the
others. That is one of the schedules a GPU may choose: CUDA 12's device runtime promises a child grid only that it
starts after its launch and that its parent counts as complete once the child is; a parent cannot wait for a child
(``cudaDeviceSynchronize`` in device code is gone), and grids of different streams have no order between them, so
every device-side stream and event is a token with nothing behind it. A parent that spins on a flag a child sets
(which on a GPU works only when both happen to be resident) waits here until the watchdog stops the launch. The
whole tree is the host's one launch: a child's error is that launch's error, and its printf output follows its
parent's.

Limits: 24 levels of nesting (a deeper launch is ``cudaErrorLaunchMaxDepthExceeded`` for the launching thread, as
on a GPU), ``MAX_PENDING`` grids queued and not yet run per host launch (``cudaErrorLaunchPendingCountExceeded``;
CUDA's default limit is 2048, which programs raise with ``cudaDeviceSetLimit``: the larger bound here is accepted
whatever they set). ``cudaGetLastError`` answers one value per grid, not one per thread.

Copies from the device (``cudaMemcpy/Memset[2D|3D]Async``) queue a ``Copy`` among the grids: ``depth`` slices of
``height`` rows, each end with its own row pitch and slice size; the whole span of each end must lie in the launch's
allowed ranges. Device code reads the launch's device attributes (``cudaDeviceGetAttribute``): the table a launch
was given (gpud's backend passes its device's), else the JIT's own device (jit/device.py); on the same table it asks
for a kernel's attributes and occupancy (``cudaFuncGetAttributes``, ``cudaOccupancyMaxActiveBlocksPerMultiprocessor``)
and the limits (``cudaDeviceGetLimit``): ``DeviceLaunches.query``.
"""

from __future__ import annotations

import ctypes
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from jit.device import default as default_device
from jit.device import function_attributes
from proto import launch as launch_rules
from proto.errors import CudaError

MAX_DEPTH = 24
MAX_PENDING = 8192
TAIL_LAUNCH = 3  # cudaStreamTailLaunch; cudaStreamFireAndForget (4) and named streams run in launch order
# cudaError_t values the device runtime gives
SUCCESS, INVALID_VALUE, MEMORY_ALLOCATION, INVALID_CONFIGURATION, INVALID_PITCH = 0, 1, 2, 9, 12
MAX_DEPTH_EXCEEDED, PENDING_COUNT_EXCEEDED, INVALID_DEVICE_FUNCTION, INVALID_DEVICE = 65, 69, 98, 101
UNSUPPORTED_LIMIT, NOT_SUPPORTED, UNKNOWN = 215, 801, 999
# What device code asks the host (jit/devrt.py's PTX calls __wooly_cdp_query(what, a, b, c)): the answer is the value,
# or QUERY_ERROR with the cudaError_t in the low bits.
DEVICE_ATTRIBUTE, FUNC_ATTRIBUTE, OCCUPANCY, LIMIT = 0, 1, 2, 3
QUERY_ERROR = 1 << 32
# cudaFuncAttributes as device code lays it out (CUDA 11.8 to 13): the fields answered, (offset, bytes, name in
# jit.device.function_attributes); the cluster fields and the reserved words after them are written as zeros
FUNC_FIELDS = (
    (0, 8, "shared_size_bytes"),
    (8, 8, "const_size_bytes"),
    (16, 8, "local_size_bytes"),
    (24, 4, "max_threads_per_block"),
    (28, 4, "num_regs"),
    (32, 4, "ptx_version"),
    (36, 4, "binary_version"),
    (40, 4, "cache_mode_ca"),
    (44, 4, "max_dynamic_shared_size_bytes"),
    (48, 4, "preferred_shmem_carveout"),
)
FUNC_ATTRIBUTES_SIZE = 144
OCCUPANCY_FLAGS = (0, 1)  # cudaOccupancyDefault, cudaOccupancyDisableCachingOverride
# cudaDeviceGetLimit in device code: what this device runtime enforces where it has a bound (the heap, the pending
# launches), CUDA's defaults for the rest (a value the program set with cudaDeviceSetLimit stays on the host)
STACK_SIZE, PRINTF_FIFO, MALLOC_HEAP, SYNC_DEPTH, PENDING_LAUNCHES, L2_FETCH, L2_PERSISTING = range(7)
LIMITS = {STACK_SIZE: 1024, PRINTF_FIFO: 1 << 20, SYNC_DEPTH: 2, L2_FETCH: 64, L2_PERSISTING: 0}
# their cudaGetErrorName / cudaGetErrorString, which device code may ask for (jit/devrt.py supplies them)
ERRORS = {
    SUCCESS: ("cudaSuccess", "no error"),
    INVALID_VALUE: ("cudaErrorInvalidValue", "invalid argument"),
    MEMORY_ALLOCATION: ("cudaErrorMemoryAllocation", "out of memory"),
    INVALID_CONFIGURATION: ("cudaErrorInvalidConfiguration", "invalid configuration argument"),
    INVALID_PITCH: ("cudaErrorInvalidPitchValue", "invalid pitch argument"),
    MAX_DEPTH_EXCEEDED: ("cudaErrorLaunchMaxDepthExceeded", "launch would exceed maximum depth of nested launches"),
    PENDING_COUNT_EXCEEDED: (
        "cudaErrorLaunchPendingCountExceeded",
        "launch failed because launch would exceed cudaLimitDevRuntimePendingLaunchCount",
    ),
    INVALID_DEVICE_FUNCTION: ("cudaErrorInvalidDeviceFunction", "invalid device function"),
    INVALID_DEVICE: ("cudaErrorInvalidDevice", "invalid device ordinal"),
    UNSUPPORTED_LIMIT: ("cudaErrorUnsupportedLimit", "limit is not supported on this architecture"),
    NOT_SUPPORTED: ("cudaErrorNotSupported", "operation not supported"),
    UNKNOWN: ("cudaErrorUnknown", "unknown error"),
}


@dataclass
class Tree:
    """What the grids of one host launch share: the count of queued grids and the launch's deadline."""

    t_end: float | None
    pending: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def remaining(self) -> float | None:
        return None if self.t_end is None else max(0.001, self.t_end - time.monotonic())


@dataclass(frozen=True)
class Copy:
    """A device-side copy or memset (cudaMemcpy/Memset[2D|3D]Async): ``depth`` slices of ``height`` rows of
    ``width`` bytes, rows ``pitch`` and slices ``slice`` bytes apart at each end; ``src`` is the byte of a memset."""

    dst: int
    src: int
    width: int
    height: int = 1
    depth: int = 1
    dpitch: int = 0
    spitch: int = 0
    dslice: int = 0
    sslice: int = 0
    is_set: bool = False

    def span(self, pitch: int, slice_: int) -> int:
        """Bytes from the first byte to the last one copied, at the end with ``pitch`` and ``slice_``."""
        if not (self.width and self.height and self.depth):
            return 0
        return (self.depth - 1) * slice_ + (self.height - 1) * pitch + self.width

    def error(self) -> int:
        """The cudaError_t of a copy with these arguments, before it is queued (SUCCESS: it may run)."""
        if not self.dst or (not self.is_set and not self.src):
            return INVALID_VALUE
        if max(self.width, self.height, self.depth, self.dpitch, self.spitch, self.dslice, self.sslice) >= 1 << 40:
            return INVALID_VALUE
        if max(self.span(self.dpitch, self.dslice), self.span(self.spitch, self.sslice)) >= 1 << 40:
            return INVALID_VALUE  # what the rows and slices reach: no end spans a TiB
        if self.height > 1 and (self.dpitch < self.width or (not self.is_set and self.spitch < self.width)):
            return INVALID_PITCH
        if self.depth > 1 and (
            self.dslice < self.dpitch * self.height or (not self.is_set and self.sslice < self.spitch * self.height)
        ):
            return INVALID_VALUE  # a slice holds fewer rows than the extent (cudaPitchedPtr.ysize < height)
        return SUCCESS


@dataclass
class Queued:
    kernel: Any  # None: a copy (``copy``), queued in the same order as the grids
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared: int
    params: bytes
    tail: bool
    copy: Copy | None = None


class DeviceLaunches:
    """The grids one running grid launches (made at its first device-runtime call: NOTE [device launches])."""

    def __init__(self, kernel: Any, depth: int, tree: Tree, device: Any = None) -> None:
        self.kernel, self.depth, self.tree = kernel, depth, tree
        self.device = device if device is not None else default_device()  # its CUdevice_attribute values
        self.heap = kernel._module.heap()
        self.lock = threading.Lock()
        self.buffers: dict[int, tuple[Any, tuple[int, int, int], tuple[int, int, int], int, int]] = {}
        self.queue: list[Queued] = []
        self.last_error = SUCCESS

    def _fail(self, code: int) -> int:
        self.last_error = code
        return 0

    def buffer(self, handle: int, grid: tuple[int, int, int], block: tuple[int, int, int], shared: int) -> int:
        """cudaGetParameterBufferV2: a buffer for the arguments of ``handle``'s kernel, or 0 (the error kept)."""
        child = self.kernel._module.by_handle(handle)
        with self.lock:
            if child is None:
                return self._fail(INVALID_DEVICE_FUNCTION)
            try:  # the driver's launch rules (proto/launch.py), on the virtual device's attributes
                launch_rules.check(
                    child.name,
                    self.device,
                    grid,
                    block,
                    shared,
                    max_threads=child.max_threads_per_block,
                    static_shared=child.static_shared_bytes,
                )
            except CudaError:
                return self._fail(INVALID_CONFIGURATION)
            if self.depth + 1 > MAX_DEPTH:
                return self._fail(MAX_DEPTH_EXCEEDED)
            with self.tree.lock:
                if self.tree.pending + len(self.buffers) >= MAX_PENDING:
                    return self._fail(PENDING_COUNT_EXCEEDED)
            size = max(8, child.param_buffer_size)
            p = self.heap.alloc(size)
            if not p:
                return self._fail(MEMORY_ALLOCATION)
            self.buffers[p] = (child, grid, block, shared, size)
            return p

    def launch(self, buf: int, stream: int) -> int:
        """cudaLaunchDeviceV2: queue the grid whose arguments ``buf`` holds; a cudaError_t."""
        with self.lock:
            entry = self.buffers.pop(buf, None)
            if entry is None:
                self.last_error = INVALID_VALUE
                return INVALID_VALUE
            child, grid, block, shared, size = entry
            params = ctypes.string_at(buf, size)
            self.heap.free(buf)
            with self.tree.lock:
                self.tree.pending += 1
            self.queue.append(Queued(child, grid, block, shared, params, stream == TAIL_LAUNCH))
            return SUCCESS

    def copy(self, c: Copy) -> int:
        """cudaMemcpy/Memset[2D|3D]Async on a device-side stream: queued behind the grids launched before it."""
        with self.lock:
            err = c.error()
            if err != SUCCESS:
                self.last_error = err
                return err
            with self.tree.lock:
                if self.tree.pending >= MAX_PENDING:
                    self.last_error = PENDING_COUNT_EXCEEDED
                    return PENDING_COUNT_EXCEEDED
                self.tree.pending += 1
            self.queue.append(Queued(None, (0, 0, 0), (0, 0, 0), 0, b"", False, c))
            return SUCCESS

    def query(self, what: int, a: int, b: int, c: int) -> int:
        """What device code asks (DEVICE_ATTRIBUTE, FUNC_ATTRIBUTE, OCCUPANCY, LIMIT): the value, or QUERY_ERROR with
        the cudaError_t, which is then also the grid's last error."""
        answer = self._answer(what, a, b, c)
        if answer & QUERY_ERROR:
            with self.lock:
                self.last_error = answer & 0xFFFFFFFF
        return answer

    def _answer(self, what: int, a: int, b: int, c: int) -> int:
        if what == DEVICE_ATTRIBUTE:  # (attribute, device): the device is the kernel's own, 0
            if b != 0:
                return QUERY_ERROR | INVALID_DEVICE
            v = self.device.get(a)
            if v is None:
                v = self.device.get(str(a))  # keys are strings after a msgpack round trip
            return QUERY_ERROR | INVALID_VALUE if v is None else int(v) & 0xFFFFFFFF
        if what == LIMIT:
            if a == MALLOC_HEAP:
                return self.heap.size
            if a == PENDING_LAUNCHES:
                return MAX_PENDING
            return LIMITS[a] if a in LIMITS else QUERY_ERROR | UNSUPPORTED_LIMIT
        if what not in (FUNC_ATTRIBUTE, OCCUPANCY):
            return QUERY_ERROR | INVALID_VALUE
        kernel = self.kernel._module.by_handle(a)  # a kernel of this module named as a value (a device function: None)
        if kernel is None:
            return QUERY_ERROR | INVALID_DEVICE_FUNCTION
        attrs = function_attributes(kernel, self.device)
        if what == FUNC_ATTRIBUTE:  # (kernel, field of FUNC_FIELDS)
            return int(attrs[FUNC_FIELDS[b][2]]) & 0xFFFFFFFF if 0 <= b < len(FUNC_FIELDS) else QUERY_ERROR | UNKNOWN
        # OCCUPANCY: (kernel, flags << 32 | block size, dynamic shared bytes): the driver's rule (proto/launch.py)
        flags, block = b >> 32, b & 0xFFFFFFFF
        if flags not in OCCUPANCY_FLAGS or not 0 < block < 1 << 31:
            return QUERY_ERROR | INVALID_VALUE
        return launch_rules.blocks_per_sm(
            self.device, block, attrs["max_threads_per_block"], attrs["shared_size_bytes"] + c
        )

    def _do_copy(self, c: Copy, allowed_ranges: Any) -> None:
        module = self.kernel._module
        ends = (
            ((c.dst, c.span(c.dpitch, c.dslice)),)
            if c.is_set
            else (
                (c.dst, c.span(c.dpitch, c.dslice)),
                (c.src, c.span(c.spitch, c.sslice)),
            )
        )
        if not ends[0][1]:
            return  # an empty extent copies nothing
        if module.bounds_check:  # what the kernel could reach: the tenant's allocations, globals, device heap
            from jit.checked import for_ranges

            own = [(module._data_addr, max(1, module._data_size)), (self.heap.base, self.heap.size)]
            table = for_ranges(allowed_ranges or ()).with_spans(own)
            for addr, n in ends:
                if not table.covers(addr, n):
                    from jit.errors import CUDA_ERROR_ILLEGAL_ADDRESS, JitError

                    what = "cudaMemsetAsync" if c.is_set else "cudaMemcpyAsync"
                    if c.height > 1 or c.depth > 1:
                        what = what.replace("Async", "3DAsync" if c.depth > 1 else "2DAsync")
                    raise JitError(
                        CUDA_ERROR_ILLEGAL_ADDRESS,
                        f"device-side {what} in {self.kernel.name}: {n} bytes at 0x{addr:x} "
                        "outside the launch's allowed ranges",
                    )
        if c.height == 1 and c.depth == 1:
            if c.is_set:
                ctypes.memset(c.dst, c.src & 0xFF, c.width)
            else:
                ctypes.memmove(c.dst, c.src, c.width)
            return
        # rows and slices apart: strided views of the two ends (numpy copies through a temporary where they overlap)
        shape = (c.depth, c.height, c.width)
        dst = _strided(c.dst, ends[0][1], shape, (c.dslice, c.dpitch))
        if c.is_set:
            dst[...] = c.src & 0xFF
        else:
            dst[...] = _strided(c.src, ends[1][1], shape, (c.sslice, c.spitch))

    def error(self, clear: bool) -> int:
        with self.lock:
            e = self.last_error
            if clear:
                self.last_error = SUCCESS
            return e

    def discard(self) -> None:
        """The grid failed: free the buffers it holds and drop what it queued."""
        self.discard_buffers()
        with self.lock, self.tree.lock:
            self.tree.pending -= len(self.queue)
            self.queue = []

    def run(self, **launch: Any) -> tuple[str, float]:
        """Run the queued grids (NOTE [device launches]): their printf output and core-seconds, or raise the first
        error (a JitError whose ``printf`` holds what ran before it)."""
        self.discard_buffers()
        with self.lock:
            order = [q for q in self.queue if not q.tail] + [q for q in self.queue if q.tail]
            self.queue = []
        text: list[str] = []
        core_s = 0.0
        for i, q in enumerate(order):
            with self.tree.lock:
                self.tree.pending -= 1
            try:
                if q.copy is not None:
                    self._do_copy(q.copy, launch.get("allowed_ranges"))
                    continue
                r = q.kernel.launch(
                    q.grid,
                    q.block,
                    q.shared,
                    q.params,
                    deadline_s=self.tree.remaining(),
                    depth=self.depth + 1,
                    tree=self.tree,
                    **launch,
                )
            except Exception as e:
                with self.tree.lock:
                    self.tree.pending -= len(order) - i - 1
                e.printf = "".join(text) + getattr(e, "printf", "")  # type: ignore[attr-defined]
                raise
            text.append(r.printf)
            core_s += r.core_s
        return "".join(text), core_s

    def discard_buffers(self) -> None:
        with self.lock:
            for p in self.buffers:
                self.heap.free(p)
            self.buffers.clear()


def _strided(addr: int, span: int, shape: tuple[int, int, int], steps: tuple[int, int]) -> Any:
    """The bytes at ``addr`` as a (slices, rows, bytes) array ``steps`` = (slice, row) bytes apart."""
    import numpy as np

    flat = np.ctypeslib.as_array((ctypes.c_uint8 * span).from_address(addr))
    return np.lib.stride_tricks.as_strided(flat, shape=shape, strides=(steps[0], steps[1], 1))
