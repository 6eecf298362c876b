"""Message models: every message on the wire is one member of the ``Message`` union.

Requests carry ``rid`` (request id, chosen by the client); replies echo it. Calls that return
nothing (copies to the device, launches, frees, stream/event creation...) are not sent one by one:
the client queues them and sends a ``Batch``; their errors come back with the next synchronous
reply, as CUDA reports asynchronous errors at the next synchronisation.

Bulk data never sits in the msgpack body: a field ``frame`` names the index of a separate
zero-copy frame (see ``proto.codec``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

U64 = Annotated[int, Field(ge=0, le=(1 << 64) - 1)]
Size = Annotated[int, Field(ge=0, le=1 << 48)]
Handle = Annotated[int, Field(ge=0, le=(1 << 63) - 1)]
FrameIndex = Annotated[int, Field(ge=0, lt=4096)]
Dim = Annotated[int, Field(ge=1, le=(1 << 31) - 1)]
Dim3 = Annotated[list[Dim], Field(min_length=3, max_length=3)]
Name = Annotated[str, Field(max_length=4096)]

# Stream handle 0 is the legacy default stream; CU_STREAM_PER_THREAD (2) maps to a per-session
# per-thread default stream. Client-created streams use ids >= 16.
DEFAULT_STREAM = 0
PER_THREAD_STREAM = 2


class _Msg(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class _Req(_Msg):
    rid: Handle = 0


# ---------------------------------------------------------------- session


class Hello(_Req):
    kind: Literal["hello"] = "hello"
    protocol: int
    client_version: Name
    tenant: Name = "default"
    token: Name = ""
    pid: int = 0
    host_id: Name = ""
    program: Name = ""
    capabilities: list[Name] = Field(default_factory=list, max_length=64)
    reservation: Name = ""  # NOTE [pool client] (woolyhv/pool/client.py): the pool reservation this session claims
    resume: Name = ""  # NOTE [migration] (gpud/migrate.py): take over the session that moved here under this token


class DeviceInfo(_Msg):
    ordinal: int
    backend: Literal["cpu", "nvidia", "amd"]
    name: Name
    uuid: Name
    total_mem: Size
    compute_capability: Annotated[list[int], Field(min_length=2, max_length=2)]
    attributes: dict[int, int] = Field(default_factory=dict)
    driver_version: int = 12090
    pci_bus_id: Name = ""


class HelloReply(_Req):
    kind: Literal["hello_reply"] = "hello_reply"
    session: Name
    protocol: int
    server_version: Name
    host_id: Name
    heartbeat_s: float
    capabilities: list[Name] = Field(default_factory=list)
    devices: list[DeviceInfo] = Field(default_factory=list)
    local_proof: Name = ""  # NOTE [proven locality] (gpud/shm.py): the file a same-host client creates
    checkpoint_s: float = 0.0  # NOTE [checkpoints] (gpud/checkpoint.py): the client keeps a replay log when > 0


class ProveLocal(_Req):
    """NOTE [proven locality]: the client created the file named in its hello reply (``local_proof``)."""

    kind: Literal["prove_local"] = "prove_local"


class Bye(_Req):
    kind: Literal["bye"] = "bye"


class Ping(_Req):
    kind: Literal["ping"] = "ping"


class Pong(_Req):
    kind: Literal["pong"] = "pong"


class Sync(_Req):
    """Reports errors of calls queued so far, without waiting for device work."""

    kind: Literal["sync"] = "sync"


class Idle(_Req):
    """A call that does nothing (errors stay pending): an idle client's heartbeat sends it when gpud said
    ``sync_due`` (a move or checkpoint waits for the session's next call, NOTE [migration])."""

    kind: Literal["idle"] = "idle"


class ListSessions(_Req):
    """An admin call: every tenant's sessions. Needs gpud's admin token where one is set (or tenants need tokens)."""

    kind: Literal["list_sessions"] = "list_sessions"
    token: Name = ""


# ---------------------------------------------------------------- migration (NOTE [migration] in gpud/migrate.py)
Pair = Annotated[list[U64], Field(min_length=2, max_length=2)]
Triple = Annotated[list[Any], Field(min_length=3, max_length=3)]


class MoveOut(_Req):
    """An admin call to the source gpud: move ``session`` to the gpud at ``endpoint`` (whose CURVE key is
    ``server_key``) at its next synchronisation point. Replies once the session has moved (or could not)."""

    kind: Literal["move_out"] = "move_out"
    token: Name = ""  # the source's admin token
    session: Name
    endpoint: Name
    server_key: Name = ""
    target_token: Name = ""  # the target's admin token (without a pool order, the target accepts only that)


class MoveIn(_Req):
    """Source gpud to target gpud: a session's state, without its memory (``move_data`` brings that). ``order``
    is the pool's move order (``moves/<source>/<session>`` in etcd, which the target reads to check it) or,
    outside a pool, ``admin_token`` is the target's admin token."""

    kind: Literal["move_in"] = "move_in"
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
    regions: Annotated[list[Pair], Field(max_length=1 << 20)]  # allocations: start, size
    modules: Annotated[list[Triple], Field(max_length=1 << 16)]  # handle, format, bulk frame of the image
    globals: Annotated[list[Triple], Field(max_length=1 << 16)]  # module handle, name, bulk frame of its bytes
    functions: Annotated[list[Triple], Field(max_length=1 << 20)]  # handle, module handle, name
    streams: Annotated[list[Triple], Field(max_length=1 << 16)]  # handle, flags, priority
    events: Annotated[list[Triple], Field(max_length=1 << 20)]  # handle, flags, recorded t_ns (-1: never)
    sticky: Annotated[list[Any], Field(max_length=2)] = Field(default_factory=list)  # code, message
    pending: Annotated[list[Any], Field(max_length=2)] = Field(default_factory=list)
    messages: int = Field(0, ge=0)
    aten: dict[str, Any] | None = None  # the executor's tensor table (gpud/aten_exec.py move_export)
    blobs: Annotated[list[Size], Field(max_length=1 << 20)] = Field(default_factory=list)  # sizes of its storages
    moves: int = Field(0, ge=0, le=1 << 30)  # times the session moved or was restored before
    prep: Name = ""  # the ``move_prep`` whose pre-copied chunks stand where their digests still match
    digests: Annotated[list[Annotated[list[Any], Field(min_length=3, max_length=3)]], Field(max_length=1 << 20)] = (
        Field(default_factory=list)
    )  # per allocation: start, size, xxh3-128 of each PRE_CHUNK (gpud/migrate.py)


class MovePrep(_Req):
    """Source gpud to target gpud, while the session still runs: reserve the session's arena and allocations (as
    they are now) for ``session`` (authorised as ``move_in`` is) and write the ``move_chunk`` bytes that follow
    into place; ``move_in`` then names this prep and keeps what is still current."""

    kind: Literal["move_prep"] = "move_prep"
    order: Name = ""
    source: Name = ""
    admin_token: Name = ""
    session: Name
    tenant: Name
    arena: Pair = Field(default_factory=lambda: [0, 0])  # base, size
    regions: Annotated[list[Pair], Field(max_length=1 << 20)] = Field(default_factory=list)  # as the copy starts


class MoveChunk(_Req):
    """A pre-copied chunk of a moving session's memory, by its xxh3-128 digest (checked by the target)."""

    kind: Literal["move_chunk"] = "move_chunk"
    prep: Name
    addr: U64
    digest: Annotated[bytes, Field(min_length=16, max_length=16)]
    frame: FrameIndex = 0


class MoveHave(_Req):
    """Pre-copy: which of these chunks ([addr, size, xxh3-128]) does the target's dedup store hold? Those it
    holds it copies into place itself; the source sends only the others."""

    kind: Literal["move_have"] = "move_have"
    prep: Name
    chunks: Annotated[list[Annotated[list[Any], Field(min_length=3, max_length=3)]], Field(max_length=64)]


class MoveBlob(_Req):
    """Bytes of one storage of a moving session's tensors: bulk frame ``frame`` goes to ``offset`` of blob ``index``."""

    kind: Literal["move_blob"] = "move_blob"
    move: Name
    index: Annotated[int, Field(ge=0, lt=1 << 20)]
    offset: Size = 0
    frame: FrameIndex = 0


class MoveData(_Req):
    """Bytes of a moving session's memory: bulk frame ``frame`` goes to ``addr``."""

    kind: Literal["move_data"] = "move_data"
    move: Name
    addr: U64
    frame: FrameIndex = 0


class MoveCommit(_Req):
    """Every byte was sent: the target answers with the resume token the client will say hello with."""

    kind: Literal["move_commit"] = "move_commit"
    move: Name
    total: Size = 0  # bytes sent, checked against what arrived


class MoveAbort(_Req):
    kind: Literal["move_abort"] = "move_abort"
    move: Name


# ---------------------------------------------------------------- checkpoints (NOTE [checkpoints] in gpud/checkpoint.py)
Digest = Annotated[bytes, Field(min_length=16, max_length=16)]  # xxh3-128 of a chunk
ChunkList = Annotated[list[Digest], Field(max_length=1 << 22)]


class CkptBegin(_Req):
    """Source gpud to the session's standby: a checkpoint of ``session`` after its ``seq``-th message. ``state``
    is the session as ``move_in`` carries it (module images in bulk); ``regions`` ([start, size, digests]) and
    ``blobs`` ([size, digests]) list the chunks of its memory and tensor storages; the chunks the standby does not
    hold yet follow as ``ckpt_chunk``. ``order`` is the pool's standby order (``standby/<source>/<session>``)."""

    kind: Literal["ckpt_begin"] = "ckpt_begin"
    order: Name = ""
    source: Name = ""
    admin_token: Name = ""
    session: Name
    tenant: Name
    seq: int = Field(ge=0)
    restore_key: Annotated[str, Field(min_length=64, max_length=64, pattern=r"^[0-9a-f]+$")]  # sha256 of the token
    chunk: Annotated[int, Field(ge=4096, le=256 << 20)]
    state: MoveIn
    regions: Annotated[list[Annotated[list[Any], Field(min_length=3, max_length=3)]], Field(max_length=1 << 20)]
    blobs: Annotated[list[Annotated[list[Any], Field(min_length=2, max_length=2)]], Field(max_length=1 << 20)]


class CkptChunk(_Req):
    kind: Literal["ckpt_chunk"] = "ckpt_chunk"
    ckpt: Name
    digest: Digest
    frame: FrameIndex = 0


class CkptCommit(_Req):
    kind: Literal["ckpt_commit"] = "ckpt_commit"
    ckpt: Name


class CkptDrop(_Req):
    """The session ended at its source: its standby forgets it."""

    kind: Literal["ckpt_drop"] = "ckpt_drop"
    session: Name
    source: Name = ""
    order: Name = ""
    admin_token: Name = ""


class Restore(_Req):
    """A client whose node died asks the standby for its session back (``token``: the restore token its source
    gave it with the checkpoint). Replies with a resume token and the messages the checkpoint covers."""

    kind: Literal["restore"] = "restore"
    session: Name
    tenant: Name
    token: Name


# ---------------------------------------------------------------- memory


class MemAlloc(_Req):
    kind: Literal["mem_alloc"] = "mem_alloc"
    size: Size


class MemFree(_Req):
    kind: Literal["mem_free"] = "mem_free"
    addr: U64


class MemGetInfo(_Req):
    kind: Literal["mem_get_info"] = "mem_get_info"


class MemcpyHtoD(_Req):
    kind: Literal["memcpy_htod"] = "memcpy_htod"
    dst: U64
    frame: FrameIndex
    stream: Handle = DEFAULT_STREAM


class MemcpyDtoH(_Req):
    kind: Literal["memcpy_dtoh"] = "memcpy_dtoh"
    src: U64
    size: Size
    stream: Handle = DEFAULT_STREAM


class MemcpyDtoD(_Req):
    kind: Literal["memcpy_dtod"] = "memcpy_dtod"
    dst: U64
    src: U64
    size: Size
    stream: Handle = DEFAULT_STREAM


class Memset(_Req):
    kind: Literal["memset"] = "memset"
    dst: U64
    value: Annotated[int, Field(ge=0, le=0xFFFFFFFF)]
    elem_size: Literal[1, 2, 4]
    count: Size
    stream: Handle = DEFAULT_STREAM


# ---------------------------------------------------------------- vendor libraries (NOTE [vendor libraries])

BlasType = Literal["f16", "bf16", "f32", "f64", "c64", "c128"]
Stride = Annotated[int, Field(ge=0, le=1 << 48)]


class BlasGemm(_Req):
    """C[i] = alpha * op(A[i]) @ op(B[i]) + beta * C[i] for i < batch, column-major, in stream order (cuBLAS gemm
    and its Ex, batched and strided forms). ``alpha``/``beta`` are [real, imaginary]; with ``scalars_on_device``
    they are read at run time from device addresses ``alpha_ptr``/``beta_ptr`` (CUBLAS_POINTER_MODE_DEVICE)."""

    kind: Literal["blas_gemm"] = "blas_gemm"
    trans_a: Literal[0, 1, 2]  # N, T, C
    trans_b: Literal[0, 1, 2]
    m: Size
    n: Size
    k: Size
    a_type: BlasType
    b_type: BlasType
    c_type: BlasType
    compute_type: BlasType
    alpha: Annotated[list[float], Field(min_length=2, max_length=2)] = [1.0, 0.0]
    beta: Annotated[list[float], Field(min_length=2, max_length=2)] = [0.0, 0.0]
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
    batch: Annotated[int, Field(ge=1, le=1 << 24)] = 1
    stream: Handle = DEFAULT_STREAM


# ---------------------------------------------------------------- streams and events


class StreamCreate(_Req):
    kind: Literal["stream_create"] = "stream_create"
    stream: Handle
    flags: int = 0
    priority: int = 0


class StreamDestroy(_Req):
    kind: Literal["stream_destroy"] = "stream_destroy"
    stream: Handle


class StreamSynchronize(_Req):
    kind: Literal["stream_synchronize"] = "stream_synchronize"
    stream: Handle


class StreamQuery(_Req):
    kind: Literal["stream_query"] = "stream_query"
    stream: Handle


class StreamWaitEvent(_Req):
    kind: Literal["stream_wait_event"] = "stream_wait_event"
    stream: Handle
    event: Handle


class EventCreate(_Req):
    kind: Literal["event_create"] = "event_create"
    event: Handle
    flags: int = 0


class EventRecord(_Req):
    kind: Literal["event_record"] = "event_record"
    event: Handle
    stream: Handle = DEFAULT_STREAM


class EventQuery(_Req):
    kind: Literal["event_query"] = "event_query"
    event: Handle


class EventSynchronize(_Req):
    kind: Literal["event_synchronize"] = "event_synchronize"
    event: Handle


class EventElapsed(_Req):
    kind: Literal["event_elapsed"] = "event_elapsed"
    start: Handle
    end: Handle


class EventDestroy(_Req):
    kind: Literal["event_destroy"] = "event_destroy"
    event: Handle


class CtxSynchronize(_Req):
    kind: Literal["ctx_synchronize"] = "ctx_synchronize"


# ---------------------------------------------------------------- modules and launches


class ModuleLoad(_Req):
    kind: Literal["module_load"] = "module_load"
    module: Handle
    frame: FrameIndex
    format: Literal["ptx", "cubin", "fatbin"] = "ptx"


class ModuleUnload(_Req):
    kind: Literal["module_unload"] = "module_unload"
    module: Handle


class ModuleGetFunction(_Req):
    kind: Literal["module_get_function"] = "module_get_function"
    module: Handle
    name: Name
    function: Handle


class ModuleGetGlobal(_Req):
    kind: Literal["module_get_global"] = "module_get_global"
    module: Handle
    name: Name


class Launch(_Req):
    kind: Literal["launch"] = "launch"
    function: Handle
    grid: Dim3
    block: Dim3
    shared_mem: Annotated[int, Field(ge=0, le=1 << 30)] = 0
    stream: Handle = DEFAULT_STREAM
    params: Annotated[bytes, Field(max_length=1 << 16)] = b""
    cooperative: bool = (
        False  # every block resident at once; grid sync allowed (NOTE [grid sync], jit/emit/cpu_grid.py)
    )


# ---------------------------------------------------------------- same-host staging (shared memory)
# NOTE [shm staging]: when client and gpud share a host, bulk copies go through a shared-memory
# ring that gpud creates per session (ShmOpen). The client copies into a slot and queues ShmHtoD;
# gpud copies the slot to the device in stream order and then writes the op's ``seq`` into the
# slot's flag word (high bit set on error), which is how the client knows the slot is free.
# ShmDtoH runs the other way. Two memcpys, pipelined across slots, instead of four socket copies.


class ShmOpen(_Req):
    kind: Literal["shm_open"] = "shm_open"


class ShmHtoD(_Req):
    kind: Literal["shm_htod"] = "shm_htod"
    dst: U64
    slot: Annotated[int, Field(ge=0, lt=1024)]
    size: Size
    seq: Annotated[int, Field(ge=1, lt=1 << 62)]
    stream: Handle = DEFAULT_STREAM


class ShmDtoH(_Req):
    kind: Literal["shm_dtoh"] = "shm_dtoh"
    src: U64
    slot: Annotated[int, Field(ge=0, lt=1024)]
    size: Size
    seq: Annotated[int, Field(ge=1, lt=1 << 62)]
    stream: Handle = DEFAULT_STREAM


# ---------------------------------------------------------------- mapped host memory (same host, CPU backend)
# NOTE [host map]: pinned (cuMemHostAlloc) and managed (cuMemAllocManaged) memory must be reachable by
# kernels. When client and gpud share a host, the client allocates it as a file in /dev/shm that both
# map (MAP_SHARED: same pages); gpud registers its mapping as a region of the session, so kernels and
# copies may use it. ``hint``: map at this address (managed memory needs one address on both sides);
# with ``exact`` gpud fails rather than map elsewhere. Returns gpud's address.


class HostMap(_Req):
    kind: Literal["host_map"] = "host_map"
    path: Annotated[str, Field(max_length=255)]
    size: Size
    hint: U64 = 0
    exact: bool = False


class HostUnmap(_Req):
    kind: Literal["host_unmap"] = "host_unmap"
    addr: U64


# NOTE [ipc]: CUDA IPC between processes of one tenant. ``ipc_get`` turns an allocation of the session
# into an opaque 64-byte handle (a capability: random, unguessable); ``ipc_open`` in another session
# of the same tenant maps that allocation into it and returns its address (gpud's address space is
# shared, so it is the exporter's address); ``ipc_close`` unmaps it. Returns: handle bytes / [addr,
# size] / nothing.
IpcHandle = Annotated[bytes, Field(min_length=64, max_length=64)]


class IpcGet(_Req):
    kind: Literal["ipc_get"] = "ipc_get"
    addr: U64


class IpcOpen(_Req):
    kind: Literal["ipc_open"] = "ipc_open"
    handle: IpcHandle


class IpcClose(_Req):
    kind: Literal["ipc_close"] = "ipc_close"
    addr: U64


# ---------------------------------------------------------------- ATen (the PyTorch face)
# NOTE [aten wire]: one op is a 4-element list ``[name, args, kwargs, outs]``: ``name`` is an ATen
# overload ("aten.add.Tensor") or a wooly pseudo-op ("wooly.free", "wooly.upload", "wooly.seed"),
# ``args``/``kwargs`` are msgpack values where tensors, dtypes, devices ... are msgpack ext types
# (encoded and decoded by proto/aten.py, NOTE [aten values]), and ``outs`` are the handles, chosen by the client, of
# the op's tensor outputs (0 = "an input mutated in place, do not store"). gpud validates each
# op when it runs it (names against the aten namespace, handles against the session's table).
AtenOpWire = Annotated[list[Any], Field(min_length=4, max_length=4)]


class AtenBatch(_Req):
    """Ops run in order on gpud; returns nothing (errors are reported at the next sync)."""

    kind: Literal["aten_batch"] = "aten_batch"
    ops: Annotated[list[AtenOpWire], Field(max_length=65536)]
    frame: FrameIndex = 0  # base index of this batch's bulk frames (uploads)


class AtenCall(_Req):
    """One op whose reply the client waits for (item(), cpu(), data-dependent shapes, stats)."""

    kind: Literal["aten_call"] = "aten_call"
    op: AtenOpWire
    frame: FrameIndex = 0


# ---------------------------------------------------------------- dedup (gpud/hypervisor/dedup.py)
# NOTE [dedup protocol] in gpud/hypervisor/dedup.py: an upload of ``size`` bytes at ``dst`` is cut
# into ``chunk``-byte pieces, each named by its hash. DedupUpload (a call) maps the pieces gpud
# holds and answers the indexes it lacks; the client copies those the ordinary way and queues
# DedupPublish so that gpud, after hashing the bytes itself, stores them for the next tenant.
ChunkHash = Annotated[bytes, Field(min_length=16, max_length=32)]
ChunkSize = Annotated[int, Field(ge=4096, le=1 << 28)]


class DedupUpload(_Req):
    kind: Literal["dedup_upload"] = "dedup_upload"
    dst: U64
    size: Size
    chunk: ChunkSize
    algo: Literal["xxh3_128", "sha256"] = "xxh3_128"
    hashes: Annotated[list[ChunkHash], Field(max_length=1 << 20)]
    stream: Handle = DEFAULT_STREAM


class DedupPublish(_Req):
    kind: Literal["dedup_publish"] = "dedup_publish"
    dst: U64
    size: Size
    chunk: ChunkSize
    algo: Literal["xxh3_128", "sha256"] = "xxh3_128"
    indexes: Annotated[list[Annotated[int, Field(ge=0, lt=1 << 20)]], Field(max_length=1 << 20)]
    hashes: Annotated[list[ChunkHash], Field(max_length=1 << 20)]
    stream: Handle = DEFAULT_STREAM


class DedupQuery(_Req):
    """Which of these chunks does gpud lack? The ones it holds are pinned for this session until a
    DedupTensor uses them (or the session ends)."""

    kind: Literal["dedup_query"] = "dedup_query"
    chunk: ChunkSize
    size: Size
    algo: Literal["xxh3_128", "sha256"] = "xxh3_128"
    hashes: Annotated[list[ChunkHash], Field(max_length=1 << 20)]


class DedupTensor(_Req):
    """Make tensor ``handle`` (PyTorch face) from chunks: pinned ones (frame -1) and sent ones."""

    kind: Literal["dedup_tensor"] = "dedup_tensor"
    handle: Handle
    dtype: Name
    shape: Annotated[list[Annotated[int, Field(ge=0, le=1 << 48)]], Field(max_length=64)]
    size: Size
    chunk: ChunkSize
    algo: Literal["xxh3_128", "sha256"] = "xxh3_128"
    hashes: Annotated[list[ChunkHash], Field(max_length=1 << 20)]
    frames: Annotated[list[Annotated[int, Field(ge=-1, lt=4096)]], Field(max_length=1 << 20)]


# ---------------------------------------------------------------- replies


class Result(_Req):
    kind: Literal["result"] = "result"
    value: Any = None
    output: str = ""  # device printf text produced since the last reply


class Error(_Req):
    kind: Literal["error"] = "error"
    code: int
    name: Name
    message: Annotated[str, Field(max_length=65536)]
    output: str = ""


QueuedCall = Annotated[
    MemFree
    | MemcpyHtoD
    | MemcpyDtoD
    | Memset
    | BlasGemm
    | StreamCreate
    | StreamDestroy
    | StreamWaitEvent
    | EventCreate
    | EventRecord
    | EventDestroy
    | ModuleUnload
    | Launch
    | ShmHtoD
    | ShmDtoH
    | AtenBatch
    | DedupPublish
    | DedupTensor
    | HostUnmap,
    Field(discriminator="kind"),
]


class Batch(_Req):
    kind: Literal["batch"] = "batch"
    calls: Annotated[list[QueuedCall], Field(max_length=65536)]


Message = Annotated[
    Hello
    | HelloReply
    | ProveLocal
    | Bye
    | Ping
    | Pong
    | Sync
    | Idle
    | ListSessions
    | MoveOut
    | MoveIn
    | MovePrep
    | MoveChunk
    | MoveHave
    | MoveBlob
    | MoveData
    | MoveCommit
    | MoveAbort
    | CkptBegin
    | CkptChunk
    | CkptCommit
    | CkptDrop
    | Restore
    | MemAlloc
    | MemFree
    | MemGetInfo
    | MemcpyHtoD
    | MemcpyDtoH
    | MemcpyDtoD
    | Memset
    | BlasGemm
    | StreamCreate
    | StreamDestroy
    | StreamSynchronize
    | StreamQuery
    | StreamWaitEvent
    | EventCreate
    | EventRecord
    | EventQuery
    | EventSynchronize
    | EventElapsed
    | EventDestroy
    | CtxSynchronize
    | ModuleLoad
    | ModuleUnload
    | ModuleGetFunction
    | ModuleGetGlobal
    | Launch
    | AtenBatch
    | AtenCall
    | DedupUpload
    | DedupPublish
    | DedupQuery
    | DedupTensor
    | Batch
    | ShmOpen
    | ShmHtoD
    | ShmDtoH
    | HostMap
    | HostUnmap
    | IpcGet
    | IpcOpen
    | IpcClose
    | Result
    | Error,
    Field(discriminator="kind"),
]

MESSAGE_ADAPTER: TypeAdapter[Any] = TypeAdapter(Message)
