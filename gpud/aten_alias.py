"""A torch tensor over another library's device memory in the same program (``torch.from_dlpack`` of a CuPy or
numba array, ``torch.as_tensor`` of an object with ``__cuda_array_interface__``), and a tensor's memory for another
library (``cupy.from_dlpack(t)``, ``cupy.asarray(t)``, ``numba.cuda.as_cuda_array(t)``): the broker's half.

NOTE [device memory aliases]: on a GPU, ``torch.from_dlpack(cupy_array)`` makes no copy: the tensor and the array
are one piece of device memory, and a kernel's writes through either are seen by the other. Here a driver-API
allocation (what CuPy, numba and the cudart programs get from ``cuMemAlloc``) is pages of gpud's broker, at the
session's device addresses, and a torch tensor is memory of the tenant's executor process (NOTE [executors]). To
make them one, the broker turns the allocation's pages into a memfd the first time a tensor asks for them: the
allocation's bytes go into a memfd that is then mapped ``MAP_SHARED | MAP_FIXED`` over the same addresses (device
pointers stay valid, kernels see no difference), and the executor maps the same memfd and builds the tensor on it
(``set_`` with the program's shape, strides and offset, bounds-checked against the allocation). The memfd is
sealed against shrinking and growing before the executor sees it: no process can make the broker's mapping fault.

- **Only the session's own allocations.** The pointer must lie in an allocation of the calling session (not a
  module's globals, not another session's or tenant's memory): ``CUDA_ERROR_INVALID_VALUE`` naming the address.
- **Ordering.** The call waits for the session's work on every stream, so the tensor sees what kernels wrote
  before it (what DLPack's ``stream`` argument asks of a producer), and the conversion copies pages nothing writes.
- **Memory is charged once**, to the allocation: the tensor's storage is not charged again. ``cuMemFree`` of an
  allocation a tensor still maps keeps its pages and its charge until the executor's last tensor on it is gone
  (the drop comes back as a token, as a dedup'd storage's does); only then is the memory given back.
- **Lifetime on the client.** As a DLPack capsule's deleter keeps the producer's memory for the tensor's storage,
  the client keeps the producer object (the array, or the capsule it calls the deleter of) until gpud reports that
  storage dead: each alias reply lists the session's storages that died since the last one.
- **What an alias excludes**: the allocation is never mapped from the dedup store afterwards (that would unshare
  it), it stays resident when its tenant sleeps, and the session cannot move to another node.
- **The other way** (``export``): the tensor's storage moves onto a memfd the broker lends (the executor copies its
  bytes there and ``set_``s every tensor on that storage onto it), which the broker maps at a new allocation of the
  session; the charge moves from the storage to the allocation (``memory_allocated()`` still counts it), and the
  allocation is freed, as by cuMemFree, when the storage dies (a consumer holds the tensor while it uses the
  memory: a DLPack capsule, or the owner CuPy and numba keep for ``__cuda_array_interface__``). A storage on lent
  memory already answers its allocation's address; one shared with another process is not exported.
- **The NVIDIA backend** refuses both with ``CUDA_ERROR_NOT_SUPPORTED``: there the executor's own CUDA context would
  open the memory through ``cuMemExportToShareableHandle`` (not built; no device to check it on).
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Callable
from typing import Any

from gpud import vmem
from gpud.errors import CudaError, codes
from gpud.streams import when_all
from proto import aten as W

Session = Any  # gpud.session's (not imported: gpud/aten.py, which imports this module, is imported by it)
Region = Any

_lock = threading.RLock()  # a finaliser (the last tensor's drop) may run on a thread already holding it
_MAX_DIMS = 64


class Alias:
    """An allocation whose pages are a memfd shared with the tenant's executor, and how many tensors map it."""

    __slots__ = ("allocation", "charged", "exported", "fd", "freed", "length", "live", "size")

    def __init__(self, allocation: Any, fd: int, length: int, exported: bool = False) -> None:
        self.allocation = allocation
        self.fd = fd
        self.length = length
        self.live = 0  # storages in the executor on these pages
        self.freed = False  # cuMemFree came while some still lived
        self.charged = False  # the allocation's charge was taken back when it was freed (see keep)
        self.exported = exported  # made for a tensor's memory (export): freed with its last storage
        self.size = allocation.size if allocation is not None else 0  # bytes charged for it


def _aliases(session: Session) -> dict[int, Alias]:
    got: dict[int, Alias] = session.ext.setdefault("aten.aliases", {})
    return got


def _args(op: list[Any]) -> tuple[int, int, str, list[int], list[int]]:
    args = op[1] if len(op) > 1 and isinstance(op[1], list) else []
    if len(args) != 5:
        raise CudaError(codes.INVALID_VALUE, "wooly.alias_device takes [pointer, bytes, dtype, shape, stride]")
    ptr, span, dt, shape, stride = args
    if type(ptr) is not int or ptr <= 0 or type(span) is not int or span < 0 or not isinstance(dt, str):
        raise CudaError(codes.INVALID_VALUE, "wooly.alias_device: pointer > 0, bytes >= 0 and a dtype name")
    for v in (shape, stride):
        if not isinstance(v, list) or len(v) > _MAX_DIMS or not all(type(x) is int for x in v):
            raise CudaError(codes.INVALID_VALUE, "wooly.alias_device: shape and stride are lists of integers")
    if len(shape) != len(stride):
        raise CudaError(codes.INVALID_VALUE, "wooly.alias_device: shape and stride differ in length")
    return ptr, span, dt, shape, stride


def call(session: Session, op: list[Any], holder: Any) -> tuple[Any, Callable[[], tuple[Any, list[Any]]]]:
    """``wooly.alias_device`` from the client: the tensor over ``[pointer, pointer + bytes)`` of one of the
    session's allocations, described as a synchronous op's result, with the storages of earlier aliases that
    died since (``dead``). Returns the marker of the queued work and what produces the reply (gpud/aten.py)."""
    ptr, span, dt, shape, stride = _args(op)
    if not session.backend.host_memory:
        raise CudaError(
            codes.NOT_SUPPORTED,
            f"a torch tensor over another library's device memory (torch.from_dlpack) is not supported on gpud's "
            f"{session.backend.kind} backend yet; copy it (torch.tensor(x.get()) or cupy.asnumpy)",
        )
    region = session.find(ptr, max(span, 1), "torch.from_dlpack")
    alloc = region.allocation
    if alloc is None or region.start % vmem.PAGE:
        raise CudaError(
            codes.INVALID_VALUE,
            f"torch.from_dlpack: 0x{ptr:x} is a module's global memory, not an allocation (cuMemAlloc)",
        )
    marker, result = _after_all_work(
        session, holder, lambda: _alias(session, holder, region, alloc, ptr - region.start, dt, shape, stride)
    )

    def produce() -> tuple[Any, list[Any]]:
        return {**result(), "dead": session.ext.pop("aten.alias_dead", [])}, []

    return marker, produce


def _after_all_work(session: Session, holder: Any, work: Callable[[], Any]) -> tuple[Any, Callable[[], Any]]:
    """Queue ``work`` on the session's default stream after the work of every stream; returns its marker and what
    gives its result (or raises its error, or an earlier op's) once the marker is done."""
    box: dict[str, Any] = {}

    def run() -> None:
        if holder.closed:
            return
        try:
            box["value"] = work()
        except CudaError as exc:
            box["error"] = exc

    marker = session.engine.enqueue(0, run, deps=session.engine.tails())

    def result() -> Any:
        session.check_errors()
        if "error" in box:
            raise box["error"]
        if "value" not in box:
            raise CudaError(codes.INVALID_CONTEXT, "the call did not run (the session closed)")
        return box["value"]

    return marker, result


def _alias(
    session: Session,
    holder: Any,
    region: Region,
    alloc: Any,
    offset: int,
    dt: str,
    shape: list[int],
    stride: list[int],
) -> dict[str, Any]:
    with _lock:
        if session.regions.get(region.start) is not region:
            raise CudaError(codes.INVALID_VALUE, f"torch.from_dlpack: 0x{region.start:x} was freed meanwhile")
        al = _share(session, region, alloc)
        al.live += 1  # for the storage about to be built
    named: list[int] = []
    token = holder.drop_token(lambda: _dropped(session, al, named[0], True))
    named.append(token)
    try:
        desc = holder.alias(
            [W.OP_ALIAS_DEVICE, [0, offset, alloc.size, dt, shape, stride, token], {}, []],
            al.fd,
            al.length,
        )
    except BaseException:
        undo = holder.take_token(token)
        if undo is not None:
            undo()
        raise
    _lent(session)[token] = al
    return {"t": desc["t"], "token": token}


def _lent(session: Session) -> dict[int, Alias]:
    """Token of a storage on lent memory -> its Alias (what an export of a tensor on it answers)."""
    got: dict[int, Alias] = session.ext.setdefault("aten.lent", {})
    return got


def _share(session: Session, region: Region, alloc: Any) -> Alias:
    """The allocation's memfd, made on first use: its pages become the file's, at the same addresses."""
    if alloc.alias is not None:
        al: Alias = alloc.alias
        return al
    session.server.hv.dedup.break_range(session, region.start, region.size)  # its pages become its own first
    n = vmem.page_round(alloc.size)
    fd = os.memfd_create("wooly-alias", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, n)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        vmem.adopt_shared(region.start, fd, n)
    except OSError as exc:
        os.close(fd)
        raise CudaError(codes.OUT_OF_MEMORY, f"torch.from_dlpack: cannot share the allocation's pages: {exc}") from None
    alloc.alias = Alias(alloc, fd, n)
    _aliases(session)[region.start] = alloc.alias
    return alloc.alias


def _dropped(session: Session, al: Alias, token: int, report: bool = False) -> None:
    """The executor's last tensor on one lent storage is gone: the client may let the producer go (``report``: an
    alias's token, listed with the next alias reply); memory whose allocation was freed meanwhile (or that was made
    for the storage) goes now. Any thread: the session's tables change on the I/O loop."""
    with _lock:
        al.live -= 1
        if report:
            session.ext.setdefault("aten.alias_dead", []).append(token)
        _lent(session).pop(token, None)
        if al.live:
            return
        if al.allocation is None:  # an export never mapped (its session ended first, or the mapping failed)
            _forget(session, al)
            session.server.release_memory(session, al.size)
            return
        if not al.freed:
            if al.exported and al.allocation is not None:
                start = al.allocation.addr

                def drop() -> None:  # as cuMemFree does; the client hears of it with its next export
                    session.drop_allocation(start)
                    session.ext.setdefault("aten.export_gone", []).append(start)

                session.server.call_on_loop(drop)
            return
        _forget(session, al)
    if al.charged:
        session.server.release_memory(session, al.allocation.size)
    alloc = al.allocation
    session.server.call_on_loop(lambda: when_all(session.engine.tails(), lambda: session.backend.free(alloc)))


def _forget(session: Session, al: Alias) -> None:
    for start, other in list(_aliases(session).items()):
        if other is al:
            del session.ext["aten.aliases"][start]
    try:
        os.close(al.fd)
    except OSError:
        pass
    al.fd = -1


def keep(session: Session, allocation: Any) -> bool:
    """cuMemFree (or the session's end) of an aliased allocation: its pages and charge stay while tensors map it
    (a KEEP_HOOKS hook, through gpud/aten.py)."""
    al: Alias = allocation.alias
    with _lock:
        al.freed = True
        if not al.live:
            _forget(session, al)
            return False
        if not session.closed:
            try:
                session.server.reserve_memory(session, allocation.size)  # _release_allocation gave it back
                al.charged = True
            except CudaError:
                pass  # over the quota now: the pages stay uncharged until the tensors go (soon, or at the end)
        return True


# ---------------------------------------------------------------- the other way: a tensor's memory to the driver API
def export(session: Session, op: list[Any], holder: Any) -> tuple[Any, Callable[[], tuple[Any, list[Any]]]]:
    """``wooly.export_device``: the device address of a tensor's first element, for CuPy or numba
    (``cupy.from_dlpack(t)``, ``__cuda_array_interface__``). The storage's bytes move into a memfd the broker
    maps at a new allocation of the session (the executor's tensors on that storage follow it), charged to the
    allocation instead of the storage; the allocation goes when the storage does. A storage on lent memory
    already (an earlier export, or an alias) answers its allocation's address."""
    args = op[1] if len(op) > 1 and isinstance(op[1], list) else []
    if len(args) != 1:
        raise CudaError(codes.INVALID_VALUE, "wooly.export_device takes [tensor]")
    if not session.backend.host_memory:
        raise CudaError(
            codes.NOT_SUPPORTED,
            f"a cuda tensor's memory for another library (cupy.from_dlpack, __cuda_array_interface__) is not "
            f"supported on gpud's {session.backend.kind} backend yet; copy it (t.cpu())",
        )
    marker, result = _after_all_work(session, holder, lambda: _export(session, holder, args[0]))

    def produce() -> tuple[Any, list[Any]]:  # on the I/O loop: the session's tables change here
        al, offset, placed = result()
        if not placed:
            _place(session, al)
        a = al.allocation
        if a is None:
            raise CudaError(codes.INVALID_VALUE, "the tensor's memory went while it was being handed out")
        gone = session.ext.pop("aten.export_gone", [])
        return {"ptr": a.addr + offset, "base": a.addr, "size": a.size, "gone": gone}, []

    return marker, produce


def _export(session: Session, holder: Any, tensor: Any) -> tuple[Alias, int, bool]:
    got = holder.alias([W.OP_EXPORT_DEVICE, [tensor], {}, []], -1, 0)
    offset = int(got["offset"])
    if "token" in got:
        with _lock:
            al = _lent(session).get(got["token"])
        if al is None:
            raise CudaError(codes.INVALID_VALUE, "the tensor's memory went while it was being handed out")
        return al, offset, True
    n = int(got["need"])
    if n <= 0:
        raise CudaError(codes.INVALID_VALUE, "an empty cuda tensor has no device memory to hand out")
    session.server.reserve_memory(session, n)  # the allocation pays from now on (the storage stops)
    length = vmem.page_round(n)
    fd = -1
    try:
        fd = os.memfd_create("wooly-export", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.ftruncate(fd, length)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
    except OSError as exc:
        if fd >= 0:
            os.close(fd)
        session.server.release_memory(session, n)
        raise CudaError(codes.OUT_OF_MEMORY, f"cannot hand out a cuda tensor's {n} bytes: {exc}") from None
    al = Alias(None, fd, length, exported=True)
    al.live = 1
    named: list[int] = []
    token = holder.drop_token(lambda: _dropped(session, al, named[0]))
    named.append(token)
    try:
        holder.alias([W.OP_EXPORT_DEVICE, [tensor, 0, token], {}, []], fd, length)
    except BaseException:
        holder.take_token(token)
        os.close(fd)
        session.server.release_memory(session, n)
        raise
    with _lock:
        _lent(session)[token] = al
    al.size = n
    return al, offset, False


def _place(session: Session, al: Alias) -> None:
    """Map an export's memfd at a new allocation of the session (on the I/O loop; charged already)."""
    n = al.size
    if session.arena is None:
        session.arena = session.backend.new_arena()
    a = session.backend.alloc(n, session.arena)
    try:
        vmem.map_shared(a.addr, al.fd, al.length)
    except OSError as exc:
        session.backend.free(a)
        raise CudaError(codes.OUT_OF_MEMORY, f"cannot map a cuda tensor's memory for the driver API: {exc}") from None
    a.alias = al
    with _lock:
        al.allocation = a
        _aliases(session)[a.addr] = al
    session.add_allocation(a)
