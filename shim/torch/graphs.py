"""``torch.cuda.CUDAGraph``: capture records the op stream once, ``replay()`` is one op for gpud.

NOTE [aten graphs] in gpud/aten_graph.py has the semantics. Here: while a capture is under way the
process's op stream records every op (from any thread: autograd's backward runs on its own, so a
capture is process-wide, as ``capture_error_mode="global"``) instead of sending it, and nothing
runs, as on a GPU. What a GPU forbids during capture is refused the same way: anything that waits
for a result (``item()``, ``cpu()``, synchronize, data-dependent shapes) and copies from host
memory. ``capture_end`` sends the list to gpud; ``replay`` queues one ``wooly.graph_replay``.
PyTorch's own ``torch.cuda.graph`` context and ``make_graphed_callables`` run unchanged on top of
this class.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch

from proto import aten as W
from shim.torch import stream as S

_ids = itertools.count(1)
_pools = itertools.count(1)

CAPTURE_REFUSED = "CUDA error: operation not permitted when stream is capturing"


class Capture:
    """The ops recorded by one capture, and the handles they create."""

    __slots__ = ("ops", "created", "failed")

    def __init__(self) -> None:
        self.ops: list[list[Any]] = []
        self.created: set[int] = set()
        self.failed = ""

    def record(self, op: list[Any]) -> None:
        self.ops.append(op)
        self.created.update(h for h in op[3] if h)

    def refuse(self, what: str) -> RuntimeError:
        self.failed = self.failed or what
        return RuntimeError(f"{CAPTURE_REFUSED} (wooly: {what} inside a CUDA graph capture)")


class CUDAGraph:
    """A captured op list on gpud (the interface of ``torch.cuda.CUDAGraph``)."""

    def __init__(self, keep_graph: bool = False) -> None:
        self._id = 0
        self._pool: tuple[int, int] = (0, next(_pools))
        self._stream: S.OpStream | None = None
        self._ops = 0

    def capture_begin(
        self, pool: Any = None, capture_error_mode: str = "global", check_input_liveness: bool = False
    ) -> None:
        if capture_error_mode not in ("global", "thread_local", "relaxed"):
            raise RuntimeError(
                f"Unknown capture error mode. Expected `global`, `thread_local`, or `relaxed`, got "
                f"{capture_error_mode!r}"
            )
        if self._id:
            raise RuntimeError(
                "This CUDAGraph instance already owns a captured graph. To capture a new graph, create a new instance."
            )
        if pool is not None:
            self._pool = tuple(pool) if isinstance(pool, tuple) else (0, int(pool))
        st = S.stream(S.current_device())  # the current device's stream is captured (others run as they come)
        st.begin_capture(Capture())
        self._stream = st

    def capture_end(self) -> None:
        st = self._stream
        if st is None or st.capture is None:
            raise RuntimeError("CUDA error: capture_end called without a capture under way (call capture_begin first)")
        cap = st.end_capture()
        if cap.failed:
            raise RuntimeError(
                f"CUDA error: operation failed due to a previous error during capture (wooly: {cap.failed})"
            )
        self._id = next(_ids)
        self._ops = len(cap.ops)
        st.push([W.OP_GRAPH_DEFINE, [self._id, cap.ops], {}, []])

    def replay(self) -> None:
        if not self._id or self._stream is None:
            raise RuntimeError("CUDA error: replay called on a CUDAGraph with no captured graph (capture it first)")
        self._stream.push([W.OP_GRAPH_REPLAY, [self._id], {}, []])

    def reset(self) -> None:
        if self._id and self._stream is not None and not self._stream.closed:
            self._stream.push([W.OP_GRAPH_DROP, [self._id], {}, []])
        self._id = 0

    def instantiate(self) -> None:
        if not self._id:
            raise RuntimeError("CUDA error: instantiate called on a CUDAGraph with no captured graph")

    def pool(self) -> tuple[int, int]:
        return self._pool

    def enable_debug_mode(self) -> None:
        return None

    def debug_dump(self, debug_path: str) -> None:
        with open(debug_path, "w") as f:
            f.write(f"wooly CUDA graph {self._id}: {self._ops} ops replayed by gpud\n")

    def raw_cuda_graph(self) -> int:
        raise RuntimeError(
            "CUDA error: CUDA_ERROR_NOT_SUPPORTED: raw_cuda_graph (a wooly graph lives on gpud, "
            "there is no cudaGraph_t in this process)"
        )

    raw_cuda_graph_exec = raw_cuda_graph

    def __del__(self) -> None:
        try:
            self.reset()
        except Exception:  # noqa: BLE001 - never raise from garbage collection
            pass


def graph_pool_handle() -> tuple[int, int]:
    return (0, next(_pools))


def is_current_stream_capturing() -> bool:
    d = S.current_device()
    st = S.current() if d == 0 else S._streams.get(d)
    return st is not None and st.capture is not None


def patch() -> None:
    import torch.cuda.graphs as G

    for mod in (torch.cuda, G):
        mod.CUDAGraph = CUDAGraph  # type: ignore[attr-defined]
        mod.graph_pool_handle = graph_pool_handle  # type: ignore[attr-defined]
        mod.is_current_stream_capturing = is_current_stream_capturing  # type: ignore[attr-defined]
    if not hasattr(torch._C, "_host_emptyCache"):  # torch.cuda.graph's __enter__ calls it (pinned host cache)
        torch._C._host_emptyCache = lambda: None
