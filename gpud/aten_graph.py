"""CUDA graphs of the PyTorch face: an op list captured once on the client, replayed by gpud on one message.

NOTE [aten graphs]: ``torch.cuda.graph`` on the client records the ops of the capture instead of
sending them (capture runs nothing, as on a GPU) and defines the graph on gpud with one
``wooly.graph_define`` pseudo-op; ``CUDAGraph.replay()`` is one ``wooly.graph_replay`` in the op stream.
Replay runs the recorded ops in order against the session's tensor table, so the graph reads
whatever its static inputs hold now (``static_x.copy_(batch)`` before ``replay()``). Its outputs keep
their storage across replays, as a real graph's memory pool does: the first replay binds each
output handle the capture created; later replays copy an op's fresh result into the tensor bound
there (unless the op produced that very view: a view of a static tensor), so a view the script took
of a static output sees every replay. Handles the capture itself freed are temporaries (created and
dropped within each replay). A static output the script frees stays on gpud until its graph is
dropped, as memory in a real graph's pool does: another graph may read it (make_graphed_callables'
backward graph reads tensors that its forward graph saved for autograd, which the script has freed).
On an NVIDIA node the same list is what a real CUDA graph would capture; this file replays it on
the node's torch op by op (the client's saving — one message instead of one per op — is the same).
"""

from __future__ import annotations

from typing import Any

import torch

from gpud.errors import CudaError, codes
from proto import aten as W

_DEC = W.decoder()
MAX_GRAPHS = 1024  # per session
MAX_GRAPH_OPS = 1_000_000  # per session, over all its graphs


class Graph:
    __slots__ = ("ops", "outputs")

    def __init__(self, ops: list[list[Any]], outputs: set[int]) -> None:
        self.ops = ops
        self.outputs = outputs  # handles the capture created and did not free: static outputs


class Graphs:
    """The graphs of one session's executor (only its stream's worker calls in: no lock)."""

    def __init__(self, executor: Any) -> None:
        self.ex = executor
        self.graphs: dict[int, Graph] = {}
        self.owner: dict[int, Graph] = {}  # static output handle -> its graph
        self.dropped: set[int] = set()  # static outputs the script freed: kept until their graph is dropped
        self.ops = 0

    def define(self, args: list[Any]) -> None:
        if len(args) != 2 or not isinstance(args[0], int) or isinstance(args[0], bool) or not isinstance(args[1], list):
            raise CudaError(codes.INVALID_VALUE, "wooly.graph_define takes [graph id, ops]")
        gid, ops = args
        if gid in self.graphs:
            raise CudaError(codes.INVALID_VALUE, f"graph {gid} is already defined")
        if len(self.graphs) >= MAX_GRAPHS:
            raise CudaError(codes.OUT_OF_MEMORY, f"a session holds at most {MAX_GRAPHS} CUDA graphs")
        if self.ops + len(ops) > MAX_GRAPH_OPS:
            raise CudaError(codes.OUT_OF_MEMORY, f"a session's CUDA graphs hold at most {MAX_GRAPH_OPS} ops in all")
        created: set[int] = set()
        freed: set[int] = set()
        for op in ops:
            if (
                not isinstance(op, list)
                or len(op) != 4
                or not isinstance(op[1], list)
                or not isinstance(op[2], dict)
                or not isinstance(op[3], list)
            ):
                raise CudaError(codes.INVALID_VALUE, "malformed op in a CUDA graph")
            name, a, _, outs = op
            if name == W.OP_FREE:
                freed.update(h for h in a if isinstance(h, int))
                continue
            if not isinstance(name, str) or name.startswith("wooly."):
                raise CudaError(codes.NOT_SUPPORTED, f"{str(name)[:80]!r} cannot be part of a CUDA graph")
            self.ex.resolve(name)  # an op gpud cannot run fails now, at capture_end, not at every replay
            for h in outs:
                if not isinstance(h, int) or isinstance(h, bool) or h < 0:
                    raise CudaError(codes.INVALID_VALUE, f"invalid output handle in a CUDA graph: {str(h)[:40]}")
                if h:
                    if h in self.ex.tensors or h in created or h in self.owner:
                        raise CudaError(codes.INVALID_HANDLE, f"tensor handle {h} is already in use")
                    created.add(h)
        g = Graph(ops, created - freed)
        self.graphs[gid] = g
        self.ops += len(ops)
        for h in g.outputs:
            self.owner[h] = g
        self._bind(g)

    def _bind(self, g: Graph) -> None:
        """Give the graph's static outputs their memory now, as capture does on a GPU: the script may view,
        copy into or read them before the first replay. Their shapes and aliasing come from running the ops
        on meta tensors; an op without a meta kernel stops this early, and the first replay binds the rest."""
        run = _MetaRun(self.ex)
        for name, a, k, outs in g.ops:
            if name == W.OP_FREE:
                continue
            try:
                fn = self.ex.resolve(name)[0]
                result = fn(*_DEC.decode(a, run), **_DEC.decode(k, run))
                produced = self.ex.produced(name, result, outs)
            except Exception:  # noqa: BLE001 - no meta kernel, data-dependent shape, an input not live yet
                break
            for h, m in zip(outs, produced, strict=True):
                if h:
                    run.meta[h] = m
        ex = self.ex
        for h in sorted(g.outputs):  # handles are made in program order: a base before its views
            m = run.meta.get(h)
            if m is None or m.device.type != "meta":
                continue
            ms = m.untyped_storage()
            real = run.real.get(ms._cdata)
            if real is None:  # zeroed, never another tenant's old bytes
                real = run.real[ms._cdata] = torch.zeros(
                    ms.nbytes(), dtype=torch.uint8, device=ex.device
                ).untyped_storage()
            ex.store(
                h, torch.empty(0, dtype=m.dtype, device=ex.device).set_(real, m.storage_offset(), m.shape, m.stride())
            )

    def drop(self, args: list[Any]) -> None:
        g = self.graphs.pop(args[0], None) if args else None
        if g is None:
            return  # dropping twice (reset() then garbage collection) is harmless
        self.ops -= len(g.ops)
        for h in g.outputs:
            self.owner.pop(h, None)
            if h in self.dropped:
                self.dropped.discard(h)
                self.ex.free(h)

    def keep(self, h: int) -> bool:
        """The script frees handle ``h``: a static output stays (see NOTE [aten graphs]); True if kept."""
        if h in self.owner:
            self.dropped.add(h)
            return True
        return False

    def clear(self) -> None:
        self.graphs.clear()
        self.owner.clear()
        self.dropped.clear()
        self.ops = 0

    def replay(self, args: list[Any]) -> None:
        g = self.graphs.get(args[0]) if args else None
        if g is None:
            raise CudaError(codes.INVALID_VALUE, f"CUDA graph {str(args[:1])[:40]} is not defined in this session")
        ex = self.ex
        tensors = ex.tensors
        for name, a, k, outs in g.ops:
            if name == W.OP_FREE:
                for h in a:
                    ex.free(h)
                continue
            for h, t in zip(outs, ex.produced(name, ex.execute(name, a, k), outs), strict=True):
                if not h:
                    continue
                old = tensors.get(h)
                if old is None:
                    ex.store(h, t)
                elif not _same_view(old, t):
                    old.copy_(t)


class _MetaRun:
    """A decoding session whose tensors are meta copies of the live ones, sharing storage as they do."""

    def __init__(self, ex: Any) -> None:
        self.ex = ex
        self.device = torch.device("meta")
        self.gen = None
        self.meta: dict[int, torch.Tensor] = {}
        self.by_ptr: dict[int, torch.UntypedStorage] = {}  # a live storage's data_ptr -> its meta stand-in
        self.real: dict[int, torch.UntypedStorage] = {}  # a meta storage's _cdata -> the live storage it stands for

    def get(self, h: int) -> torch.Tensor:
        m = self.meta.get(h)
        if m is None:
            t = self.ex.get(h)
            st = t.untyped_storage()
            ms = self.by_ptr.get(st.data_ptr())
            if ms is None:
                ms = torch.UntypedStorage(st.nbytes(), device="meta")
                self.by_ptr[st.data_ptr() or -h] = ms
                self.real[ms._cdata] = st
            m = self.meta[h] = torch.empty(0, dtype=t.dtype, device="meta").set_(
                ms, t.storage_offset(), t.shape, t.stride()
            )
        return m

    def from_frame(self, frame: Any, dtype: Any, shape: list[int], device: Any) -> Any:
        raise CudaError(codes.NOT_SUPPORTED, "host data inside a CUDA graph")


def _same_view(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a is b or (
        a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride() and a.dtype == b.dtype
    )
