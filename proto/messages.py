"""The wire schema: every message either end sends is one ``msgspec.Struct`` here, built and read through this
module on both sides (NOTE [wire schema]).

Requests carry ``rid`` (request id, chosen by the client); replies echo it. Calls that return
nothing (copies to the device, launches, frees, stream/event creation...) are not sent one by one:
the client queues them and sends a ``Batch``; their errors come back with the next synchronous
reply, as CUDA reports asynchronous errors at the next synchronisation.

Bulk data never sits in the msgpack body: a field ``frame`` names the index of a separate
zero-copy frame (see ``proto.codec``).

NOTE [wire schema]
A message is a ``msgspec.Struct`` tagged by its ``kind`` (the msgpack map's ``"kind"`` key, what every peer has
always sent), strict (no coercion: an int is not a bool, a str is not bytes) and closed (an unknown field is an
error). The client builds the Struct and ``proto.codec`` encodes it; gpud decodes the frame straight into the
Struct, limits (``Meta``) checked on the way, in about a microsecond for a small call. The unions are built from
the classes themselves (``MESSAGES``, ``QUEUED``), and each class declares what the hypervisor must know of it:
``queued`` (may ride in a ``Batch``), ``passive`` (not the tenant's activity: it neither wakes a sleeping tenant
nor keeps one awake), and ``writes(bulk)`` (the device bytes it writes, so copy-on-write sharing is broken
before them: NOTE [dedup protocol] in gpud/hypervisor/dedup.py). A new message is one class.
"""

from __future__ import annotations

import struct
from typing import Annotated, Any, ClassVar, Literal, Union

import msgspec
from msgspec import Meta

U64 = Annotated[int, Meta(ge=0)]  # msgpack integers end at 2**64 - 1
Size = Annotated[int, Meta(ge=0, le=1 << 48)]
Handle = Annotated[int, Meta(ge=0, le=(1 << 63) - 1)]
FrameIndex = Annotated[int, Meta(ge=0, lt=4096)]
Dim = Annotated[int, Meta(ge=1, le=(1 << 31) - 1)]
Dim3 = Annotated[list[Dim], Meta(min_length=3, max_length=3)]
Name = Annotated[str, Meta(max_length=4096)]

# Stream handle 0 is the legacy default stream; CU_STREAM_PER_THREAD (2) maps to a per-session
# per-thread default stream. Client-created streams use ids >= 16.
DEFAULT_STREAM = 0
PER_THREAD_STREAM = 2

POINTERS = -1  # a ``writes`` size: the whole allocation this address falls in (a kernel's pointer argument)


class _Msg(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A nested record of a message (not a message itself)."""


class _Req(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, tag_field="kind"):
    kind: ClassVar[str]  # the tag, set on each class below
    queued: ClassVar[bool] = False  # may be queued in a Batch: returns nothing, errors come at the next sync
    passive: ClassVar[bool] = False  # not the tenant's activity (NOTE [wire schema])
    reply: ClassVar[bool] = False  # gpud's answer to a call (``Reply``), not a request (``Message``)

    rid: Handle = 0

    def writes(self, bulk: list[Any]) -> list[tuple[int, int]]:
        """(address, bytes) of device memory this message writes; size ``POINTERS``: the allocation at the address.
        A message that lists its operands (``extents()``: operand, address, bytes, written) writes those marked
        (``_written_extents``, bound to such classes below)."""
        return []


def _written_extents(self: Any, bulk: list[Any]) -> list[tuple[int, int]]:
    return [(addr, size) for _, addr, size, written in self.extents() if written]


# ---------------------------------------------------------------- session


class Hello(_Req, tag="hello", kw_only=True):
    passive = True
    protocol: int
    client_version: Name
    tenant: Name = "default"
    token: Name = ""
    pid: int = 0
    host_id: Name = ""
    program: Name = ""
    capabilities: Annotated[list[Name], Meta(max_length=64)] = msgspec.field(default_factory=list)
    reservation: Name = ""  # NOTE [pool client] (woolyhv/pool/client.py): the pool reservation this session claims
    resume: Name = ""  # NOTE [migration] (gpud/migrate.py): take over the session that moved here under this token
    # NOTE [session devices] (gpud/server.py): the device ordinal this session asks for; -1: gpud places it
    device: Annotated[int, Meta(ge=-1, le=1023)] = -1


class DeviceInfo(_Msg, kw_only=True):
    ordinal: int
    backend: Literal["cpu", "nvidia", "amd"]
    name: Name
    uuid: Name
    total_mem: Size
    compute_capability: Annotated[list[int], Meta(min_length=2, max_length=2)]
    attributes: dict[int, int] = msgspec.field(default_factory=dict)
    driver_version: int = 12090
    pci_bus_id: Name = ""


class HelloReply(_Req, tag="hello_reply", kw_only=True):
    reply = True
    session: Name
    protocol: int
    server_version: Name
    host_id: Name
    heartbeat_s: float
    capabilities: list[Name] = msgspec.field(default_factory=list)
    devices: list[DeviceInfo] = msgspec.field(default_factory=list)  # all of gpud's devices
    device: int = 0  # NOTE [session devices]: the ordinal of the one the session runs on
    usable: list[int] = msgspec.field(default_factory=list)  # the ordinals the tenant may open sessions on
    local_proof: Name = ""  # NOTE [proven locality] (gpud/shm.py): the file a same-host client creates
    checkpoint_s: float = 0.0  # NOTE [checkpoints] (gpud/checkpoint.py): the client keeps a replay log when > 0


class ProveLocal(_Req, tag="prove_local", kw_only=True):
    """NOTE [proven locality]: the client created the file named in its hello reply (``local_proof``)."""


class Bye(_Req, tag="bye", kw_only=True):
    passive = True


class Ping(_Req, tag="ping", kw_only=True):
    passive = True


class Pong(_Req, tag="pong", kw_only=True):
    passive = True
    reply = True


class Sync(_Req, tag="sync", kw_only=True):
    """Reports errors of calls queued so far, without waiting for device work."""

    passive = True


class Idle(_Req, tag="idle", kw_only=True):
    """A call that does nothing (errors stay pending): an idle client's heartbeat sends it when gpud said
    ``sync_due`` (a move or checkpoint waits for the session's next call, NOTE [migration])."""


class ListSessions(_Req, tag="list_sessions", kw_only=True):
    """An admin call: every tenant's sessions. Needs gpud's admin token where one is set (or tenants need tokens)."""

    passive = True
    token: Name = ""


# ---------------------------------------------------------------- migration (NOTE [migration] in gpud/migrate.py)
Pair = Annotated[list[U64], Meta(min_length=2, max_length=2)]
Triple = Annotated[list[Any], Meta(min_length=3, max_length=3)]


class MoveOut(_Req, tag="move_out", kw_only=True):
    """An admin call to the source gpud: move ``session`` to the gpud at ``endpoint`` (whose CURVE key is
    ``server_key``) at its next synchronisation point. Replies once the session has moved (or could not)."""

    token: Name = ""  # the source's admin token
    session: Name
    endpoint: Name
    server_key: Name = ""
    target_token: Name = ""  # the target's admin token (without a pool order, the target accepts only that)


class MoveIn(_Req, tag="move_in", kw_only=True):
    """Source gpud to target gpud: a session's state, without its memory (``move_data`` brings that). ``order``
    is the pool's move order (``moves/<source>/<session>`` in etcd, which the target reads to check it) or,
    outside a pool, ``admin_token`` is the target's admin token."""

    order: Name = ""
    source: Name = ""
    admin_token: Name = ""
    session: Name
    tenant: Name
    pid: int = 0
    host_id: Name = ""
    program: Name = ""
    reservation: Name = ""
    arena: Pair  # base, size
    regions: Annotated[list[Pair], Meta(max_length=1 << 20)]  # allocations: start, size
    modules: Annotated[list[Triple], Meta(max_length=1 << 16)]  # handle, format, bulk frame of the image
    globals: Annotated[list[Triple], Meta(max_length=1 << 16)]  # module handle, name, bulk frame of its bytes
    functions: Annotated[list[Triple], Meta(max_length=1 << 20)]  # handle, module handle, name
    streams: Annotated[list[Triple], Meta(max_length=1 << 16)]  # handle, flags, priority
    events: Annotated[list[Triple], Meta(max_length=1 << 20)]  # handle, flags, recorded t_ns (-1: never)
    sticky: Annotated[list[Any], Meta(max_length=2)] = msgspec.field(default_factory=list)  # code, message
    pending: Annotated[list[Any], Meta(max_length=2)] = msgspec.field(default_factory=list)
    messages: Annotated[int, Meta(ge=0)] = 0
    aten: dict[str, Any] | None = None  # the executor's tensor table (gpud/aten_exec.py move_export)
    blobs: Annotated[list[Size], Meta(max_length=1 << 20)] = msgspec.field(
        default_factory=list
    )  # sizes of its storages
    moves: Annotated[int, Meta(ge=0, le=1 << 30)] = 0  # times the session moved or was restored before
    prep: Name = ""  # the ``move_prep`` whose pre-copied chunks stand where their digests still match
    digests: Annotated[list[Annotated[list[Any], Meta(min_length=3, max_length=3)]], Meta(max_length=1 << 20)] = (
        msgspec.field(default_factory=list)
    )  # per allocation: start, size, xxh3-128 of each PRE_CHUNK (gpud/migrate.py)


class MovePrep(_Req, tag="move_prep", kw_only=True):
    """Source gpud to target gpud, while the session still runs: reserve the session's arena and allocations (as
    they are now) for ``session`` (authorised as ``move_in`` is) and write the ``move_chunk`` bytes that follow
    into place; ``move_in`` then names this prep and keeps what is still current."""

    order: Name = ""
    source: Name = ""
    admin_token: Name = ""
    session: Name
    tenant: Name
    arena: Pair = msgspec.field(default_factory=lambda: [0, 0])  # base, size
    regions: Annotated[list[Pair], Meta(max_length=1 << 20)] = msgspec.field(default_factory=list)  # as the copy starts


class MoveChunk(_Req, tag="move_chunk", kw_only=True):
    """A pre-copied chunk of a moving session's memory, by its xxh3-128 digest (checked by the target)."""

    prep: Name
    addr: U64
    digest: Annotated[bytes, Meta(min_length=16, max_length=16)]
    frame: FrameIndex = 0


class MoveHave(_Req, tag="move_have", kw_only=True):
    """Pre-copy: which of these chunks ([addr, size, xxh3-128]) does the target's dedup store hold? Those it
    holds it copies into place itself; the source sends only the others."""

    prep: Name
    chunks: Annotated[list[Annotated[list[Any], Meta(min_length=3, max_length=3)]], Meta(max_length=64)]


class MoveBlob(_Req, tag="move_blob", kw_only=True):
    """Bytes of one storage of a moving session's tensors: bulk frame ``frame`` goes to ``offset`` of blob ``index``."""

    move: Name
    index: Annotated[int, Meta(ge=0, lt=1 << 20)]
    offset: Size = 0
    frame: FrameIndex = 0


class MoveData(_Req, tag="move_data", kw_only=True):
    """Bytes of a moving session's memory: bulk frame ``frame`` goes to ``addr``."""

    move: Name
    addr: U64
    frame: FrameIndex = 0


class MoveCommit(_Req, tag="move_commit", kw_only=True):
    """Every byte was sent: the target answers with the resume token the client will say hello with."""

    move: Name
    total: Size = 0  # bytes sent, checked against what arrived


class MoveAbort(_Req, tag="move_abort", kw_only=True):
    move: Name


# ---------------------------------------------------------------- checkpoints (NOTE [checkpoints] in gpud/checkpoint.py)
Digest = Annotated[bytes, Meta(min_length=16, max_length=16)]  # xxh3-128 of a chunk
ChunkList = Annotated[list[Digest], Meta(max_length=1 << 22)]


class CkptBegin(_Req, tag="ckpt_begin", kw_only=True):
    """Source gpud to the session's standby: a checkpoint of ``session`` after its ``seq``-th message. ``state``
    is the session as ``move_in`` carries it (module images in bulk); ``regions`` ([start, size, digests]) and
    ``blobs`` ([size, digests]) list the chunks of its memory and tensor storages; the chunks the standby does not
    hold yet follow as ``ckpt_chunk``. ``order`` is the pool's standby order (``standby/<source>/<session>``)."""

    order: Name = ""
    source: Name = ""
    admin_token: Name = ""
    session: Name
    tenant: Name
    seq: Annotated[int, Meta(ge=0)]
    restore_key: Annotated[str, Meta(min_length=64, max_length=64, pattern=r"^[0-9a-f]+$")]  # sha256 of the token
    chunk: Annotated[int, Meta(ge=4096, le=256 << 20)]
    state: MoveIn
    regions: Annotated[list[Annotated[list[Any], Meta(min_length=3, max_length=3)]], Meta(max_length=1 << 20)]
    blobs: Annotated[list[Annotated[list[Any], Meta(min_length=2, max_length=2)]], Meta(max_length=1 << 20)]


class CkptChunk(_Req, tag="ckpt_chunk", kw_only=True):
    ckpt: Name
    digest: Digest
    frame: FrameIndex = 0


class CkptCommit(_Req, tag="ckpt_commit", kw_only=True):
    ckpt: Name


class CkptDrop(_Req, tag="ckpt_drop", kw_only=True):
    """The session ended at its source: its standby forgets it."""

    session: Name
    source: Name = ""
    order: Name = ""
    admin_token: Name = ""


class Restore(_Req, tag="restore", kw_only=True):
    """A client whose node died asks the standby for its session back (``token``: the restore token its source
    gave it with the checkpoint). Replies with a resume token and the messages the checkpoint covers."""

    session: Name
    tenant: Name
    token: Name


# ---------------------------------------------------------------- memory


class MemAlloc(_Req, tag="mem_alloc", kw_only=True):
    size: Size


class MemFree(_Req, tag="mem_free", kw_only=True):
    queued = True
    addr: U64


class MemGetInfo(_Req, tag="mem_get_info", kw_only=True):
    passive = True


class MemcpyHtoD(_Req, tag="memcpy_htod", kw_only=True):
    queued = True
    dst: U64
    frame: FrameIndex
    stream: Handle = DEFAULT_STREAM

    def writes(self, bulk: list[Any]) -> list[tuple[int, int]]:
        data = bulk[self.frame] if self.frame < len(bulk) else b""
        return [(self.dst, memoryview(data).nbytes)]


class MemcpyDtoH(_Req, tag="memcpy_dtoh", kw_only=True):
    src: U64
    size: Size
    stream: Handle = DEFAULT_STREAM


class MemcpyDtoD(_Req, tag="memcpy_dtod", kw_only=True):
    queued = True
    dst: U64
    src: U64
    size: Size
    stream: Handle = DEFAULT_STREAM

    def writes(self, bulk: list[Any]) -> list[tuple[int, int]]:
        return [(self.dst, self.size)]


ElemSize = Literal[1, 2, 4]


class Memset(_Req, tag="memset", kw_only=True):
    queued = True
    dst: U64
    value: Annotated[int, Meta(ge=0, le=0xFFFFFFFF)]
    elem_size: ElemSize
    count: Size
    stream: Handle = DEFAULT_STREAM

    def writes(self, bulk: list[Any]) -> list[tuple[int, int]]:
        return [(self.dst, self.count * self.elem_size)]


# ---------------------------------------------------------------- vendor libraries (NOTE [vendor libraries])

BlasType = Literal["f16", "bf16", "f32", "f64", "c64", "c128"]
Trans = Literal[0, 1, 2]  # N, T, C
GeamType = Literal["f32", "f64", "c64", "c128"]
Stride = Annotated[int, Meta(ge=0, le=1 << 48)]


class BlasGemm(_Req, tag="blas_gemm", kw_only=True):
    """C[i] = alpha * op(A[i]) @ op(B[i]) + beta * C[i] for i < batch, column-major, in stream order (cuBLAS gemm
    and its Ex, batched and strided forms). ``alpha``/``beta`` are [real, imaginary]; with ``scalars_on_device``
    they are read at run time from device addresses ``alpha_ptr``/``beta_ptr`` (CUBLAS_POINTER_MODE_DEVICE)."""

    queued = True
    trans_a: Trans
    trans_b: Trans
    m: Size
    n: Size
    k: Size
    a_type: BlasType
    b_type: BlasType
    c_type: BlasType
    compute_type: BlasType
    alpha: Annotated[list[float], Meta(min_length=2, max_length=2)] = msgspec.field(default_factory=lambda: [1.0, 0.0])
    beta: Annotated[list[float], Meta(min_length=2, max_length=2)] = msgspec.field(default_factory=lambda: [0.0, 0.0])
    scalars_on_device: bool = False
    alpha_ptr: U64 = 0
    beta_ptr: U64 = 0
    a: U64
    lda: Size
    stride_a: Stride = 0
    b: U64
    ldb: Size
    stride_b: Stride = 0
    c: U64
    ldc: Size
    stride_c: Stride = 0
    batch: Annotated[int, Meta(ge=1, le=1 << 24)] = 1
    stream: Handle = DEFAULT_STREAM

    def writes(self, bulk: list[Any]) -> list[tuple[int, int]]:
        from proto.blas import extents

        return [(addr, size) for operand, addr, size in extents(self) if operand == "C"]


Direction = Literal[-1, 1]  # CUFFT_FORWARD, CUFFT_INVERSE


class FftExec(_Req, tag="fft_exec", kw_only=True):
    """One cuFFT execution (cufftExec*), in stream order: the plan's geometry (proto/fft.py) travels with it, so
    gpud keeps no plan state; unnormalised in both directions, as cuFFT is."""

    queued = True
    type: Annotated[int, Meta(ge=0, le=0xFF)]  # cufftType
    rank: Annotated[int, Meta(ge=1, le=3)]
    n: Annotated[list[Annotated[int, Meta(ge=1, le=1 << 40)]], Meta(min_length=1, max_length=3)]
    batch: Annotated[int, Meta(ge=1, le=1 << 40)] = 1
    inembed: Annotated[list[Annotated[int, Meta(ge=1, le=1 << 40)]], Meta(max_length=3)] = msgspec.field(
        default_factory=list
    )
    istride: Annotated[int, Meta(ge=0, le=1 << 40)] = 1
    idist: Annotated[int, Meta(ge=0, le=1 << 48)] = 0
    onembed: Annotated[list[Annotated[int, Meta(ge=1, le=1 << 40)]], Meta(max_length=3)] = msgspec.field(
        default_factory=list
    )
    ostride: Annotated[int, Meta(ge=0, le=1 << 40)] = 1
    odist: Annotated[int, Meta(ge=0, le=1 << 48)] = 0
    idata: U64
    odata: U64
    direction: Direction = -1
    stream: Handle = DEFAULT_STREAM

    def writes(self, bulk: list[Any]) -> list[tuple[int, int]]:
        from proto.fft import extents

        return [(addr, size) for side, addr, size in extents(self) if side == "output"]


class BlasGeam(_Req, tag="blas_geam", kw_only=True):
    """C = alpha * op(A) + beta * op(B), all m x n once transposed, column-major, in stream order (cublas<t>geam:
    CuPy's transposes and copies between layouts). A is not read when alpha is 0, B not when beta is 0."""

    queued = True
    trans_a: Trans
    trans_b: Trans
    m: Size
    n: Size
    type: GeamType
    alpha: Annotated[list[float], Meta(min_length=2, max_length=2)] = msgspec.field(default_factory=lambda: [1.0, 0.0])
    beta: Annotated[list[float], Meta(min_length=2, max_length=2)] = msgspec.field(default_factory=lambda: [0.0, 0.0])
    a: U64
    lda: Size
    b: U64
    ldb: Size
    c: U64
    ldc: Size
    stream: Handle = DEFAULT_STREAM

    def writes(self, bulk: list[Any]) -> list[tuple[int, int]]:
        from proto.blas import geam_extents

        return [(addr, size) for operand, addr, size in geam_extents(self) if operand == "C"]


VectorOp = Literal["axpy", "dot", "dotc", "nrm2", "asum", "scal", "copy", "swap", "iamax", "iamin"]
Inc = Annotated[int, Meta(ge=-(1 << 40), le=1 << 40)]  # BLAS increments: negative walks the vector backwards


class BlasVector(_Req, tag="blas_vector", kw_only=True):
    """One cuBLAS level-1 operation on the strided vectors x (and y), in stream order (cublas<t>axpy, dot, dotc,
    nrm2, asum, scal, copy, swap, iamax, iamin and their _64 forms). ``alpha`` is axpy's and scal's scalar, read at
    run time from ``alpha_ptr`` with ``scalars_on_device``; ``alpha_real``: the scalar is real for a complex
    vector (Csscal, Zdscal). A
    reduction (dot, dotc, nrm2, asum, iamax, iamin) writes its result to the device address ``result``: the
    client reads it back in host pointer mode. Semantics as reference BLAS, proto/blas.py."""

    queued = True
    op: VectorOp
    type: GeamType
    n: Size
    x: U64
    incx: Inc = 1
    y: U64 = 0
    incy: Inc = 1
    alpha: Annotated[list[float], Meta(min_length=2, max_length=2)] = msgspec.field(default_factory=lambda: [1.0, 0.0])
    alpha_real: bool = False
    scalars_on_device: bool = False
    alpha_ptr: U64 = 0
    result: U64 = 0
    result_int64: bool = False  # iamax/iamin's index as int64 (the _64 API) rather than int
    stream: Handle = DEFAULT_STREAM

    def writes(self, bulk: list[Any]) -> list[tuple[int, int]]:
        from proto.blas import vector_extents

        return [(addr, size) for _, addr, size, written in vector_extents(self) if written]


MatrixOp = Literal["gemv", "ger", "gerc", "sbmv", "dgmm", "syrk"]


class BlasMatrix(_Req, tag="blas_matrix", kw_only=True):
    """One cuBLAS level-2 (or small level-3) operation, column-major, in stream order (proto/blas.py
    ``matrix_extents`` gives each operand's shape): ``gemv`` y = alpha op(A) x + beta y (A m x n as stored);
    ``ger`` A = alpha x y^T + A and ``gerc`` A = alpha x y^H + A (A m x n); ``sbmv`` y = alpha A x + beta y with A
    symmetric n x n, k bands, stored in band form in the ``uplo`` triangle; ``dgmm`` C = diag(x) A (``side`` 0)
    or A diag(x) (``side`` 1), A and C m x n; ``syrk`` C = alpha op(A) op(A)^T + beta C on C's
    ``uplo`` triangle (C n x n, op(A) n x k). The cublas<t> functions of those names and their _64 forms; scalars
    as ``BlasGemm``'s."""

    queued = True
    op: MatrixOp
    type: GeamType
    trans: Trans = 0
    uplo: Literal[0, 1] = 0  # CUBLAS_FILL_MODE_LOWER, UPPER
    side: Literal[0, 1] = 0  # dgmm's CUBLAS_SIDE_LEFT, RIGHT
    m: Size = 0
    n: Size
    k: Size = 0
    alpha: Annotated[list[float], Meta(min_length=2, max_length=2)] = msgspec.field(default_factory=lambda: [1.0, 0.0])
    beta: Annotated[list[float], Meta(min_length=2, max_length=2)] = msgspec.field(default_factory=lambda: [0.0, 0.0])
    scalars_on_device: bool = False
    alpha_ptr: U64 = 0
    beta_ptr: U64 = 0
    a: U64
    lda: Size
    x: U64 = 0
    incx: Inc = 1
    y: U64 = 0
    incy: Inc = 1
    c: U64 = 0
    ldc: Size = 0
    stream: Handle = DEFAULT_STREAM

    def writes(self, bulk: list[Any]) -> list[tuple[int, int]]:
        from proto.blas import matrix_extents

        return [(addr, size) for _, addr, size, written in matrix_extents(self) if written]


SparseFormat = Literal["csr", "csc", "coo"]
IndexType = Literal["i32", "i64"]


class SparseMv(_Req, tag="sparse_mv", kw_only=True):
    """y = alpha op(A) x + beta y with A sparse (rows x cols as stored; CSR, CSC or COO with ``base`` 0 or 1), in
    stream order (cusparseSpMV). ``offsets``: CSR's row offsets (rows + 1) or CSC's column offsets (cols + 1);
    ``indices``: CSR's column or CSC's row indices (nnz); COO: ``rows_idx`` and ``indices`` (row and column, nnz
    each). gpud checks the index arrays (in range, offsets non-decreasing) before it reads x: a bad index is
    CUDA_ERROR_INVALID_VALUE, never a read past x (proto/sparse.py). Scalars as ``BlasGemm``'s.

    With ``n`` > 0 it is cusparseSpMM: C = alpha op(A) op(B) + beta C, ``x`` and ``y`` the dense matrices B and C
    (op(B): (columns of op(A)) x n; C: (rows of op(A)) x n), each with its leading dimension and order; with
    ``to_dense`` too, cusparseSparseToDense: C = A."""

    queued = True
    format: SparseFormat
    op: Trans = 0
    rows: Size
    cols: Size
    nnz: Size
    offsets: U64 = 0
    rows_idx: U64 = 0
    indices: U64 = 0
    values: U64 = 0
    offset_type: IndexType = "i32"
    index_type: IndexType = "i32"
    base: Literal[0, 1] = 0
    type: GeamType
    x: U64
    y: U64
    n: Size = 0  # SpMM: the columns of op(B) and C (0: SpMV)
    to_dense: bool = False  # cusparseSparseToDense: C = A (n = cols, no B, no scalars)
    solve: bool = False  # cusparseSpSV_solve: y = alpha op(T)^-1 x, T A's triangle (square A; beta unused)
    lower: bool = True  # SpSV: the triangle of A that T is (CUSPARSE_SPMAT_FILL_MODE)
    unit: bool = False  # SpSV: T's diagonal is ones, whatever A holds there (CUSPARSE_SPMAT_DIAG_TYPE)
    op_b: Trans = 0
    ldb: Size = 0
    ldc: Size = 0
    b_row_major: bool = False
    c_row_major: bool = False
    alpha: Annotated[list[float], Meta(min_length=2, max_length=2)] = msgspec.field(default_factory=lambda: [1.0, 0.0])
    beta: Annotated[list[float], Meta(min_length=2, max_length=2)] = msgspec.field(default_factory=lambda: [0.0, 0.0])
    scalars_on_device: bool = False
    alpha_ptr: U64 = 0
    beta_ptr: U64 = 0
    stream: Handle = DEFAULT_STREAM

    def writes(self, bulk: list[Any]) -> list[tuple[int, int]]:
        from proto.sparse import extents

        return [(addr, size) for _, addr, size, written in extents(self) if written]


class SparseIlu0(_Req, tag="sparse_ilu0", kw_only=True):
    """cusparse<t>csrilu02: the incomplete LU factorisation with no fill-in of a square CSR matrix (int32 indices,
    sorted in each row), in place in ``values`` (L's unit diagonal implied, U's on the diagonal), in stream order;
    answers the first row whose pivot is zero (-1: none), which cusparseXcsrilu02_zeroPivot reports. gpud checks
    the index arrays before it follows them."""

    queued = True
    count: bool = True  # the zero pivot is answered when the stream reaches the factorisation
    m: Size
    nnz: Size
    values: U64
    offsets: U64
    indices: U64
    type: GeamType
    base: Literal[0, 1] = 0
    stream: Handle = DEFAULT_STREAM

    def extents(self) -> list[tuple[str, int, int, bool]]:
        from proto.blas import ITEM

        out = [
            ("offsets", self.offsets, (self.m + 1) * 4, False),
            ("indices", self.indices, self.nnz * 4, False),
            ("values", self.values, self.nnz * ITEM[self.type], True),
        ]
        return [e for e in out if e[2]]


class SparseSolve(_Req, tag="sparse_solve", kw_only=True):
    """cusolverSp's device solvers (csrlsvchol/csrlsvqr, the csrchol*/csrqr* families): x with (A - mu I) x = b for
    an m x n CSR matrix in float64 (int32 indices), in stream order (NOTE [sparse solves], proto/spsolve.py);
    answers the singularity (-1: invertible under ``tol``). ``b`` = ``x`` = 0: factorise only, for the zero pivot.
    x is left as it was when A is singular. gpud checks the index arrays before it follows them."""

    queued = True
    count: bool = True
    method: Literal["chol", "lu", "qr"]
    m: Size
    n: Size
    nnz: Size
    values: U64
    offsets: U64
    indices: U64
    b: U64 = 0
    x: U64 = 0
    tol: float = 0.0
    mu: float = 0.0
    base: Literal[0, 1] = 0
    stream: Handle = DEFAULT_STREAM

    def extents(self) -> list[tuple[str, int, int, bool]]:
        out = [
            ("offsets", self.offsets, (self.m + 1) * 4, False),
            ("indices", self.indices, self.nnz * 4, False),
            ("values", self.values, self.nnz * 8, False),
        ]
        if self.b or self.x:
            out += [("b", self.b, self.m * 8, False), ("x", self.x, self.n * 8, True)]
        return [e for e in out if e[2]]


class SparseIndices(_Req, tag="sparse_indices", kw_only=True):
    """cusparseXcsr2coo (``to_coo``) and cusparseXcoo2csr, int32, in stream order: CSR row offsets (m + 1) to COO
    row indices (nnz), or back. gpud copies and checks the source before it writes (offsets rising from ``base``
    to nnz + ``base``; row indices within [base, m + base)): a bad one is CUDA_ERROR_INVALID_VALUE."""

    queued = True
    to_coo: bool
    m: Size
    nnz: Size
    src: U64
    dst: U64
    base: Literal[0, 1] = 0
    stream: Handle = DEFAULT_STREAM

    def extents(self) -> list[tuple[str, int, int, bool]]:
        src, dst = (self.m + 1, self.nnz) if self.to_coo else (self.nnz, self.m + 1)
        return [e for e in (("source", self.src, src * 4, False), ("destination", self.dst, dst * 4, True)) if e[2]]


class SparseTranspose(_Req, tag="sparse_transpose", kw_only=True):
    """cusparseCsr2cscEx2, int32 indices, in stream order: an m x n CSR matrix (``offsets``, ``indices``,
    ``values``) rewritten as CSC (``out_*``: n + 1 column offsets, nnz row indices sorted within each column, the
    values when ``numeric``). gpud copies and checks the source indices first (NOTE [vendor libraries])."""

    queued = True
    m: Size
    n: Size
    nnz: Size
    offsets: U64
    indices: U64
    values: U64 = 0
    out_offsets: U64
    out_indices: U64
    out_values: U64 = 0
    type: GeamType = "f32"
    numeric: bool = True
    base: Literal[0, 1] = 0
    stream: Handle = DEFAULT_STREAM

    def extents(self) -> list[tuple[str, int, int, bool]]:
        from proto.blas import ITEM

        vals = self.nnz * ITEM[self.type] if self.numeric else 0
        out = [
            ("offsets", self.offsets, (self.m + 1) * 4, False),
            ("indices", self.indices, self.nnz * 4, False),
            ("values", self.values, vals, False),
            ("column offsets", self.out_offsets, (self.n + 1) * 4, True),
            ("row indices", self.out_indices, self.nnz * 4, True),
            ("csc values", self.out_values, vals, True),
        ]
        return [e for e in out if e[2]]


class SparseSort(_Req, tag="sparse_sort", kw_only=True):
    """cuSPARSE's index sorts, int32, in stream order, each permuting ``perm`` (nnz) as it moves the entries:
    ``identity`` fills it with 0..nnz-1 (cusparseCreateIdentityPermutation); ``coo_row``/``coo_col`` sort COO
    ``rows``/``cols`` in place by (row, column) or (column, row) (cusparseXcoosortByRow/ByColumn); ``csr`` sorts
    ``cols`` within each row of the CSR offsets ``rows`` (cusparseXcsrsort; the offsets checked first). Entries
    are only moved, never followed, so the sorted indices need no check."""

    queued = True
    mode: Literal["identity", "coo_row", "coo_col", "csr"]
    m: Size = 0
    n: Size = 0
    nnz: Size
    rows: U64 = 0
    cols: U64 = 0
    perm: U64
    base: Literal[0, 1] = 0
    stream: Handle = DEFAULT_STREAM

    def extents(self) -> list[tuple[str, int, int, bool]]:
        nnz4 = self.nnz * 4
        out = [("permutation", self.perm, nnz4, True)]
        if self.mode in ("coo_row", "coo_col"):
            out += [("rows", self.rows, nnz4, True), ("columns", self.cols, nnz4, True)]
        elif self.mode == "csr":
            out += [("offsets", self.rows, (self.m + 1) * 4, False), ("columns", self.cols, nnz4, True)]
        return [e for e in out if e[2]]


class SparseGather(_Req, tag="sparse_gather", kw_only=True):
    """cusparseGather, in stream order: ``values[i] = y[indices[i] - base]`` for the nnz entries of a sparse vector
    of ``size`` over a dense vector ``y`` of ``size`` elements; with ``scatter`` (cusparseScatter) the other way,
    ``y[indices[i] - base] = values[i]``. gpud checks the copied indices first."""

    queued = True
    size: Size
    nnz: Size
    indices: U64
    values: U64
    y: U64
    index_type: IndexType = "i32"
    type: GeamType
    base: Literal[0, 1] = 0
    scatter: bool = False
    stream: Handle = DEFAULT_STREAM

    def extents(self) -> list[tuple[str, int, int, bool]]:
        from proto.blas import ITEM

        item, idx = ITEM[self.type], 4 if self.index_type == "i32" else 8
        out = [
            ("indices", self.indices, self.nnz * idx, False),
            ("y", self.y, self.size * item, self.scatter),
            ("values", self.values, self.nnz * item, not self.scatter),
        ]
        return [e for e in out if e[2]]


class SparseGemm(_Req, tag="sparse_gemm", kw_only=True):
    """cusparseSpGEMM on CSR matrices: C = alpha A B, in stream order. ``count`` (cusparseSpGEMM_compute) answers
    C's nnz; otherwise (cusparseSpGEMM_copy) C's ``c_nnz`` entries are written at ``c_*``, sorted within each row.
    Stateless on gpud: each phase computes the product from A and B as they are then (their indices checked
    first, and the product's size bounded before it is formed)."""

    queued = True
    count: bool = False
    m: Size
    k: Size
    n: Size
    a_nnz: Size
    a_offsets: U64
    a_indices: U64
    a_values: U64
    b_nnz: Size
    b_offsets: U64
    b_indices: U64
    b_values: U64
    c_nnz: Size = 0
    c_offsets: U64 = 0
    c_indices: U64 = 0
    c_values: U64 = 0
    index_type: IndexType = "i32"
    base: Literal[0, 1] = 0
    type: GeamType
    alpha: Annotated[list[float], Meta(min_length=2, max_length=2)] = msgspec.field(default_factory=lambda: [1.0, 0.0])
    stream: Handle = DEFAULT_STREAM

    def extents(self) -> list[tuple[str, int, int, bool]]:
        from proto.blas import ITEM

        item, idx = ITEM[self.type], 4 if self.index_type == "i32" else 8
        out = [
            ("A offsets", self.a_offsets, (self.m + 1) * idx, False),
            ("A indices", self.a_indices, self.a_nnz * idx, False),
            ("A values", self.a_values, self.a_nnz * item, False),
            ("B offsets", self.b_offsets, (self.k + 1) * idx, False),
            ("B indices", self.b_indices, self.b_nnz * idx, False),
            ("B values", self.b_values, self.b_nnz * item, False),
        ]
        if not self.count:
            out += [
                ("C offsets", self.c_offsets, (self.m + 1) * idx, True),
                ("C indices", self.c_indices, self.c_nnz * idx, True),
                ("C values", self.c_values, self.c_nnz * item, True),
            ]
        return [e for e in out if e[2]]


class SparseFromDense(_Req, tag="sparse_from_dense", kw_only=True):
    """cusparseDenseToSparse, in stream order: the nonzeros of a dense rows x cols matrix (leading dimension
    ``ld``, column or row order) as CSR, CSC or COO, sorted. ``count`` (the analysis) answers nnz; otherwise
    (the conversion) the ``nnz`` entries are written at ``offsets`` (CSR/CSC offsets, COO row indices),
    ``indices`` and ``out_values``: nnz must be the one ``count`` gave."""

    queued = True
    count: bool = False
    rows: Size
    cols: Size
    ld: Size
    row_major: bool = False
    values: U64
    type: GeamType
    format: SparseFormat
    nnz: Size = 0
    offsets: U64 = 0
    indices: U64 = 0
    out_values: U64 = 0
    offset_type: IndexType = "i32"
    index_type: IndexType = "i32"
    base: Literal[0, 1] = 0
    stream: Handle = DEFAULT_STREAM

    def extents(self) -> list[tuple[str, int, int, bool]]:
        from proto.blas import ITEM
        from proto.sparse import INDEX, matrix_bytes

        item = ITEM[self.type]
        out = [("dense", self.values, matrix_bytes("A", (self.rows, self.cols), self.ld, self.row_major, item), False)]
        if not self.count:
            first = {"csr": (self.rows + 1) * INDEX[self.offset_type], "csc": (self.cols + 1) * INDEX[self.offset_type]}
            out += [
                ("offsets", self.offsets, first.get(self.format, self.nnz * INDEX[self.index_type]), True),
                ("indices", self.indices, self.nnz * INDEX[self.index_type], True),
                ("values", self.out_values, self.nnz * item, True),
            ]
        return [e for e in out if e[2]]


class SparseGeam(_Req, tag="sparse_geam", kw_only=True):
    """cusparse<t>csrgeam2 on m x n CSR matrices (int32 indices): C = alpha A + beta B, in stream order.
    ``count`` (cusparseXcsrgeam2Nnz) writes C's row offsets and answers its nnz; otherwise C's ``c_nnz`` column
    indices and values are written too. Stateless on gpud; A's and B's indices are checked first."""

    queued = True
    count: bool = False
    m: Size
    n: Size
    a_nnz: Size
    a_offsets: U64
    a_indices: U64
    a_values: U64 = 0
    a_base: Literal[0, 1] = 0
    b_nnz: Size
    b_offsets: U64
    b_indices: U64
    b_values: U64 = 0
    b_base: Literal[0, 1] = 0
    c_nnz: Size = 0
    c_offsets: U64
    c_indices: U64 = 0
    c_values: U64 = 0
    c_base: Literal[0, 1] = 0
    type: GeamType
    alpha: Annotated[list[float], Meta(min_length=2, max_length=2)] = msgspec.field(default_factory=lambda: [1.0, 0.0])
    beta: Annotated[list[float], Meta(min_length=2, max_length=2)] = msgspec.field(default_factory=lambda: [1.0, 0.0])
    stream: Handle = DEFAULT_STREAM

    def extents(self) -> list[tuple[str, int, int, bool]]:
        from proto.blas import ITEM

        item = 0 if self.count else ITEM[self.type]
        out = [
            ("A offsets", self.a_offsets, (self.m + 1) * 4, False),
            ("A indices", self.a_indices, self.a_nnz * 4, False),
            ("A values", self.a_values, self.a_nnz * item, False),
            ("B offsets", self.b_offsets, (self.m + 1) * 4, False),
            ("B indices", self.b_indices, self.b_nnz * 4, False),
            ("B values", self.b_values, self.b_nnz * item, False),
            ("C offsets", self.c_offsets, (self.m + 1) * 4, True),
        ]
        if not self.count:
            out += [
                ("C indices", self.c_indices, self.c_nnz * 4, True),
                ("C values", self.c_values, self.c_nnz * item, True),
            ]
        return [e for e in out if e[2]]


class SparseCompress(_Req, tag="sparse_compress", kw_only=True):
    """cusparse<t>nnz_compress (``count``: each row's entries with absolute value over ``tol``, written to
    ``per_row``, and their total answered) and cusparse<t>csr2csr_compress (those entries written as the CSR
    matrix ``c_*``), int32 indices, in stream order. gpud checks the row offsets before it slices rows by them."""

    queued = True
    count: bool = False
    m: Size
    n: Size = 0
    nnz: Size
    values: U64
    offsets: U64
    indices: U64 = 0
    per_row: U64 = 0
    c_nnz: Size = 0
    c_values: U64 = 0
    c_indices: U64 = 0
    c_offsets: U64 = 0
    tol: float = 0.0
    type: GeamType
    base: Literal[0, 1] = 0
    stream: Handle = DEFAULT_STREAM

    def extents(self) -> list[tuple[str, int, int, bool]]:
        from proto.blas import ITEM

        item = ITEM[self.type]
        out = [("values", self.values, self.nnz * item, False), ("offsets", self.offsets, (self.m + 1) * 4, False)]
        if self.count:
            out.append(("nnz per row", self.per_row, self.m * 4, True))
        else:
            out += [
                ("indices", self.indices, self.nnz * 4, False),
                ("C values", self.c_values, self.c_nnz * item, True),
                ("C indices", self.c_indices, self.c_nnz * 4, True),
                ("C offsets", self.c_offsets, (self.m + 1) * 4, True),
            ]
        return [e for e in out if e[2]]


RandDist = Literal["bits", "uniform", "normal", "lognormal", "poisson"]
RandType = Literal["u32", "f32", "f64"]


class RandGenerate(_Req, tag="rand_generate", kw_only=True):
    """Fill ``n`` values at ``out`` from a cuRAND generator's stream (curandGenerate*), in stream order. Stateless on
    gpud: the generator's ``seed`` and the position ``offset`` its earlier calls reached name the numbers
    (NOTE [random numbers], proto/rand.py)."""

    queued = True
    dist: RandDist
    dtype: RandType
    out: U64
    n: Annotated[int, Meta(ge=0, le=1 << 40)]
    seed: U64 = 0
    offset: U64 = 0
    mean: float = 0.0  # normal, lognormal
    stddev: float = 1.0
    lam: float = 1.0  # poisson
    stream: Handle = DEFAULT_STREAM

    def writes(self, bulk: list[Any]) -> list[tuple[int, int]]:
        return [(self.out, self.n * (8 if self.dtype == "f64" else 4))]


SolverOp = Literal["getrf", "getrs", "getri", "potrf", "potrs", "geqrf", "orgqr", "gesvd", "gesvdj", "syevd", "geev"]
Fill = Literal[0, 1]  # CUBLAS_FILL_MODE_LOWER, UPPER
SvdJob = Literal["A", "S", "O", "N"]  # all, the first min(m, n), those into A, none


class SolverCall(_Req, tag="solver", kw_only=True):
    """One dense LAPACK routine of cuSOLVER (cusolverDn<t><op>) or of cuBLAS's batched LU (one matrix of the
    batch), column-major, in stream order: the operands are device addresses with their leading dimensions, and
    ``info`` the device int the routine writes its LAPACK info to (proto/solver.py says which operand each routine
    reads and writes; gpud/solver.py runs them)."""

    queued = True
    op: SolverOp
    dtype: GeamType
    m: Annotated[int, Meta(ge=0, le=1 << 24)] = 0
    n: Annotated[int, Meta(ge=0, le=1 << 24)] = 0
    k: Annotated[int, Meta(ge=0, le=1 << 24)] = 0  # right-hand sides (getrs, potrs), reflectors (orgqr)
    uplo: Fill = 0
    trans: Trans = 0
    jobu: SvdJob = "N"
    jobvt: SvdJob = "N"
    vectors: bool = False  # syevd, gesvdj: CUSOLVER_EIG_MODE_VECTOR; geev: the right eigenvectors
    left: bool = False  # geev: the left eigenvectors
    a: U64
    lda: Size
    b: U64 = 0  # the right-hand sides (getrs, potrs), the inverse (getri)
    ldb: Size = 0
    ipiv: U64 = 0
    w: U64 = 0  # tau (geqrf, orgqr), the singular values (gesvd, gesvdj), the eigenvalues (syevd, geev: complex)
    u: U64 = 0  # U (gesvd, gesvdj), the left eigenvectors (geev)
    ldu: Size = 0
    vt: U64 = 0  # V^H (gesvd), V (gesvdj), the right eigenvectors (geev)
    ldvt: Size = 0
    info: U64 = 0
    stream: Handle = DEFAULT_STREAM

    def writes(self, bulk: list[Any]) -> list[tuple[int, int]]:
        from proto.solver import extents

        return [(addr, size) for _, addr, size, written in extents(self) if written]


# ---------------------------------------------------------------- streams and events


class StreamCreate(_Req, tag="stream_create", kw_only=True):
    queued = True
    stream: Handle
    flags: int = 0
    priority: int = 0


class StreamDestroy(_Req, tag="stream_destroy", kw_only=True):
    queued = True
    stream: Handle


class StreamSynchronize(_Req, tag="stream_synchronize", kw_only=True):
    stream: Handle


class StreamQuery(_Req, tag="stream_query", kw_only=True):
    stream: Handle


class StreamWaitEvent(_Req, tag="stream_wait_event", kw_only=True):
    queued = True
    stream: Handle
    event: Handle


class EventCreate(_Req, tag="event_create", kw_only=True):
    queued = True
    event: Handle
    flags: int = 0


class EventRecord(_Req, tag="event_record", kw_only=True):
    queued = True
    event: Handle
    stream: Handle = DEFAULT_STREAM


class EventQuery(_Req, tag="event_query", kw_only=True):
    event: Handle


class EventSynchronize(_Req, tag="event_synchronize", kw_only=True):
    event: Handle


class EventElapsed(_Req, tag="event_elapsed", kw_only=True):
    start: Handle
    end: Handle


class EventDestroy(_Req, tag="event_destroy", kw_only=True):
    queued = True
    event: Handle


class CtxSynchronize(_Req, tag="ctx_synchronize", kw_only=True):
    pass


# ---------------------------------------------------------------- modules and launches


ModuleFormat = Literal["ptx", "cubin", "fatbin"]


class ModuleLoad(_Req, tag="module_load", kw_only=True):
    module: Handle
    frame: FrameIndex
    format: ModuleFormat = "ptx"


class ModuleUnload(_Req, tag="module_unload", kw_only=True):
    queued = True
    module: Handle


class ModuleGetFunction(_Req, tag="module_get_function", kw_only=True):
    module: Handle
    name: Name
    function: Handle


class ModuleGetGlobal(_Req, tag="module_get_global", kw_only=True):
    module: Handle
    name: Name


class Launch(_Req, tag="launch", kw_only=True):
    queued = True
    function: Handle
    grid: Dim3
    block: Dim3
    shared_mem: Annotated[int, Meta(ge=0, le=1 << 30)] = 0
    stream: Handle = DEFAULT_STREAM
    params: Annotated[bytes, Meta(max_length=1 << 16)] = b""
    cooperative: bool = (
        False  # every block resident at once; grid sync allowed (NOTE [grid sync], jit/emit/cpu/grid.py)
    )

    def writes(self, bulk: list[Any]) -> list[tuple[int, int]]:
        """A kernel may write through any pointer it is given: every 8-byte word of its parameters."""
        n = len(self.params) // 8
        return [(ptr, POINTERS) for (ptr,) in struct.iter_unpack("<Q", self.params[: n * 8])]


# ---------------------------------------------------------------- same-host staging (shared memory)
# NOTE [shm staging]: when client and gpud share a host, bulk copies go through a shared-memory
# ring that gpud creates per session (ShmOpen). The client copies into a slot and queues ShmHtoD;
# gpud copies the slot to the device in stream order and then writes the op's ``seq`` into the
# slot's flag word (high bit set on error), which is how the client knows the slot is free.
# ShmDtoH runs the other way. Two memcpys, pipelined across slots, instead of four socket copies.


class ShmOpen(_Req, tag="shm_open", kw_only=True):
    pass


class ShmHtoD(_Req, tag="shm_htod", kw_only=True):
    queued = True
    dst: U64
    slot: Annotated[int, Meta(ge=0, lt=1024)]
    size: Size
    seq: Annotated[int, Meta(ge=1, lt=1 << 62)]
    stream: Handle = DEFAULT_STREAM

    def writes(self, bulk: list[Any]) -> list[tuple[int, int]]:
        return [(self.dst, self.size)]


class ShmDtoH(_Req, tag="shm_dtoh", kw_only=True):
    queued = True
    src: U64
    slot: Annotated[int, Meta(ge=0, lt=1024)]
    size: Size
    seq: Annotated[int, Meta(ge=1, lt=1 << 62)]
    stream: Handle = DEFAULT_STREAM


# ---------------------------------------------------------------- mapped host memory (same host, CPU backend)
# NOTE [host map]: pinned (cuMemHostAlloc) and managed (cuMemAllocManaged) memory must be reachable by
# kernels. When client and gpud share a host, the client allocates it as a file in /dev/shm that both
# map (MAP_SHARED: same pages); gpud registers its mapping as a region of the session, so kernels and
# copies may use it. ``hint``: map at this address (managed memory needs one address on both sides);
# with ``exact`` gpud fails rather than map elsewhere. Returns gpud's address.


class HostMap(_Req, tag="host_map", kw_only=True):
    path: Annotated[str, Meta(max_length=255)]
    size: Size
    hint: U64 = 0
    exact: bool = False


class HostUnmap(_Req, tag="host_unmap", kw_only=True):
    queued = True
    addr: U64


# NOTE [ipc]: CUDA IPC between processes of one tenant. ``ipc_get`` turns an allocation of the session
# into an opaque 64-byte handle (a capability: random, unguessable); ``ipc_open`` in another session
# of the same tenant maps that allocation into it and returns its address (gpud's address space is
# shared, so it is the exporter's address); ``ipc_close`` unmaps it. Returns: handle bytes / [addr,
# size] / nothing.
IpcHandle = Annotated[bytes, Meta(min_length=64, max_length=64)]


class IpcGet(_Req, tag="ipc_get", kw_only=True):
    addr: U64


class IpcOpen(_Req, tag="ipc_open", kw_only=True):
    handle: IpcHandle


class IpcClose(_Req, tag="ipc_close", kw_only=True):
    addr: U64


# NOTE [ipc events] (gpud/ipc.py): ``ipc_event_get`` turns an event created with CU_EVENT_INTERPROCESS into a
# 64-byte handle; ``ipc_event_open`` in another session of the same tenant makes ``event`` (a handle the client
# chose) name that same event there. Returns: handle bytes / nothing.
class IpcEventGet(_Req, tag="ipc_event_get", kw_only=True):
    event: Handle


class IpcEventOpen(_Req, tag="ipc_event_open", kw_only=True):
    handle: IpcHandle
    event: Handle


# ---------------------------------------------------------------- ATen (the PyTorch face)
# NOTE [aten wire]: one op is a 4-element list ``[name, args, kwargs, outs]``: ``name`` is an ATen
# overload ("aten.add.Tensor") or a wooly pseudo-op ("wooly.free", "wooly.upload", "wooly.seed"),
# ``args``/``kwargs`` are msgpack values where tensors, dtypes, devices ... are msgpack ext types
# (encoded and decoded by proto/aten.py, NOTE [aten values]), and ``outs`` are the handles, chosen by the client, of
# the op's tensor outputs (0 = "an input mutated in place, do not store"). gpud validates each
# op when it runs it (names against the aten namespace, handles against the session's table).
AtenOpWire = Annotated[list[Any], Meta(min_length=4, max_length=4)]


class AtenBatch(_Req, tag="aten_batch", kw_only=True):
    """Ops run in order on gpud; returns nothing (errors are reported at the next sync)."""

    queued = True
    ops: Annotated[list[AtenOpWire], Meta(max_length=65536)]
    frame: FrameIndex = 0  # base index of this batch's bulk frames (uploads)


class AtenCall(_Req, tag="aten_call", kw_only=True):
    """One op whose reply the client waits for (item(), cpu(), data-dependent shapes, stats)."""

    op: AtenOpWire
    frame: FrameIndex = 0


# ---------------------------------------------------------------- dedup (gpud/hypervisor/dedup.py)
# NOTE [dedup protocol] in gpud/hypervisor/dedup.py: an upload of ``size`` bytes at ``dst`` is cut
# into ``chunk``-byte pieces, each named by its hash. DedupUpload (a call) maps the pieces gpud
# holds and answers the indexes it lacks; the client copies those the ordinary way and queues
# DedupPublish so that gpud, after hashing the bytes itself, stores them for the next tenant.
ChunkHash = Annotated[bytes, Meta(min_length=16, max_length=32)]
HashAlgo = Literal["xxh3_128", "sha256"]
ChunkSize = Annotated[int, Meta(ge=4096, le=1 << 28)]


class DedupUpload(_Req, tag="dedup_upload", kw_only=True):
    dst: U64
    size: Size
    chunk: ChunkSize
    algo: HashAlgo = "xxh3_128"
    hashes: Annotated[list[ChunkHash], Meta(max_length=1 << 20)]
    stream: Handle = DEFAULT_STREAM

    def writes(self, bulk: list[Any]) -> list[tuple[int, int]]:
        return [(self.dst, self.size)]


class DedupPublish(_Req, tag="dedup_publish", kw_only=True):
    queued = True
    dst: U64
    size: Size
    chunk: ChunkSize
    algo: HashAlgo = "xxh3_128"
    indexes: Annotated[list[Annotated[int, Meta(ge=0, lt=1 << 20)]], Meta(max_length=1 << 20)]
    hashes: Annotated[list[ChunkHash], Meta(max_length=1 << 20)]
    stream: Handle = DEFAULT_STREAM


class DedupQuery(_Req, tag="dedup_query", kw_only=True):
    """Which of these chunks does gpud lack? The ones it holds are pinned for this session until a
    DedupTensor uses them (or the session ends)."""

    chunk: ChunkSize
    size: Size
    algo: HashAlgo = "xxh3_128"
    hashes: Annotated[list[ChunkHash], Meta(max_length=1 << 20)]


class DedupTensor(_Req, tag="dedup_tensor", kw_only=True):
    """Make tensor ``handle`` (PyTorch face) from chunks: pinned ones (frame -1) and sent ones."""

    queued = True
    handle: Handle
    dtype: Name
    shape: Annotated[list[Annotated[int, Meta(ge=0, le=1 << 48)]], Meta(max_length=64)]
    size: Size
    chunk: ChunkSize
    algo: HashAlgo = "xxh3_128"
    hashes: Annotated[list[ChunkHash], Meta(max_length=1 << 20)]
    frames: Annotated[list[Annotated[int, Meta(ge=-1, lt=4096)]], Meta(max_length=1 << 20)]


# ---------------------------------------------------------------- replies (gpud -> client; ``Reply``)


class Result(_Req, tag="result", kw_only=True):
    reply = True
    value: Any = None
    output: str = ""  # device printf text produced since the last reply
    ckpt: dict[str, Any] | None = None  # NOTE [checkpoints]: the checkpoint the standby holds now (the log's trim)


class Error(_Req, tag="error", kw_only=True):
    reply = True
    code: int
    name: Name
    message: Annotated[str, Meta(max_length=65536)]
    output: str = ""


class Moved(_Req, tag="moved", kw_only=True):
    """NOTE [resume] (shim/client.py): the session lives at ``endpoint`` now; say hello there with ``resume`` and
    re-send the messages after the first ``executed``."""

    reply = True
    endpoint: Name
    server_key: Name = ""
    resume: Name
    executed: Annotated[int, Meta(ge=0)]
    node: Name = ""


class SyncDue(_Req, tag="sync_due", kw_only=True):
    """gpud waits for the session's next call (a move or a checkpoint, NOTE [migration]): an idle client sends one."""

    reply = True


# (the unions are built from the classes: see the end of the module)


class Batch(_Req, tag="batch", kw_only=True):
    passive = True
    calls: Annotated[list[QueuedCall], Meta(max_length=65536)]


def _subclasses(cls: type[_Req]) -> list[type[_Req]]:
    out: list[type[_Req]] = []
    for sub in cls.__subclasses__():
        out.append(sub)
        out.extend(_subclasses(sub))
    return out


for _cls in _subclasses(_Req):
    _cls.kind = str(_cls.__struct_config__.tag)
    if hasattr(_cls, "extents") and _cls.writes is _Req.writes:
        _cls.writes = _written_extents  # type: ignore[method-assign]

MESSAGES: dict[str, type[_Req]] = {c.kind: c for c in _subclasses(_Req)}  # every message, by kind
# the unions, from the classes (type checkers see ``Any``)
Message: Any = Union[tuple(c for c in MESSAGES.values() if not c.reply)]  # noqa: UP007 - requests, gpud decodes
Reply: Any = Union[tuple(c for c in MESSAGES.values() if c.reply)]  # noqa: UP007 - what the client decodes
QueuedCall: Any = Union[tuple(c for c in MESSAGES.values() if c.queued)]  # noqa: UP007 - members of a Batch
