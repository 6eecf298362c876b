"""Stream capture and graph memory: the part of CUDA graphs every stream-ordered call meets.

The calls that queue work (cu_launch, cu_memory, cu_stream, cu_mempool, the vendor libraries) ask ``record``
first: while their stream captures, their work becomes a node of the capture's graph instead of running
(NOTE [graphs in the native face] in cu_graph.py, which holds the graph API itself).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from proto import errors as codes
from proto.errors import CudaError
from shim.native.state import STATE

# CUgraphNodeType
KERNEL, MEMCPY, MEMSET, HOST, GRAPH, EMPTY, WAIT_EVENT, EVENT_RECORD = range(8)
MEM_ALLOC, MEM_FREE = 10, 11


class GraphMemory:
    """Allocations made for graph memory nodes: freed when no graph or executable holds them any more."""

    def __init__(self) -> None:
        self.addrs: list[int] = []
        self.holders = 0

    def alloc(self, size: int) -> int:
        addr = STATE.driver().mem_alloc(size)
        self.addrs.append(addr)
        _graph_memory[addr] = self
        _graph_bytes[addr] = size
        footprint[0] += size
        footprint[1] = max(footprint[1], footprint[0])
        return addr

    def hold(self) -> GraphMemory:
        self.holders += 1
        return self

    def release(self) -> None:
        self.holders -= 1
        if self.holders <= 0:
            for addr in self.addrs:
                _graph_memory.pop(addr, None)
                footprint[0] -= _graph_bytes.pop(addr, 0)
                STATE.driver_at(addr).mem_free(addr)
            self.addrs.clear()


_graph_memory: dict[int, GraphMemory] = {}  # every live graph allocation -> the memory that holds it
_graph_bytes: dict[int, int] = {}
footprint = [0, 0]  # graph memory in use now, and its high-water mark (one device per session)


def is_graph_memory(ptr: int) -> bool:
    """A free of graph memory outside its graph (cuMemFreeAsync after a launch, a free node of another graph) ends
    nothing: the allocation stays its graph's until the graph goes (NOTE [graphs in the native face])."""
    return int(ptr) in _graph_memory


@dataclass(eq=False)
class Node:
    kind: int
    params: Any
    deps: list[Node] = field(default_factory=list)
    issue_fn: Callable[[Node, int], None] | None = None
    view: Any = None  # a kernel node's parameters as cuGraphKernelNodeGetParams points at them

    def issue(self, stream: int) -> None:
        """Queue this node's work on ``stream`` (NOTE [graphs in the native face])."""
        if self.issue_fn is not None:
            self.issue_fn(self, stream)


@dataclass(eq=False)
class Graph:
    nodes: list[Node] = field(default_factory=list)
    memory: GraphMemory = field(default_factory=lambda: GraphMemory().hold())

    def order(self) -> list[Node]:
        """The nodes in a topological order (creation order breaks ties: the order a program added them in)."""
        placed: set[int] = set()
        out: list[Node] = []
        pending = list(self.nodes)
        while pending:
            rest = [n for n in pending if not all(id(d) in placed for d in n.deps)]
            ready = [n for n in pending if all(id(d) in placed for d in n.deps)]
            if not ready:
                raise CudaError(codes.INVALID_VALUE, "the graph has a cycle")
            for n in ready:
                placed.add(id(n))
                out.append(n)
            pending = rest
        return out


@dataclass(eq=False)
class Capture:
    graph: Graph
    origin: int
    mode: int
    ident: int = 0
    invalid: str = ""  # why the capture was invalidated: cuStreamEndCapture then fails
    tails: dict[int, list[Node]] = field(default_factory=dict)  # each joined stream's last nodes


captures: dict[int, Capture] = {}  # stream -> the capture it records into
capture_events: dict[int, tuple[Capture, list[Node]]] = {}  # event recorded while capturing -> its point
capture_ids = itertools.count(1)


def stream_key(h: int) -> int:
    return STATE.driver_for(int(h or 0))._stream(int(h or 0))


# ---------------------------------------------------------------------------- capture hooks
def record(stream: int | None, kind: int, params: Any, issue: Callable[[Node, int], None]) -> bool:
    """The hook every stream-ordered call makes after checking its arguments: when ``stream`` is capturing, add a
    node of ``kind`` that calls ``issue(node, stream)`` at launch and return True (the call then does nothing now)."""
    if not captures:
        return False
    key = stream_key(int(stream or 0))
    cap = captures.get(key)
    if cap is None:
        return False
    if cap.invalid:
        raise CudaError(codes.STREAM_CAPTURE_INVALIDATED, f"the capture was invalidated: {cap.invalid}")
    node = Node(kind, params, list(cap.tails.get(key, [])), issue)
    cap.graph.nodes.append(node)
    cap.tails[key] = [node]
    return True


def capture_alloc(stream: int | None, size: int) -> int | None:
    """cuMemAllocAsync on a capturing stream: graph memory, allocated now, and a memory allocation node."""
    if not captures:
        return None
    cap = captures.get(stream_key(int(stream or 0)))
    if cap is None:
        return None
    addr = cap.graph.memory.alloc(size)
    record(stream, MEM_ALLOC, (addr, size), issue_nothing)
    return addr


def capture_free(stream: int | None, ptr: int) -> bool:
    """cuMemFreeAsync on a capturing stream: a memory free node (graph memory lives as long as its graph)."""
    if not captures or stream_key(int(stream or 0)) not in captures:
        return False
    return record(stream, MEM_FREE, ptr, issue_nothing)


def refuse_sync(stream: int | None, what: str) -> None:
    """Synchronising a capturing stream (or waiting on its results from the host) is not allowed while capturing."""
    cap = captures.get(stream_key(int(stream or 0))) if captures else None
    if cap is not None:
        cap.invalid = cap.invalid or f"{what} while capturing"
        raise CudaError(codes.STREAM_CAPTURE_UNSUPPORTED, f"{what}: the stream is capturing a graph")


def post(msg: Any) -> None:
    """Queue a stream-ordered message (a vendor library's operation), or record it into the capture."""
    drv = STATE.driver()

    def issue(_node: Node, stream: int) -> None:
        drv.conn.post(msgspec.structs.replace(msg, stream=stream_key(stream)))

    if not record(msg.stream, KERNEL, None, issue):
        drv.conn.post(msg)


def event_recorded(event: int, stream: int) -> bool:
    """cuEventRecord on a capturing stream marks a point of the capture (no node); True when it did."""
    cap = captures.get(stream_key(stream)) if captures else None
    if cap is None:
        return False
    capture_events[int(event)] = (cap, list(cap.tails.get(stream_key(stream), [])))
    return True


def stream_waits(stream: int, event: int) -> bool:
    """cuStreamWaitEvent: a stream waiting on an event of a capture joins it; True when handled here."""
    point = capture_events.get(int(event))
    key = stream_key(stream)
    if point is None or point[0].origin not in captures:
        return key in captures  # a capturing stream waiting on an event from outside: nothing to record
    cap, deps = point
    if key in captures and captures[key] is not cap:
        raise CudaError(codes.STREAM_CAPTURE_UNMATCHED, "cuStreamWaitEvent: the stream captures into another graph")
    captures[key] = cap
    cap.tails[key] = list({id(n): n for n in cap.tails.get(key, []) + deps}.values())
    return True


# ---------------------------------------------------------------------------- node issue functions
def issue_nothing(node: Node, stream: int) -> None:
    pass


def issue_kernel(node: Node, stream: int) -> None:
    info, grid, block, shared, params = node.params[:5]
    cooperative = len(node.params) > 5 and node.params[5]
    STATE.driver_for(info.module).launch_kernel(  # the kernel's device (NOTE [devices of a program])
        info, grid, block, params, shared_mem=shared, stream=stream_key(stream), cooperative=cooperative, checked=True
    )
