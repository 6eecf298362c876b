"""Runs ATen ops for one session on gpud's torch (see NOTE [aten executor] in gpud/aten.py).

An ``Executor`` runs in the tenant's executor process (NOTE [executors] in gpud/executors.py), or in gpud
itself where executors are off. Either way one thread calls into it at a time, in the session's stream order,
so its tables need no lock. What it needs from its host (charging memory, reporting errors) is ``Host``.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import re
import threading
import time
import weakref
from collections import OrderedDict
from typing import Any, Protocol, cast

import numpy as np
import torch

from gpud import aten_share as share
from gpud.aten_graph import Graphs
from gpud.aten_guards import CHECKED_EQUIVALENTS, guard_for
from gpud.aten_sparse import COMPRESSED as SPARSE_COMPRESSED
from gpud.aten_sparse import SUBSTITUTES as SPARSE_SUBSTITUTES
from gpud.aten_sparse import describe as sparse_describe
from gpud.aten_sparse import storage_key as sparse_storage_key
from gpud.errors import CudaError, codes
from proto import aten as W

_NAME_RE = re.compile(r"^aten\.([A-Za-z0-9_]+)(?:\.([A-Za-z0-9_]+))?$")
# NOTE [extension operators]: operators of libraries other than ATen that models call on CUDA tensors and that
# gpud runs with its own copy of the library, in the tenant's executor like any ATen op: torchvision's detection
# ops (nms, roi_align, roi_pool, ps_roi_align, ps_roi_pool, deform_conv2d and their backward ops). The namespace is
# imported on first use; a node without the library answers NOT_SUPPORTED naming it. Their kernels trust the
# batch indices in ``rois`` and the ``argmax``/``channel_mapping`` a backward op is given: gpud/aten_guards.py
# checks those (GUARDS keys ``torchvision::op``).
_EXT_RE = re.compile(r"^(torchvision)\.([A-Za-z0-9_]+)(?:\.([A-Za-z0-9_]+))?$")
# NOTE [unsafe ops]: every tenant's tensors live in gpud's heap, so an op that reads or writes out of bounds
# reads or writes another tenant's memory. Refused, by name: ops that read files, and the sparse constructors
# that skip validating their indices; run as the checked op they stand for: the ``_unsafe_*index*`` ops
# (NOTE [checked equivalents] in gpud/aten_guards.py); by argument: ``unsafe=True`` (segment_reduce,
# _index_put_impl_ skip their checks with it) is run as ``unsafe=False``, the same op with its checks, which
# gives the same result for valid input and an error naming the op for input that would read out of bounds;
# by result: any tensor that is neither strided
# nor sparse (COO or compressed), and sparse tensors only under the rules of NOTE [sparse tensors]
# (gpud/aten_sparse.py: the constructors from parts validate them, no handle aliases their indices).
_DENIED = frozenset(
    {
        "from_file",
        "_sparse_compressed_tensor_with_dims",
        "_unsafe_set_version_counter",
        "_sparse_coo_tensor_unsafe",
        "_sparse_compressed_tensor_unsafe",
        "_sparse_csr_tensor_unsafe",
        "_sparse_csc_tensor_unsafe",
        "_sparse_bsr_tensor_unsafe",
        "_sparse_bsc_tensor_unsafe",
    }
)
_UNSAFE_ARG = "unsafe"
# Random ops without a generator argument: they draw from the device's default generator, which
# is swapped with the session's around the call (under a lock: it is shared by all sessions).
_DEFAULT_GEN_OPS = frozenset(
    {"native_dropout", "_fused_dropout", "dropout", "feature_dropout", "alpha_dropout", "feature_alpha_dropout"}
)
_DEFAULT_GEN_LOCK = threading.Lock()
# The wire decoding is proto's (NOTE [aten values] in proto/aten.py).
_DEC = W.decoder()
_DTYPE_NAMES = _DEC.dtype_name
# name -> (OpOverload, has generator arg, default-gen op, position of an ``unsafe`` argument or -1,
#          argument check or None: gpud/aten_guards.py)
_OPS: dict[str, tuple[Any, bool, bool, int, Any, Any]] = {}
_DENIED_NAMES: set[str] = set()  # resolved only for executors that permit unsafe ops
_SERVER_HANDLES = 1 << 62  # handles gpud picks itself (outputs of synchronous ops)
_MAX_HANDLE = (1 << 63) - 1
CUDA_DEFAULT_SEED = 67280421310721  # what a fresh torch.cuda generator starts from


def resolve(name: str, permit_unsafe: bool = False) -> tuple[Any, bool, bool, int, Any, Any]:
    hit = _OPS.get(name)
    if hit is not None and (permit_unsafe or name not in _DENIED_NAMES):
        return hit
    mt = _NAME_RE.match(name) if isinstance(name, str) else None
    if mt is None:
        ext = _EXT_RE.match(name) if isinstance(name, str) else None
        if ext is not None:
            return _resolve_extension(name, ext.group(1), ext.group(2), ext.group(3) or "default")
        raise CudaError(codes.NOT_SUPPORTED, f"not an ATen operator name: {str(name)[:200]!r}")
    base, overload = mt.group(1), mt.group(2) or "default"
    if base in _DENIED:
        if not permit_unsafe:
            raise CudaError(codes.NOT_PERMITTED, f"aten::{base} is not allowed on gpud")
        _DENIED_NAMES.add(name)
    try:
        packet = getattr(torch.ops.aten, base)
        op = getattr(packet, overload)
        if not isinstance(op, torch._ops.OpOverload):
            raise AttributeError(name)
    except (AttributeError, RuntimeError):
        raise CudaError(
            codes.NOT_SUPPORTED, f"gpud's torch {torch.__version__} has no operator aten::{base}.{overload}"
        ) from None
    has_gen = any(a.name == "generator" for a in op._schema.arguments)
    if not has_gen:  # randn.default -> randn.generator, randint.low -> randint.low_generator ...
        for alt in ("generator" if overload == "default" else f"{overload}_generator",):
            alt_op = getattr(packet, alt, None)
            if alt_op is not None:
                op, has_gen = alt_op, True
    seeded = torch.Tag.nondeterministic_seeded in getattr(op, "tags", ())
    unsafe = next((i for i, a in enumerate(op._schema.arguments) if a.name == _UNSAFE_ARG), -1)
    # NOTE [checked equivalents], NOTE [sparse tensors]
    run: Any = CHECKED_EQUIVALENTS.get(base) or SPARSE_SUBSTITUTES.get(base, op)
    hit = (
        run,
        has_gen,
        not has_gen and (seeded or base in _DEFAULT_GEN_OPS),
        unsafe,
        guard_for(base, op._schema),
        _regrown(base, op._schema),
    )
    _OPS[name] = hit
    return hit


# NOTE [storages an op regrows]: an op may give a tensor it writes another storage, or grow its storage: ``resize_``,
# ``set_`` (the handle now names its source's storage), and every ``out=`` argument (ATen resizes an output of the
# wrong shape). The executor charges storages when it stores an op's outputs; for these it looks again at each such
# argument after the op (``Executor.reaccount``): a tensor grown with ``x.resize_(n)`` was held without being charged
# (measured: 256 MiB past a 0-byte figure), and a storage reached through ``set_`` was uncharged when its first
# handle went. Other in-place ops (``add_``, the ``_foreach_*_`` an optimizer runs) cannot change a storage's size.
_REGROWING = frozenset(
    {"resize_", "resize_as_", "set_", "_resize_output_", "sparse_resize_", "sparse_resize_and_clear_"}
)


def _regrown(base: str, schema: Any) -> tuple[tuple[int, str], ...]:
    """(position, name) of the arguments whose storage ``base`` may change (NOTE [storages an op regrows])."""
    return tuple(
        (i, a.name)
        for i, a in enumerate(schema.arguments)
        if a.alias_info is not None and a.alias_info.is_write and (a.is_out or base in _REGROWING)
    )


def _resolve_extension(name: str, lib: str, base: str, overload: str) -> tuple[Any, bool, bool, int, Any, Any]:
    """NOTE [extension operators]."""
    try:
        __import__(lib)  # registers the library's operators with torch
    except ImportError:
        raise CudaError(
            codes.NOT_SUPPORTED,
            f"{lib}::{base}: gpud's Python has no {lib} (install the {lib} that matches its torch {torch.__version__}"
            " on the node)",
        ) from None
    try:
        op = getattr(getattr(getattr(torch.ops, lib), base), overload)
        if not isinstance(op, torch._ops.OpOverload):
            raise AttributeError(name)
    except (AttributeError, RuntimeError):
        raise CudaError(codes.NOT_SUPPORTED, f"gpud's {lib} has no operator {lib}::{base}.{overload}") from None
    hit = (op, False, False, -1, guard_for(f"{lib}::{base}", op._schema), _regrown(base, op._schema))
    _OPS[name] = hit
    return hit


_DECOMPOSED: dict[str, Any] = {}


def decomposition(name: str) -> Any:
    """PyTorch's own decomposition of an op that this gpud's torch has no kernel for on its device, or None.

    NOTE [decomposed ops]: a client's C++ composites choose kernels by the client's build: a CUDA build (what
    ``pip install torch`` gives on Linux) picks the fused kernels it has CUDA code for (``_fused_rms_norm``
    and its backward, say), which a CPU gpud's torch does not have for CPU tensors. Where torch._decomp has
    the op written in other ops, that runs instead (the same math; within the op's tolerances, not always
    bit-equal to a CPU run's composite). Only after the op itself raised NotImplementedError ("Could not run
    ... with arguments from the 'CPU' backend"), so an op with a kernel always runs its kernel."""
    if name in _DECOMPOSED:
        return _DECOMPOSED[name]
    found = None
    mt = _NAME_RE.match(name)
    if mt is not None:
        from torch._decomp import decomposition_table

        packet = getattr(torch.ops.aten, mt.group(1), None)
        op = getattr(packet, mt.group(2) or "default", None) if packet is not None else None
        found = decomposition_table.get(op) if isinstance(op, torch._ops.OpOverload) else None
    _DECOMPOSED[name] = found
    return found


def dtype_of(name: Any) -> torch.dtype:
    return _DEC.dtype(name)


def _handle(v: Any) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not 0 < v <= _MAX_HANDLE:
        raise CudaError(codes.INVALID_VALUE, f"invalid tensor handle {str(v)[:40]}")
    return v


_shape = W.check_shape


class Host(Protocol):
    """What an executor asks of the process it runs for: memory charged to the tenant, and errors reported at
    the session's next sync. In gpud itself this is the session (``SessionHost``); in an executor process it is
    the channel to the broker (gpud/zygote.py)."""

    def charge(self, nbytes: int) -> None:  # raises CudaError(OUT_OF_MEMORY)
        raise NotImplementedError

    def uncharge(self, nbytes: int) -> None:
        raise NotImplementedError

    def record_error(self, exc: CudaError) -> None:
        raise NotImplementedError

    def dropped(self, token: int) -> None:
        """A storage built over memory the broker lent (NOTE [device memory aliases]) died; on any thread."""
        raise NotImplementedError


class SessionHost(Host):
    def __init__(self, session: Any) -> None:
        self.session = session

    def charge(self, nbytes: int) -> None:
        self.session.server.reserve_memory(self.session, nbytes)

    def uncharge(self, nbytes: int) -> None:
        self.session.server.release_memory(self.session, nbytes)

    def record_error(self, exc: CudaError) -> None:
        self.session.record_error(exc)

    def dropped(self, token: int) -> None:
        holder = self.session.ext.get("aten")
        if holder is not None:
            holder.dropped(token)


class Executor:
    resolve = staticmethod(resolve)  # for gpud/aten_graph.py, which this module imports

    def __init__(self, host: Host, device: str, permit_unsafe: bool = False) -> None:
        self.host = host
        self.permit_unsafe = permit_unsafe  # only in a tenant's own executor process (NOTE [executors])
        self.op_started = 0.0  # monotonic start of the op running now (0: none)
        self.device = torch.device(device)
        self.tensors: dict[int, torch.Tensor] = {}
        self.owner: dict[int, Any] = {}  # handle -> storage key (a pair of storages for sparse tensors)
        self.storages: dict[Any, list[int]] = {}  # storage key -> [nbytes, references]
        self.allocated = 0
        self.peak = 0
        self.limit = 0  # bytes; 0 = the tenant's quota alone (set_per_process_memory_fraction)
        self.next_handle = _SERVER_HANDLES
        # Outputs of failed ops: ops that use them fail quietly, so one failure is one reported
        # error (as a CUDA stream reports its first error), not a cascade.
        self.poisoned: set[int] = set()
        self.gen = torch.Generator(self.device)
        self.gen.manual_seed(CUDA_DEFAULT_SEED)
        self.seed = CUDA_DEFAULT_SEED  # the last seed set: the first half of the state a program reads
        self.bulk: list[Any] = []
        self.base = 0
        # Kernels of one device kind that the client sends have portable stand-ins on the other.
        from gpud.aten_portable import CUDA_ONLY, PORTABLE

        self.portable: dict[str, Any] = CUDA_ONLY if self.device.type == "cpu" else PORTABLE
        self.graphs = Graphs(self)  # NOTE [aten graphs]
        self.share_closed = False  # NOTE [shared tensors]
        self.salt = os.urandom(16)  # storage_id
        # NOTE [device memory aliases]: storages on memory the broker lent (a driver allocation's memfd) -> the
        # token the broker knows them by; and of those, the ones moved there from this process (their bytes still
        # count in ``allocated``, the broker's allocation pays for them)
        self.lent: dict[Any, int] = {}
        self.exported: dict[Any, int] = {}

    # ------------------------------------------------------------------ tensor table
    def get(self, h: int) -> torch.Tensor:
        t = self.tensors.get(h)
        if t is None:
            if h in self.poisoned:
                raise _Poisoned(
                    codes.INVALID_VALUE, f"tensor {h} was to be made by an op that failed (reported earlier)"
                )
            raise CudaError(codes.INVALID_HANDLE, f"tensor handle {h} is not live in this session")
        return t

    def store(self, h: int, t: Any) -> None:
        if not isinstance(t, torch.Tensor):
            raise CudaError(codes.INVALID_VALUE, f"output for handle {h} is not a tensor")
        _handle(h)
        if h in self.tensors:
            raise CudaError(codes.INVALID_HANDLE, f"tensor handle {h} is already in use")
        if t._is_zerotensor():  # autograd's storage-less zeros (sgn's gradient): a tensor the client can read
            t = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device).zero_()
        key, nbytes = _storage_of(t)
        if key == 0 or (nbytes == 0 and type(key) is tuple):
            key = -h  # empty sparse tensors: nothing to charge, a key of their own
        entry = self.storages.get(key)
        if entry is None:
            if nbytes and share.active and share.rides(self, key):
                nbytes = 0  # another session of the tenant pays for it (NOTE [shared tensors])
            elif nbytes:
                self._charge(nbytes)
            self.storages[key] = [nbytes, 1]
        else:
            entry[1] += 1
        self.tensors[h] = t
        self.owner[h] = key

    def _charge(self, nbytes: int) -> None:
        if self.limit and self.allocated + nbytes > self.limit:
            raise CudaError(
                codes.OUT_OF_MEMORY,
                f"out of memory: {nbytes} bytes more would pass this process's "
                f"limit of {self.limit} bytes (set_per_process_memory_fraction)",
            )
        self.host.charge(nbytes)  # raises OUT_OF_MEMORY
        self.allocated += nbytes
        self.peak = max(self.peak, self.allocated)

    def storage_id(self, key: int) -> int:
        """What ``untyped_storage().data_ptr()`` of a remote tensor answers: the same for every tensor on one storage
        of this session, 16-byte aligned, never 0, and nothing of this process's addresses (salted)."""
        digest = hashlib.blake2b(key.to_bytes(8, "little"), digest_size=6, key=self.salt).digest()
        return (int.from_bytes(digest, "little") | 1) << 4

    def resize_storage(self, args: list[Any]) -> None:
        """NOTE [storage resize]: ``untyped_storage().resize_(n)`` of a tensor: every tensor on that storage (its views)
        sees the new memory, and the session is charged the new size (FSDP frees a parameter's unsharded memory
        this way after each use and grows it back before the next all-gather)."""
        t = self.decode(args[0]) if len(args) == 2 else None
        n = args[1] if len(args) == 2 else None
        if not isinstance(t, torch.Tensor) or type(n) is not int or not 0 <= n <= _MAX_STORAGE:
            raise CudaError(codes.INVALID_VALUE, "wooly.resize_storage takes a tensor and a byte count")
        if t.layout != torch.strided:
            raise CudaError(codes.INVALID_VALUE, "wooly.resize_storage: only a strided tensor has one storage")
        key, _ = _storage_of(t)
        entry = self.storages.get(key)
        if entry is None:
            raise CudaError(codes.INVALID_VALUE, "wooly.resize_storage: the tensor's storage is not this session's")
        if share.active and share.is_shared(key):
            raise CudaError(codes.NOT_SUPPORTED, "resizing a storage shared with another process is not supported")
        st = t.untyped_storage()
        if n > entry[0]:
            self._charge(n - entry[0])
            try:
                st.resize_(n)
            except RuntimeError as exc:
                self.allocated -= n - entry[0]
                self.host.uncharge(n - entry[0])
                raise CudaError(codes.INVALID_VALUE, f"untyped_storage().resize_: {_first_line(exc)}") from None
        else:
            try:
                st.resize_(n)
            except RuntimeError as exc:
                raise CudaError(codes.INVALID_VALUE, f"untyped_storage().resize_: {_first_line(exc)}") from None
            self.allocated -= entry[0] - n
            self.host.uncharge(entry[0] - n)
        entry[0] = n

    def _before(self, regrown: Any, args: list[Any], kwargs: dict[str, Any]) -> list[tuple[Any, ...]]:
        """What each argument an op may regrow is before it (NOTE [storages an op regrows])."""
        out = []
        for i, arg in regrown:
            for h in _handles_in(args[i] if i < len(args) else kwargs.get(arg)):
                t = self.tensors.get(h)
                if t is not None and t.layout == torch.strided:
                    st = t.untyped_storage()
                    out.append((h, t, st, st.nbytes(), t.storage_offset(), tuple(t.shape), t.stride()))
        return out

    def reaccount(self, snap: tuple[Any, ...], name: str) -> None:
        """NOTE [storages an op regrows]: a handle after an op that may have given its tensor another storage
        (``set_``) or grown its own (``resize_``, ``out=``) is charged what it holds now. Past the quota the tensor
        is put back as it was and the op fails with OUT_OF_MEMORY, as CUDA's allocator fails it."""
        h, t = snap[0], snap[1]
        key, nbytes = _storage_of(t)
        old = self.owner[h]
        if key == old:
            entry = self.storages[key]
            if entry[0] == nbytes:
                return
            if share.active and share.is_shared(key):
                _restore(snap)
                raise CudaError(codes.NOT_SUPPORTED, f"{name}: resizing a storage shared with another process")
            if nbytes > entry[0]:
                try:
                    self._charge(nbytes - entry[0])
                except CudaError:
                    _restore(snap)
                    raise CudaError(
                        codes.OUT_OF_MEMORY, f"{name}: out of memory growing a tensor's storage to {nbytes} bytes"
                    ) from None
            else:
                self.allocated -= entry[0] - nbytes
                self.host.uncharge(entry[0] - nbytes)
            entry[0] = nbytes
            return
        moved = self.storages.get(key)  # set_: the handle names another storage now
        if moved is not None:
            moved[1] += 1
        elif nbytes and not (share.active and share.rides(self, key)):
            try:
                self._charge(nbytes)
            except CudaError:
                _restore(snap)
                raise
            self.storages[key] = [nbytes, 1]
        else:
            self.storages[key] = [0, 1]
        self.owner[h] = key
        self._drop(old)

    def free(self, h: int) -> None:
        if self.graphs.owner and self.graphs.keep(h):
            return
        if self.tensors.pop(h, None) is None:
            self.poisoned.discard(h)
            return  # freeing an unknown handle is harmless (its creating op may have failed)
        self._drop(self.owner.pop(h))

    def _drop(self, key: Any) -> None:
        entry = self.storages[key]
        entry[1] -= 1
        if entry[1] == 0:
            del self.storages[key]
            if entry[0]:
                self.allocated -= entry[0]
                self.host.uncharge(entry[0])
            if self.lent:
                self.lent.pop(key, None)
                self.allocated -= self.exported.pop(key, 0)
            if share.active:
                share.leave(self, key)

    # NOTE [shared tensors] (gpud/aten_share.py): what other sessions' work asks of this one
    def pin(self, key: Any) -> None:
        self.storages[key][1] += 1

    def unpin(self, key: Any) -> None:
        if key in self.storages:
            self._drop(key)

    def take_charge(self, key: Any, nbytes: int) -> None:
        """This session pays for a shared storage from now on (its payer let go of it)."""
        entry = self.storages.get(key)
        if entry is None or entry[0]:
            return
        self.host.charge(nbytes)  # raises OUT_OF_MEMORY
        entry[0] = nbytes
        self.allocated += nbytes
        self.peak = max(self.peak, self.allocated)

    def close(self) -> None:
        self.graphs.clear()
        if share.active:
            for key in share.close(self):
                self.unpin(key)
        for h in list(self.tensors):
            self.free(h)

    # ------------------------------------------------------------------ decoding
    def decode(self, v: Any) -> Any:
        """Op arguments from the wire; this executor is the decoder's ``AtenSession``."""
        return _DEC.decode(v, self)

    def from_frame(self, frame: Any, dtype: torch.dtype, shape: list[int], device: torch.device) -> torch.Tensor:
        if not isinstance(frame, int) or not 0 <= frame + self.base < len(self.bulk):
            raise CudaError(codes.INVALID_VALUE, f"aten upload names bulk frame {frame}, which did not arrive")
        buf = self.bulk[self.base + frame]
        nbytes = memoryview(buf).nbytes
        numel = 1
        for d in shape:
            numel *= d
        itemsize = torch.empty((), dtype=dtype).element_size()
        if numel * itemsize != nbytes:
            raise CudaError(codes.INVALID_VALUE, f"upload of {nbytes} bytes does not match {dtype} {shape}")
        if isinstance(buf, mmap.mmap):  # a memfd the broker filled (gpud/chan.py): its pages become the storage
            flat = torch.frombuffer(buf, dtype=torch.uint8, count=nbytes)
        else:
            flat = torch.empty(nbytes, dtype=torch.uint8)
            if nbytes:
                flat.numpy()[:] = np.frombuffer(buf, dtype=np.uint8)
        t = flat.view(dtype).reshape(shape) if nbytes else torch.empty(shape, dtype=dtype)
        return t.to(device) if device.type != "cpu" else t

    # ------------------------------------------------------------------ running
    def run_batch(self, ops: list[list[Any]], bulk: list[Any], base: int) -> None:
        if share.active:
            share.settle(self)
        self.bulk, self.base = bulk, base
        with torch.no_grad():
            for op in ops:
                try:
                    self.run(op, sync=False)
                except CudaError as exc:
                    outs = op[3] if isinstance(op[3], list) else []
                    self.poisoned.update(h for h in outs if isinstance(h, int) and h)
                    if not isinstance(exc, _Poisoned):
                        self.host.record_error(exc)
        self.bulk = []

    def run_call(self, op: list[Any], bulk: list[Any], base: int) -> tuple[Any, list[Any]]:
        if share.active:
            share.settle(self)
        self.bulk, self.base = bulk, base
        try:
            with torch.no_grad():
                r = self.run(op, sync=True)
            return r if r is not None else (None, [])
        finally:
            self.bulk = []

    def run(self, op: list[Any], sync: bool) -> Any:
        self.op_started = time.monotonic()  # for the executor's watchdog (max_kernel_s; gpud/zygote.py)
        try:
            return self._run(op, sync)
        finally:
            self.op_started = 0.0

    def _run(self, op: list[Any], sync: bool) -> Any:
        name, args, kwargs, outs = op
        if not isinstance(args, list) or not isinstance(kwargs, dict) or not isinstance(outs, list):
            raise CudaError(codes.INVALID_VALUE, "malformed aten op")
        if isinstance(name, str) and name.startswith("wooly."):
            try:
                return self.pseudo(name, args, outs, kwargs)
            except CudaError:
                raise
            except Exception as exc:  # noqa: BLE001 - malformed arguments of a pseudo-op
                raise CudaError(codes.INVALID_VALUE, f"{name}: {type(exc).__name__}: {_first_line(exc)}") from None
        result = self.execute(name, args, kwargs)
        if sync:
            return self.describe(result), []
        for h, t in zip(outs, self.produced(name, result, outs), strict=True):
            if h:
                self.store(h, t)
        return None

    def execute(self, name: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """Run one ATen op (its wire form decoded here); every failure becomes a CudaError naming the op."""
        try:
            fn, has_gen, default_gen, unsafe, guard, regrown = resolve(name, self.permit_unsafe)
            if self.portable and (
                (alt := self.portable.get(name[5:])) is not None
                or (alt := self.portable.get(name.split(".")[1])) is not None
            ):
                fn = alt
            a = self.decode(args)
            k = self.decode(kwargs)
            if unsafe >= 0 and not self.permit_unsafe:  # run with its checks on (NOTE [unsafe ops])
                if unsafe < len(a):
                    a[unsafe] = False
                elif _UNSAFE_ARG in k:
                    k[_UNSAFE_ARG] = False
            if guard is not None:
                guard(name, a, k)
            if has_gen and k.get("generator") is None:
                k["generator"] = self.gen
            before = self._before(regrown, args, kwargs) if regrown else None  # NOTE [storages an op regrows]
            try:
                try:
                    result = self._with_default_gen(fn, a, k) if default_gen else fn(*a, **k)
                except NotImplementedError:
                    dec = decomposition(name)
                    if dec is None:
                        raise
                    if default_gen or (has_gen and k.get("generator") is self.gen):
                        k.pop("generator", None)  # decompositions draw from the default generator: the session's
                        result = self._with_default_gen(dec, a, k)
                    else:
                        result = dec(*a, **k)
            except BaseException:
                for snap in before or ():
                    _restore(snap)  # ATen's resize sets the new shape before it allocates: a failed one left both
                raise
            for snap in before or ():
                self.reaccount(snap, name)
            return result
        except CudaError:
            raise
        except MemoryError as exc:
            raise CudaError(codes.OUT_OF_MEMORY, f"{name}: out of memory: {exc}") from None
        except NotImplementedError as exc:
            raise CudaError(codes.NOT_SUPPORTED, f"{name}: {_first_line(exc)}") from None
        except Exception as exc:  # noqa: BLE001 - op errors (shapes, dtypes, ...) go back to the client
            text = _first_line(exc)
            if _ALLOC_FAILED.search(text):  # the device is out of memory, as CUDA's allocator says it (a program
                # that catches torch.OutOfMemoryError to halve its batch, like accelerate's find_executable_batch_size)
                raise CudaError(codes.OUT_OF_MEMORY, f"{name}: out of memory: {text}") from None
            raise CudaError(codes.INVALID_VALUE, f"{name}: {type(exc).__name__}: {text}") from None

    @staticmethod
    def produced(name: str, result: Any, outs: list[Any]) -> list[torch.Tensor]:
        """An op's output tensors, flattened, one per handle the client named."""
        produced: list[torch.Tensor] = []
        _flatten(result, produced)
        if len(produced) != len(outs):
            raise CudaError(
                codes.INVALID_VALUE, f"{name}: produced {len(produced)} tensors, client named {len(outs)} handles"
            )
        for t in produced:
            _strided(name, t)
        return produced

    def _with_default_gen(self, fn: Any, a: list[Any], k: dict[str, Any]) -> Any:
        dev = self.device
        default = torch.default_generator if dev.type == "cpu" else torch.cuda.default_generators[dev.index or 0]
        with _DEFAULT_GEN_LOCK:
            saved = default.get_state()
            default.set_state(self.gen.get_state())
            try:
                return fn(*a, **k)
            finally:
                self.gen.set_state(default.get_state())
                default.set_state(saved)

    def describe(self, v: Any) -> Any:
        """A synchronous op's result: tensors are stored under new handles and described."""
        if isinstance(v, torch.Tensor):
            sparse = sparse_describe(v)  # None for a strided tensor; refuses layouts gpud does not keep
            h = self.next_handle
            self.next_handle += 1
            self.store(h, v)
            if sparse is not None:  # [h, shape, sparse_dim, dense_dim, nnz, coalesced, dtype(, layout)]
                return {"s": [h, *sparse[:5], _DTYPE_NAMES.get(v.dtype, str(v.dtype)), *sparse[5:]]}
            desc = [h, list(v.shape), list(v.stride()), v.storage_offset(), _DTYPE_NAMES.get(v.dtype, str(v.dtype))]
            bits = (1 if v.is_conj() else 0) | (2 if v.is_neg() else 0)  # a conjugate/negative view, as the client's
            return {"t": desc + [bits] if bits else desc}
        if isinstance(v, (list, tuple)):
            return [self.describe(x) for x in v]
        if isinstance(v, complex):
            return {"c": [v.real, v.imag]}
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        if isinstance(v, (torch.dtype,)):
            return {"d": _DTYPE_NAMES.get(v, str(v))}
        raise CudaError(codes.NOT_SUPPORTED, f"cannot return a {type(v).__name__} to the client")

    # ------------------------------------------------------------------ pseudo-ops
    def pseudo(self, name: str, args: list[Any], outs: list[Any], kwargs: Any = None) -> Any:
        if name == W.OP_FREE:
            for h in args:
                if isinstance(h, int):
                    self.free(h)
            return None
        if name == W.OP_UPLOAD:
            frame, dt, shape = args
            t = self.from_frame(frame, dtype_of(dt), _shape(shape), self.device)
            if len(outs) != 1:
                raise CudaError(codes.INVALID_VALUE, "wooly.upload takes one output handle")
            self.store(outs[0], t)
            return None
        if name == W.OP_SEED:
            seed = args[0] if args else None
            if not isinstance(seed, int) or isinstance(seed, bool):
                raise CudaError(codes.INVALID_VALUE, "wooly.seed takes an integer")
            self.seed = seed & _U64
            self.gen.manual_seed(self.seed)
            return None
        if name == W.OP_FETCH:
            got = self.decode(args[0]) if args else None
            if not isinstance(got, torch.Tensor):
                raise CudaError(codes.INVALID_VALUE, "wooly.fetch takes a tensor")
            c = got.detach().resolve_conj().resolve_neg().cpu()
            flat = c.clone(memory_format=torch.contiguous_format).reshape(-1)  # also size-1 dims with any stride
            raw = flat.view(torch.uint8) if c.numel() else torch.empty(0, dtype=torch.uint8)
            return [_DTYPE_NAMES.get(c.dtype, str(c.dtype)), list(c.shape)], [raw.numpy().data]
        if name == W.OP_STATS:
            return {
                "allocated": self.allocated,
                "peak": self.peak,
                "tensors": len(self.tensors),
                "limit": self.limit,
                "device": str(self.device),
            }, []
        if name == W.OP_SET_LIMIT:
            limit = args[0] if args else None
            if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
                raise CudaError(codes.INVALID_VALUE, "wooly.set_limit takes a byte count >= 0")
            self.limit = limit
            return None, []
        if name == W.OP_RESET_PEAK:
            self.peak = self.allocated
            return None, []
        if name == W.OP_GET_RNG:
            return rng_state(self.seed, bytes(self.gen.get_state().numpy().tobytes())), []
        if name == W.OP_SET_RNG:
            state = args[0] if args else None
            if not isinstance(state, bytes):
                raise CudaError(codes.INVALID_VALUE, "wooly.set_rng_state takes bytes")
            if len(state) == 16:  # NOTE [rng state]
                self.seed = int.from_bytes(state[:8], "little")
                full = _RNG_SEEN.get(state)
                if full is not None:
                    self.gen.set_state(torch.frombuffer(bytearray(full), dtype=torch.uint8))
                else:
                    self.gen.manual_seed(int.from_bytes(hashlib.blake2b(state, digest_size=8).digest(), "little"))
                return None
            self.gen.set_state(torch.frombuffer(bytearray(state), dtype=torch.uint8))
            return None
        if name == W.OP_SYNC:
            return None, []
        if name == W.OP_RESIZE_STORAGE:
            self.resize_storage(args)
            return None
        if name == W.OP_STORAGE_INFO:
            of = self.decode(args[0]) if len(args) == 1 else None
            if not isinstance(of, torch.Tensor) or of.layout != torch.strided:
                raise CudaError(codes.INVALID_VALUE, "wooly.storage_info takes a strided tensor")
            st = of.untyped_storage()
            return [self.storage_id(st._cdata), st.nbytes()], []
        if name == W.OP_ALIAS_DEVICE:
            return self.alias_device(args), []
        if name == W.OP_EXPORT_DEVICE:
            return self.export_device(args), []
        if name == W.OP_SHARE_EXPORT:
            return self.share_export(args, share.scope_of(kwargs, name)), []
        if name == W.OP_SHARE_IMPORT:
            return self.share_import(args, share.scope_of(kwargs, name)), []
        if name == W.OP_MOVE_EXPORT:
            return self.move_export()
        if name == W.OP_MOVE_IMPORT:
            return self.move_import(args[0] if args else None)
        if name == W.OP_GRAPH_DEFINE:
            return self.graphs.define(args)
        if name == W.OP_GRAPH_REPLAY:
            return self.graphs.replay(args)
        if name == W.OP_GRAPH_DROP:
            return self.graphs.drop(args)
        raise CudaError(codes.NOT_SUPPORTED, f"unknown pseudo-op {name[:80]!r}")

    # ------------------------------------------------------------------ NOTE [device memory aliases]
    def alias_device(self, args: list[Any]) -> Any:
        """A tensor over a driver allocation's pages, which the broker lent as a shared memfd (bulk frame
        ``frame``): not charged (the allocation is); ``token`` goes back to the broker when its storage dies."""
        if len(args) != 7 or not all(type(a) is int for a in (args[0], args[1], args[2], args[6])):
            raise CudaError(codes.INVALID_VALUE, "wooly.alias_device: malformed arguments")
        frame, offset, size, dt, shape, stride, token = args
        buf = self.bulk[self.base + frame] if 0 <= frame < len(self.bulk) - self.base else None
        if not isinstance(buf, mmap.mmap) or not 0 <= size <= len(buf) or self.device.type != "cpu":
            raise CudaError(codes.INVALID_VALUE, "wooly.alias_device is gpud's own (the memory did not come with it)")
        dtype = dtype_of(dt)
        itemsize = dtype.itemsize
        if not 0 <= offset < max(size, 1) or offset % itemsize:
            raise CudaError(
                codes.INVALID_VALUE,
                f"torch.from_dlpack: the data is {offset} bytes into its allocation, not a multiple of {dtype}'s size",
            )
        flat = torch.frombuffer(buf, dtype=torch.uint8, count=size)
        t = torch.empty(0, dtype=dtype)
        try:
            t.set_(flat.untyped_storage(), offset // itemsize, _shape(shape), _shape(stride))
        except RuntimeError as exc:  # out of the allocation's bounds
            raise CudaError(codes.INVALID_VALUE, f"torch.from_dlpack: {_first_line(exc)}") from None
        del flat
        key, _ = _storage_of(t)
        self.storages[key] = [0, 0]  # a new storage (frombuffer's): the allocation pays for these pages
        try:
            desc = self.describe(t)
        except BaseException:
            if self.storages.get(key) == [0, 0]:
                del self.storages[key]
            raise
        self.lent[key] = token
        weakref.finalize(buf, self.host.dropped, token)
        return desc

    def export_device(self, args: list[Any]) -> dict[str, int]:
        """A tensor's memory for the driver API. Asked with the tensor alone: the token of the lent memory its
        storage is on already, or how many bytes the broker must lend; asked again with a memfd of that size (bulk
        frame ``frame``) and a token: the storage's bytes move there and every tensor on it follows (``set_``),
        charged to the broker's allocation from now on. Either way with the tensor's byte offset in its storage."""
        t = self.decode(args[0]) if args else None
        if not isinstance(t, torch.Tensor) or t.layout != torch.strided or self.device.type != "cpu":
            raise CudaError(codes.INVALID_VALUE, "wooly.export_device takes a strided tensor")
        st = t.untyped_storage()
        key, offset = st._cdata, int(t.storage_offset()) * t.element_size()
        if key in self.lent:
            return {"token": self.lent[key], "offset": offset}
        entry = self.storages.get(key)
        if entry is None or share.active and share.is_shared(key):
            raise CudaError(
                codes.NOT_SUPPORTED,
                "this cuda tensor's memory is shared with another process (torch.multiprocessing): it cannot be "
                "handed to another library too",
            )
        if len(args) == 1:
            return {"need": st.nbytes(), "offset": offset}
        if len(args) != 3 or type(args[1]) is not int or type(args[2]) is not int:
            raise CudaError(codes.INVALID_VALUE, "wooly.export_device: malformed arguments")
        frame, token = args[1], args[2]
        buf = self.bulk[self.base + frame] if 0 <= frame < len(self.bulk) - self.base else None
        n = st.nbytes()
        if not isinstance(buf, mmap.mmap) or len(buf) < n:
            raise CudaError(codes.INVALID_VALUE, "wooly.export_device is gpud's own (the memory did not come with it)")
        new = torch.frombuffer(buf, dtype=torch.uint8, count=n) if n else torch.empty(0, dtype=torch.uint8)
        if n:
            new.copy_(torch.empty(0, dtype=torch.uint8).set_(st))
        ns = new.untyped_storage()
        del new
        for h, k in list(self.owner.items()):
            if k == key:
                x = self.tensors[h]
                x.set_(ns, x.storage_offset(), x.size(), x.stride())
                self.owner[h] = ns._cdata
        del self.storages[key]
        self.storages[ns._cdata] = [0, entry[1]]
        if entry[0]:
            self.host.uncharge(entry[0])  # the broker charged the allocation it lent
            self.exported[ns._cdata] = entry[0]
        self.lent[ns._cdata] = token
        weakref.finalize(buf, self.host.dropped, token)
        return {"offset": offset}

    # ------------------------------------------------------------------ NOTE [shared tensors]
    def share_export(self, args: list[Any], scope: tuple[str, int]) -> str:
        t = self.decode(args[0]) if len(args) == 1 else None
        if not isinstance(t, torch.Tensor):
            raise CudaError(codes.INVALID_VALUE, "wooly.share_export takes one tensor")
        if t.layout != torch.strided:
            raise CudaError(codes.NOT_SUPPORTED, "sharing a sparse cuda tensor with another process is not supported")
        key, nbytes = _storage_of(t)
        if key == 0 or key not in self.storages:
            nbytes = 0  # an empty storage: nothing to share but the metadata
        return share.export(self, t, key, nbytes, scope)

    def share_import(self, args: list[Any], scope: tuple[str, int]) -> Any:
        tensor, key, exporter = share.take(self, args[0] if len(args) == 1 else None, scope)
        try:
            return self.describe(torch.ops.aten.alias.default(tensor))
        finally:
            share.received(self, key, exporter)

    # ------------------------------------------------------------------ NOTE [migration]
    def move_export(self) -> tuple[dict[str, Any], list[Any]]:
        """Every tensor of the session (handle, storage, dtype, shape, stride, offset), one bulk frame per storage
        (views keep sharing theirs), and the generator, limit and handle counter: what a move re-creates."""
        if self.graphs.graphs:
            raise CudaError(codes.NOT_SUPPORTED, "a session with captured CUDA graphs cannot move yet")
        if share.active and share.holds_shared(self):
            raise CudaError(codes.NOT_SUPPORTED, "a session sharing cuda tensors with other processes cannot move")
        if any(t.layout != torch.strided for t in self.tensors.values()):
            raise CudaError(codes.NOT_SUPPORTED, "a session holding sparse tensors cannot move yet")
        index: dict[int, int] = {}
        frames: list[Any] = []
        tensors = []
        for h, t in self.tensors.items():
            key = self.owner[h]
            i = index.get(key)
            if i is None:
                i = index[key] = len(frames)
                st = t.untyped_storage()
                raw = torch.empty(0, dtype=torch.uint8, device=st.device).set_(st)
                frames.append(raw.cpu().numpy().data if raw.numel() else b"")
            tensors.append(
                [h, i, _DTYPE_NAMES.get(t.dtype, str(t.dtype)), list(t.shape), list(t.stride()), t.storage_offset()]
            )
        return {
            "tensors": tensors,
            "storages": len(frames),
            "next_handle": self.next_handle,
            "limit": self.limit,
            "peak": self.peak,
            "rng": bytes(self.gen.get_state().numpy().tobytes()),
            "seed": self.seed,
            "poisoned": sorted(self.poisoned),
        }, frames

    def move_import(self, desc: Any) -> tuple[Any, list[Any]]:
        if not isinstance(desc, dict) or not isinstance(desc.get("tensors"), list):
            raise CudaError(codes.INVALID_VALUE, "wooly.move_import takes what wooly.move_export returned")
        n = int(desc.get("storages", 0))
        if not 0 <= n <= len(self.bulk) - self.base:
            raise CudaError(codes.INVALID_VALUE, f"wooly.move_import: {n} storages announced, fewer arrived")
        storages = []
        for i in range(n):
            buf = self.bulk[self.base + i]
            nbytes = memoryview(buf).nbytes
            if isinstance(buf, mmap.mmap):  # a memfd the broker filled: its pages become the storage
                flat = (
                    torch.frombuffer(buf, dtype=torch.uint8, count=nbytes)
                    if nbytes
                    else torch.empty(0, dtype=torch.uint8)
                )
            else:
                flat = torch.empty(nbytes, dtype=torch.uint8)
                if nbytes:
                    flat.numpy()[:] = np.frombuffer(buf, dtype=np.uint8)
            storages.append((flat.to(self.device) if self.device.type != "cpu" else flat).untyped_storage())
        for entry in desc["tensors"]:
            h, i, dt, shape, stride, offset = entry
            if not isinstance(i, int) or not 0 <= i < n:
                raise CudaError(codes.INVALID_VALUE, f"wooly.move_import: tensor {h} names storage {i}")
            t = torch.empty(0, dtype=dtype_of(dt), device=self.device)
            try:
                t.set_(storages[i], int(offset), _shape(shape), _shape(stride))  # bounds-checked against the storage
            except RuntimeError as exc:
                raise CudaError(codes.INVALID_VALUE, f"wooly.move_import: tensor {h}: {_first_line(exc)}") from None
            self.store(h, t)
        self.next_handle = max(self.next_handle, int(desc.get("next_handle", 0)))
        self.limit = int(desc.get("limit", 0))
        self.peak = max(self.allocated, int(desc.get("peak", 0)))
        rng = desc.get("rng")
        if isinstance(rng, bytes) and rng:
            self.gen.set_state(torch.frombuffer(bytearray(rng), dtype=torch.uint8))
        seed = desc.get("seed")
        if type(seed) is int and 0 <= seed <= _U64:
            self.seed = seed
        self.poisoned.update(h for h in desc.get("poisoned", []) if isinstance(h, int))
        return None, []


# NOTE [rng state]: a GPU's generator state, as ``torch.cuda.get_rng_state()`` returns it, is CUDA's Philox pair: 16
# bytes, the seed and an offset (uint64 each, little-endian). Code that takes it apart relies on that shape (DTensor's
# random ops, which FSDP2 runs in ``reset_parameters``, set the offset of each shard and read the seed). gpud's
# generator on the CPU backend is the CPU's Mersenne Twister (so a program's random ops equal the same program's on
# the host), whose state is 5056 bytes. So the state handed out is (the last seed set, a 62-bit digest of the
# generator's full state, a multiple of 4 as CUDA's offsets are), and the full state is kept here under it: setting a
# pair read before restores that exact state (torch.utils.checkpoint's recomputation draws the same dropout masks), in
# any session of the process, so every rank of a job that broadcasts one rank's state gets the same one; a pair never
# read (an offset DTensor computed) seeds the generator from the pair itself, the same in every session. A full
# state (an older client's) is still accepted. Kept per process: one tenant's (NOTE [executors]), at most
# ``_RNG_KEEP`` states.
_U64 = (1 << 64) - 1
_ALLOC_FAILED = re.compile(r"DefaultCPUAllocator: (can't allocate memory|not enough memory)|out of memory")
_MAX_STORAGE = 1 << 48  # bytes a storage may be resized to (what a device could hold)
_RNG_KEEP = 1024
_RNG_SEEN: OrderedDict[bytes, bytes] = OrderedDict()
_RNG_LOCK = threading.Lock()


def rng_state(seed: int, full: bytes) -> bytes:
    offset = int.from_bytes(hashlib.blake2b(full, digest_size=8).digest(), "little") & ((1 << 62) - 4)
    pair = seed.to_bytes(8, "little") + offset.to_bytes(8, "little")
    with _RNG_LOCK:
        _RNG_SEEN[pair] = full
        _RNG_SEEN.move_to_end(pair)
        while len(_RNG_SEEN) > _RNG_KEEP:
            _RNG_SEEN.popitem(last=False)
    return pair


class _Poisoned(CudaError):
    """An input is the output of an op that failed: this op fails too, without a new report."""


def _flatten(v: Any, out: list[torch.Tensor]) -> None:
    if isinstance(v, torch.Tensor):
        out.append(v)
    elif isinstance(v, (list, tuple)):
        for x in v:
            _flatten(x, out)


def _restore(snap: tuple[Any, ...]) -> None:
    """A tensor put back on its storage, at the size and shape it had before an op (NOTE [storages an op
    regrows])."""
    _, t, st, nbytes, offset, shape, stride = snap
    if st.nbytes() != nbytes:
        st.resize_(nbytes)
    t.set_(st, offset, shape, stride)


def _handles_in(v: Any) -> list[int]:
    """The tensor handles in an argument's wire form (one tensor or a list of them)."""
    if isinstance(v, W.EXT_TYPES):
        data = cast(bytes, v.data)
        return [int.from_bytes(data, "little")] if v.code == W.EXT_TENSOR and len(data) == 8 else []
    if isinstance(v, list):
        return [h for x in v for h in _handles_in(x)]
    return []


def _storage_of(t: torch.Tensor) -> tuple[Any, int]:
    """The key a tensor's storage is charged under and its size. A strided tensor's key is its StorageImpl, which
    stays the same when the storage is resized (NOTE [storage resize]), where its data address does not."""
    if t.layout == torch.strided:
        st = t.untyped_storage()
        return st._cdata, st.nbytes()
    return sparse_storage_key(t)  # NOTE [sparse tensors]; produced() and describe() refuse other layouts


def _strided(name: str, t: torch.Tensor) -> None:
    """Strided, sparse COO or compressed (NOTE [sparse tensors]); other layouts are refused, naming the op."""
    if t.layout != torch.strided and t.layout != torch.sparse_coo and t.layout not in SPARSE_COMPRESSED:
        raise CudaError(
            codes.NOT_SUPPORTED,
            f"{name}: {str(t.layout).removeprefix('torch.')} tensors are not kept on gpud (strided and sparse "
            "tensors are: NOTE [sparse tensors] in gpud/aten_sparse.py)",
        )


def _first_line(exc: BaseException) -> str:
    s = str(exc).strip()
    return s.splitlines()[0][:2000] if s else type(exc).__name__
