"""The client's half of the ATen op stream: queue, flushing, synchronous calls, frees, errors.

NOTE [op streaming]: ops are appended to a queue and sent to gpud as one ``aten_batch`` whenever
``FLUSH_OPS`` ops are waiting (so gpud starts computing while the script runs ahead), whenever a
flusher thread finds ops older than ``FLUSH_AGE_S``, and before every synchronous call. Frees of
tensors the script dropped ride at the end of the next batch (a tensor dies only after every op
that names it was queued, so that order is safe). Only ``call()`` waits for gpud: ``item()``,
``cpu()``, printing, data-dependent shapes, synchronize, events and memory statistics.
"""

from __future__ import annotations

import atexit
import itertools
import os
import threading
import time
from typing import Any

from proto import aten as W
from proto import errors as codes
from proto import messages as m
from proto import settings as config
from proto.errors import CudaError

FLUSH_OPS = config.quiet_client().torch_flush_ops
FLUSH_AGE_S = config.quiet_client().torch_flush_age_s
FLUSH_BYTES = 8 << 20

_handles = itertools.count(1)


def new_handle() -> int:
    return next(_handles)


tensor_ref = W.tensor_ref  # a tensor's wire form (NOTE [aten values] in proto/aten.py)


class OpStream:
    def __init__(self, device: int = 0) -> None:
        from shim.runtime import device_driver

        self.device = device  # the program's cuda:N (NOTE [devices of a program] in shim/runtime.py)
        self.driver = device_driver(device)
        self.conn = self.driver.conn
        self._lock = threading.RLock()
        self._ops: list[list[Any]] = []
        self._bulk: list[Any] = []
        self._bulk_bytes = 0
        self._first_t = 0.0
        self.frees: list[int] = []
        self.capture: Any = None  # a shim.torch.graphs.Capture while a CUDA graph is captured
        self.closed = False
        self.ops_sent = 0
        self.calls = 0
        self._flusher = threading.Thread(target=self._flush_loop, name="wooly-torch-flush", daemon=True)
        self._flusher.start()

    # ------------------------------------------------------------------ queueing
    def push(self, op: list[Any]) -> None:
        with self._lock:
            if self.capture is not None:
                self.capture.record(op)
                return
            if not self._ops:
                self._first_t = time.monotonic()
            self._ops.append(op)
            if len(self._ops) >= FLUSH_OPS:
                self._flush_locked()

    def upload(self, h: int, data: Any, dtype: str, shape: list[int]) -> None:
        """Queue host bytes (a buffer of a contiguous tensor) to become tensor ``h`` on gpud; they are taken before
        this returns."""
        from shim import dedup  # large tensors go content-addressed: NOTE [tensor dedup] (gpud/hypervisor)

        if self.capture is not None:
            raise self.capture.refuse("a copy from host memory")
        up = dedup.uploader_for(self.conn)
        if up is not None and memoryview(data).nbytes >= dedup.MIN_DEDUP_BYTES:
            with self._lock:
                self._flush_locked()  # the tensor is built in order with the ops queued before it
                try:
                    dedup.upload_tensor(self.conn, up, h, data, dtype, shape)
                except CudaError as exc:
                    raise as_torch_error(exc) from None
            return
        with self._lock:
            if not self._ops:
                self._first_t = time.monotonic()
            self._ops.append([W.OP_UPLOAD, [len(self._bulk), dtype, shape], {}, [h]])
            # The bytes are taken now, as a CUDA copy from pageable memory takes them before it returns: the
            # program may change its host tensor right after ``.to("cuda")`` (a reused batch buffer), and the
            # queue is sent later (found by the soak: the device copy saw the later values).
            self._bulk.append(bytes(memoryview(data).cast("B")))
            self._bulk_bytes += memoryview(data).nbytes
            if self._bulk_bytes >= FLUSH_BYTES or len(self._bulk) >= 1000:
                self._flush_locked()

    def free(self, h: int) -> None:
        self.frees.append(h)  # list.append is atomic: safe from __del__ on any thread

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if self.frees:
            frees, self.frees = self.frees, []
            cap = self.capture
            if cap is not None:  # temporaries of the capture are freed inside the graph (NOTE [aten graphs])
                mine = [h for h in frees if h in cap.created]
                if mine:
                    cap.ops.append([W.OP_FREE, mine, {}, []])
                    frees = [h for h in frees if h not in cap.created]
            if frees:
                self._ops.append([W.OP_FREE, frees, {}, []])
        if not self._ops:
            return
        ops, bulk = self._ops, self._bulk
        self._ops, self._bulk, self._bulk_bytes = [], [], 0
        self.ops_sent += len(ops)
        try:
            self.conn.post(m.AtenBatch(ops=ops, frame=0), bulk)
            self.conn.flush()
        except CudaError as exc:
            raise as_torch_error(exc) from None

    def _flush_loop(self) -> None:
        while not self.closed:
            time.sleep(FLUSH_AGE_S)
            if self._ops and time.monotonic() - self._first_t >= FLUSH_AGE_S:
                if self._lock.acquire(blocking=False):
                    try:
                        if self._ops and not self.closed and self.conn.alive:
                            self._flush_locked()
                    except Exception:  # noqa: BLE001 - the next synchronous call reports it
                        pass
                    finally:
                        self._lock.release()

    # ------------------------------------------------------------------ CUDA graph capture
    def begin_capture(self, capture: Any) -> None:
        with self._lock:
            if self.capture is not None:
                raise RuntimeError(
                    "CUDA error: operation not permitted when stream is capturing (wooly: one CUDA "
                    "graph capture at a time per process)"
                )
            self._flush_locked()
            self.capture = capture

    def end_capture(self) -> Any:
        with self._lock:
            self._flush_locked()  # the capture's own frees join its op list
            cap, self.capture = self.capture, None
            return cap

    # ------------------------------------------------------------------ synchronous calls
    def call(self, op: list[Any], op_name: str = "") -> tuple[Any, list[Any]]:
        with self._lock:
            if self.capture is not None:
                raise self.capture.refuse(f"{op_name or op[0]}, which waits for its result,")
            self._flush_locked()
            self.calls += 1
            try:
                return self.conn.call(m.AtenCall(op=op, frame=0))
            except CudaError as exc:
                raise as_torch_error(exc, op_name) from None

    def driver_call(self, fn: Any, *args: Any) -> Any:
        """Run a driver-API call after the queued ops (events, synchronize)."""
        with self._lock:
            if self.capture is not None:
                raise self.capture.refuse(f"{getattr(fn, '__name__', 'a driver call')}")
            self._flush_locked()
            try:
                return fn(*args)
            except CudaError as exc:
                raise as_torch_error(exc) from None

    def close(self) -> None:
        if self.closed:
            return
        try:
            if self.conn.alive:
                self.flush()
        except Exception:  # noqa: BLE001 - never fail interpreter exit
            pass
        self.closed = True


def as_torch_error(exc: CudaError, op_name: str = "") -> Exception:
    """The exception PyTorch raises for the same failure on a real GPU."""
    import torch

    msg = exc.message
    if exc.code == codes.OUT_OF_MEMORY:
        return torch.OutOfMemoryError(f"CUDA out of memory. {msg}")
    if exc.code == codes.NOT_SUPPORTED:
        head = msg.split(":", 1)[0]
        name = "aten::" + head.split(".")[1] if head.startswith("aten.") and head.count(".") >= 1 else op_name or head
        return NotImplementedError(
            f"Could not run '{name}' with arguments from the 'CUDA' backend: gpud cannot run it ({msg})"
        )
    return RuntimeError(
        f"CUDA error: {msg}" if exc.code == codes.DEVICE_UNAVAILABLE else f"CUDA error: {exc.name}: {msg}"
    )


_stream: OpStream | None = None  # cuda:0's, the stream of nearly every program
_streams: dict[int, OpStream] = {}  # every device's, once used (cuda:0's too)
MULTI = [False]  # a second device's stream exists: ops look at their tensors' devices (shim/torch/dispatch.py)
# torch.cuda.is_initialized(): CUDA's lazy initialisation has happened in the program's eyes, as PyTorch's
# _lazy_init marks it (the first cuda tensor, set_device, current_device, synchronize, a Stream or an Event...).
# Opening the session early (the prewarm) is not that: DeviceMesh picks a rank's device by LOCAL_RANK only while
# CUDA is not initialised, and a program may decide on fork or spawn by it.
INITIALIZED = [False]
_stream_lock = threading.Lock()
_pending_seed: list[int] = []


def stream(device: int = 0) -> OpStream:
    """The op stream of the program's ``cuda:device``, opened (with its session) on first use."""
    global _stream
    if device == 0:
        s = _stream
        if s is not None:
            return s
    else:
        s = _streams.get(device)
        if s is not None:
            return s
    with _stream_lock:
        s = _streams.get(device)
        if s is None:
            try:
                s = OpStream(device)
            except CudaError as exc:
                raise as_torch_error(exc) from None
            if _pending_seed:
                s.push([W.OP_SEED, [_pending_seed[-1]], {}, []])
            _streams[device] = s
            if device == 0:
                _stream = s
                _tell_guard()
            else:
                MULTI[0] = True
        return s


# Set by shim/torch/device.py when its C++ device guard is installed (NOTE [a cuda device in a CPU build]): the
# guard keeps each thread's current device, and is told how many devices the program has.
GUARD: dict[str, Any] = {"active": False, "set_count": None}


def _tell_guard() -> None:
    """The C++ device guard counts the program's devices (the autograd engine starts one thread per device)."""
    from shim.runtime import visible

    set_count = GUARD["set_count"]
    if set_count is not None:
        try:
            set_count(len(visible()))
        except CudaError:
            pass


def current() -> OpStream | None:
    return _stream


def opened() -> list[OpStream]:
    """The streams opened so far, by device."""
    return [_streams[d] for d in sorted(_streams)]


def current_device() -> int:
    """The calling thread's current CUDA device (torch.cuda.set_device, ``with torch.cuda.device(i)``): kept by the
    device guard in C++ (shim/torch/native/cuda_device.cpp), which the autograd engine and C++ composites use too."""
    if not GUARD["active"]:
        return 0
    import torch

    return int(torch._C._accelerator_getDeviceIndex())


def index_of(device: Any) -> int:
    """The program's device index ``device`` names (an int, "cuda:1", a torch.device, a torch.cuda.device); one
    that names none is the current device."""
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        import torch

        device = torch.device(device)
    idx = getattr(device, "index", None) if not hasattr(device, "idx") else device.idx
    return current_device() if idx is None else int(idx)


def stream_of(device: Any) -> OpStream:
    """The stream of the device ``device`` names (an ordinal the program lacks: CUDA's invalid-device error)."""
    return stream(index_of(device))


def for_tensor(t: Any) -> OpStream:
    """The stream of the device a remote tensor lives on."""
    return stream(t._d)


def storage_info(x: Any, device: int) -> list[int]:
    """[id, bytes] of the storage on gpud of the tensor whose wire form is ``x`` (NOTE [storage resize] in
    shim/torch/storage.py)."""
    value, _ = stream(device).call([W.OP_STORAGE_INFO, [x], {}, []], "untyped_storage")
    return [int(value[0]), int(value[1])]


def free_later(t_device: int, h: int) -> None:
    """Free handle ``h`` of device ``t_device`` with that stream's next batch (safe from ``__del__``)."""
    s = _stream if t_device == 0 else _streams.get(t_device)
    if s is not None:
        s.frees.append(h)


def seed(value: int) -> None:
    """Seed gpud's generator of every device of the program (now, and for devices opened later)."""
    value = int(value) & ((1 << 64) - 1)
    _pending_seed[:] = [value]
    for s in opened():
        s.push([W.OP_SEED, [value], {}, []])


def _after_fork_in_child() -> None:
    """NOTE [fork] (shim/runtime.py): a forked child (a DataLoader worker) has none of its parent's sessions. Their
    streams are forgotten, not used: another thread of the parent may have held a stream's lock when it forked,
    and a child that seeds its generator (every DataLoader worker calls torch.manual_seed) would wait for it
    forever. A seed in the child is kept for a session it will never have; CUDA calls there fail as in a child of
    a real CUDA process."""
    global _stream, _stream_lock
    _stream = None
    _streams.clear()
    MULTI[0] = False
    _stream_lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


@atexit.register
def _close() -> None:
    for s in opened():
        s.close()
