"""Client side of content-addressed uploads (NOTE [dedup protocol] in gpud/hypervisor/dedup.py).

A large host-to-device copy is cut into the chunk size gpud advertises (capability
``dedup:<algo>:<chunk>``) and each chunk is hashed here (xxh3-128: ~10 GB/s, a 200 MB model costs
~20 ms). gpud maps the chunks it already holds, from any tenant, and names the ones it lacks; only
those travel, through the ordinary copy path. A copy of content gpud has seen costs one round trip
and no bulk transfer.
"""

from __future__ import annotations

import hashlib
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import xxhash

from proto import messages as m
from proto import settings as config
from proto.errors import CudaError

if TYPE_CHECKING:
    from shim.driver import Driver

MIN_DEDUP_BYTES = 1 << 20  # below this a plain copy is cheaper than the extra round trip


def digest(algo: str, data: Any) -> bytes:
    if algo == "sha256":
        return hashlib.sha256(data).digest()
    return xxhash.xxh3_128_digest(data)


@dataclass
class DedupStats:
    uploads: int = 0
    bytes_total: int = 0  # bytes the program asked to copy through the dedup path
    bytes_sent: int = 0  # bytes that actually travelled
    chunks_hit: int = 0
    chunks_missed: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def bytes_skipped(self) -> int:
        return self.bytes_total - self.bytes_sent


class DedupUploader:
    def __init__(self, algo: str, chunk: int) -> None:
        self.algo = cast(m.HashAlgo, algo)  # gpud named it (its capabilities); it checks what it is sent
        self.chunk = chunk
        self.stats = DedupStats()

    @classmethod
    def from_capabilities(cls, caps: list[str]) -> DedupUploader | None:
        for cap in caps:
            if cap.startswith("dedup:"):
                try:
                    _, algo, chunk = cap.split(":")
                    return cls(algo, int(chunk))
                except ValueError:
                    return None
        return None

    def upload(self, driver: Driver, dst: int, view: memoryview, stream: int, plain: Any) -> None:
        """Copy ``view`` to ``dst``; ``plain(dst, view, stream)`` is the ordinary copy for missing chunks."""
        n = view.nbytes
        c = self.chunk
        hashes = [digest(self.algo, view[o : o + c]) for o in range(0, n, c)]
        missing, _ = driver.conn.call(
            m.DedupUpload(dst=int(dst), size=n, chunk=c, algo=self.algo, hashes=hashes, stream=int(stream))
        )
        if not isinstance(missing, list) or any(not isinstance(i, int) or not 0 <= i < len(hashes) for i in missing):
            raise CudaError(999, "gpud answered a dedup upload with something that is not a list of chunk indexes")
        st = self.stats
        st.uploads += 1
        st.bytes_total += n
        st.chunks_hit += len(hashes) - len(missing)
        st.chunks_missed += len(missing)
        from shim import progress

        progress.advance(n - sum(min(c, n - i * c) for i in missing))  # what gpud holds already is done
        if not missing:
            return
        # Send the missing chunks as runs of consecutive indexes (fewer, larger copies).
        run_start = prev = missing[0]
        for i in [*missing[1:], None]:
            if i is not None and i == prev + 1:
                prev = i
                continue
            a, b = run_start * c, min(n, (prev + 1) * c)
            plain(dst + a, view[a:b], stream)
            st.bytes_sent += b - a
            if i is not None:
                run_start = prev = i
        driver.conn.post(
            m.DedupPublish(
                dst=int(dst),
                size=n,
                chunk=c,
                algo=self.algo,
                indexes=list(missing),
                hashes=[hashes[i] for i in missing],
                stream=int(stream),
            )
        )


_UPLOADERS: weakref.WeakKeyDictionary[Any, DedupUploader | None] = weakref.WeakKeyDictionary()


def uploader_for(conn: Any) -> DedupUploader | None:
    """The connection's uploader, or None when gpud does not deduplicate (or WOOLY_DEDUP=0)."""
    try:
        return _UPLOADERS[conn]
    except KeyError:
        pass

    up = None
    if config.client().dedup:
        up = DedupUploader.from_capabilities(list(getattr(conn, "server_capabilities", [])))
    _UPLOADERS[conn] = up
    return up


def upload_tensor(conn: Any, up: DedupUploader, handle: int, data: Any, dtype: str, shape: list[int]) -> None:
    """The torch face's upload of a large host tensor (NOTE [tensor dedup] in gpud/hypervisor/torch_dedup.py).

    The caller has flushed its queued ops, so the tensor is built in order with them."""
    view = memoryview(data).cast("B")
    n, c = view.nbytes, up.chunk
    hashes = [digest(up.algo, view[o : o + c]) for o in range(0, n, c)]
    missing, _ = conn.call(m.DedupQuery(chunk=c, size=n, algo=up.algo, hashes=hashes))
    if not isinstance(missing, list) or any(not isinstance(i, int) or not 0 <= i < len(hashes) for i in missing):
        raise CudaError(999, "gpud answered a dedup query with something that is not a list of chunk indexes")
    frames = [-1] * len(hashes)
    bulk = []
    for k, i in enumerate(missing):
        frames[i] = k
        bulk.append(view[i * c : min(n, (i + 1) * c)])
    st = up.stats
    st.uploads += 1
    st.bytes_total += n
    st.bytes_sent += sum(b.nbytes for b in bulk)
    st.chunks_hit += len(hashes) - len(missing)
    st.chunks_missed += len(missing)
    body = m.DedupTensor(
        handle=int(handle),
        dtype=dtype,
        shape=[int(x) for x in shape],
        size=n,
        chunk=c,
        algo=up.algo,
        hashes=hashes,
        frames=frames,
    )
    conn.call(body, bulk)  # answered at once: the tensor is built in stream order on gpud
