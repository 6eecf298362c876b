"""Driver API: CUDA graphs, built explicitly (cuGraphAdd*Node) or by stream capture, and launched.

NOTE [graphs in the native face]: a graph lives on the client, as a list of nodes with their dependencies; each
node knows how to issue its work on a stream (``Node.issue``), through the same calls a program makes outside a
graph, so a graph launch is exactly the work of its nodes, checked as it would be. A launch issues the nodes in a
topological order on the launch stream: one legal schedule of the graph (its branches are serialised, which CUDA
allows), ordered after the stream's earlier work and before its later work, as cuGraphLaunch's is.

Stream capture: while a stream captures, the calls that would queue work on it (kernel launches, copies,
memsets, host functions, vendor-library operations, stream-ordered allocation) record a node instead and return,
their arguments checked as at any call. A kernel's parameters, and a library call's scalars in host memory, are
read when the call is made; host memory named by a captured copy is read or written when the graph runs, as on a
GPU. An event recorded on a capturing stream marks a point of the capture; another stream waiting on it joins the
capture with those dependencies (the fork/join pattern); cuStreamEndCapture on the origin stream ends it for every
joined stream. Synchronising a capturing stream is CUDA_ERROR_STREAM_codes.STREAM_CAPTURE_UNSUPPORTED.

Graph memory (cuGraphAddMemAllocNode, cudaMallocAsync while capturing) is allocated when the node is made and
stays allocated, at the same address, until the last graph and executable that hold it are destroyed; a free node
ends nothing early. That uses more memory than CUDA's reuse between launches, never less correctly.
"""

from __future__ import annotations

import ctypes
import itertools
import struct
from ctypes import c_int, c_size_t, c_uint, c_ulonglong, c_void_p
from dataclasses import dataclass
from typing import Any

from proto import errors as codes
from proto.errors import CudaError
from shim.native import cu_launch, cu_memory, cu_module, cu_pointer, cu_stream
from shim.native.cu_capture import (
    EMPTY,
    EVENT_RECORD,
    GRAPH,
    HOST,
    KERNEL,
    MEM_ALLOC,
    MEM_FREE,
    MEMCPY,
    MEMSET,
    WAIT_EVENT,
    Capture,
    Graph,
    GraphMemory,
    Node,
    capture_events,
    capture_ids,
    captures,
    footprint,
    is_graph_memory,
    issue_kernel,
    issue_nothing,
    stream_key,
)
from shim.native.registry import api, put_i32, put_u64
from shim.native.state import STATE

P = c_void_p
_KERNEL_V1 = struct.Struct("<Q7I4xQQ")  # CUDA_KERNEL_NODE_PARAMS: func, grid[3], block[3], shared, params, extra
_KERNEL_V2 = struct.Struct("<Q7I4xQQQQ")  # ..._v2: + kern, ctx
_MEMSET = struct.Struct("<QQIIQQ")  # CUDA_MEMSET_NODE_PARAMS
_HOST = struct.Struct("<QQ")  # CUDA_HOST_NODE_PARAMS: fn, userData
_MEMCPY3D_SIZE = 200
_MEM_ALLOC_BYTES, _MEM_ALLOC_DPTR = 104, 112  # offsets in CUDA_MEM_ALLOC_NODE_PARAMS


@dataclass(eq=False)
class Exec:
    nodes: list[Node]  # copies, in launch order; their params can change without touching the graph
    of: dict[int, Node]  # id(graph node) -> its copy here
    memory: list[GraphMemory]  # the graph's and its child graphs', held while the executable lives

    def launch(self, stream: int) -> None:
        for node in self.nodes:
            node.issue(stream)


_ids = itertools.count(0x6AF0000)
_objects: dict[int, Any] = {}  # graphs, nodes and executables by the handle given out
_handle_of: dict[int, int] = {}  # id(object) -> handle


def _give(obj: Any) -> int:
    key = _handle_of.get(id(obj))
    if key is None:
        key = next(_ids)
        _objects[key] = obj
        _handle_of[id(obj)] = key
    return key


def _get(key: int | None, kind: type, what: str) -> Any:
    obj = _objects.get(int(key or 0))
    if not isinstance(obj, kind):
        raise CudaError(codes.INVALID_VALUE, f"invalid {what} handle 0x{int(key or 0):x}")
    return obj


def _forget(obj: Any) -> None:
    key = _handle_of.pop(id(obj), None)
    if key is not None:
        _objects.pop(key, None)


# ---------------------------------------------------------------------------- node issue functions
def _issue_memcpy(node: Node, stream: int) -> None:
    cu_pointer.memcpy3d(ctypes.addressof(node.params), stream, "graph memcpy node")


def _issue_memset(node: Node, stream: int) -> None:
    dst, pitch, value, elem, width, height = node.params
    cu_memory._memset2d(dst, pitch, value, elem, width, height, stream, "graph memset node")


def _issue_child(node: Node, stream: int) -> None:
    for n in node.params.order():
        n.issue(stream)


def _issue_event_record(node: Node, stream: int) -> None:
    STATE.driver_for(node.params).event_record(node.params, stream_key(stream))


# ---------------------------------------------------------------------------- node parameters
def _kernel_params(ptr: int | None, v2: bool) -> tuple:
    if not ptr:
        raise CudaError(codes.INVALID_VALUE, "kernel node parameters are NULL")
    layout = _KERNEL_V2 if v2 else _KERNEL_V1
    fields = layout.unpack(ctypes.string_at(int(ptr), layout.size))
    func, gx, gy, gz, bx, by, bz, shared, kparams, extra = fields[:10]
    kern = fields[10] if v2 else 0
    info = cu_module.function(func or kern)  # a CUkernel: this driver's kernels and functions share their handles
    params = cu_launch.marshal(info, kparams, extra)  # copied now, as the driver copies them
    grid, block = (gx, gy, gz), (bx, by, bz)
    cu_launch.validate(info, grid, block, shared, len(params))
    return info, grid, block, shared, params, False, func, kern  # the handles as given, for GetParams


def _memset_params(ptr: int | None) -> tuple:
    if not ptr:
        raise CudaError(codes.INVALID_VALUE, "memset node parameters are NULL")
    dst, pitch, value, elem, width, height = _MEMSET.unpack(ctypes.string_at(int(ptr), _MEMSET.size))
    if elem not in (1, 2, 4):
        raise CudaError(codes.INVALID_VALUE, f"memset node: elementSize {elem} (1, 2 or 4)")
    if width and height:
        cu_memory.check_device(dst, (height - 1) * max(pitch, width * elem) + width * elem, "graph memset node")
    return dst, pitch, value, elem, width, height


def _memcpy_params(ptr: int | None) -> ctypes.Array:
    if not ptr:
        raise CudaError(codes.INVALID_VALUE, "memcpy node parameters are NULL")
    return ctypes.create_string_buffer(ctypes.string_at(int(ptr), _MEMCPY3D_SIZE), _MEMCPY3D_SIZE)


_ISSUE = {
    KERNEL: issue_kernel,
    MEMCPY: _issue_memcpy,
    MEMSET: _issue_memset,
    HOST: cu_stream.issue_host,
    GRAPH: _issue_child,
    EVENT_RECORD: _issue_event_record,
}


def _add(out: int, graph: int | None, deps: int | None, ndeps: int, kind: int, params: Any) -> Node:
    g = _get(graph, Graph, "graph")
    if not out:
        raise CudaError(codes.INVALID_VALUE, "phGraphNode is NULL")
    if ndeps and not deps:
        raise CudaError(codes.INVALID_VALUE, f"{ndeps} dependencies but dependencies is NULL")
    dep_nodes = []
    for h in (ctypes.c_uint64 * ndeps).from_address(int(deps or 0)) if ndeps else ():
        d = _get(h, Node, "graph node")
        if not any(d is n for n in g.nodes):
            raise CudaError(codes.INVALID_VALUE, "a dependency belongs to another graph")
        dep_nodes.append(d)
    node = Node(kind, params, dep_nodes, _ISSUE.get(kind, issue_nothing))
    g.nodes.append(node)
    put_u64(out, _give(node))
    return node


# ---------------------------------------------------------------------------- graphs
@api("cuGraphCreate", 10000, P, c_uint)
def cuGraphCreate(out: int, flags: int) -> None:
    if flags:
        raise CudaError(codes.INVALID_VALUE, f"cuGraphCreate: flags {flags} (0)")
    put_u64(out, _give(Graph()))


@api("cuGraphDestroy", 10000, P)
def cuGraphDestroy(graph: int | None) -> None:
    g = _get(graph, Graph, "graph")
    for n in g.nodes:
        _forget(n)
    _forget(g)
    for mem in _memories(g):
        mem.release()


@api("cuGraphAddKernelNode", 10000, P, P, P, c_size_t, P)
def cuGraphAddKernelNode(out: int, graph: int | None, deps: int | None, n: int, params: int | None) -> None:
    _add(out, graph, deps, n, KERNEL, _kernel_params(params, v2=False))


@api("cuGraphAddKernelNode", 12000, P, P, P, c_size_t, P)
def cuGraphAddKernelNode_v2(out: int, graph: int | None, deps: int | None, n: int, params: int | None) -> None:
    _add(out, graph, deps, n, KERNEL, _kernel_params(params, v2=True))


@api("cuGraphAddMemcpyNode", 10000, P, P, P, c_size_t, P, P)
def cuGraphAddMemcpyNode(out: int, graph: int | None, deps: int | None, n: int, params: int | None, ctx: int) -> None:
    _add(out, graph, deps, n, MEMCPY, _memcpy_params(params))


@api("cuGraphAddMemsetNode", 10000, P, P, P, c_size_t, P, P)
def cuGraphAddMemsetNode(out: int, graph: int | None, deps: int | None, n: int, params: int | None, ctx: int) -> None:
    _add(out, graph, deps, n, MEMSET, _memset_params(params))


@api("cuGraphAddHostNode", 10000, P, P, P, c_size_t, P)
def cuGraphAddHostNode(out: int, graph: int | None, deps: int | None, n: int, params: int | None) -> None:
    if not params:
        raise CudaError(codes.INVALID_VALUE, "host node parameters are NULL")
    fn, user = _HOST.unpack(ctypes.string_at(int(params), _HOST.size))
    if not fn:
        raise CudaError(codes.INVALID_VALUE, "host node: fn is NULL")
    _add(out, graph, deps, n, HOST, (fn, user))


@api("cuGraphAddEmptyNode", 10000, P, P, P, c_size_t)
def cuGraphAddEmptyNode(out: int, graph: int | None, deps: int | None, n: int) -> None:
    _add(out, graph, deps, n, EMPTY, None)


@api("cuGraphAddChildGraphNode", 10000, P, P, P, c_size_t, P)
def cuGraphAddChildGraphNode(out: int, graph: int | None, deps: int | None, n: int, child: int | None) -> None:
    _add(out, graph, deps, n, GRAPH, _clone(_get(child, Graph, "graph")))


@api("cuGraphAddEventRecordNode", 11010, P, P, P, c_size_t, P)
def cuGraphAddEventRecordNode(out: int, graph: int | None, deps: int | None, n: int, event: int | None) -> None:
    STATE.driver_for(int(event or 0))._event(int(event or 0))
    _add(out, graph, deps, n, EVENT_RECORD, int(event or 0))


@api("cuGraphAddEventWaitNode", 11010, P, P, P, c_size_t, P)
def cuGraphAddEventWaitNode(out: int, graph: int | None, deps: int | None, n: int, event: int | None) -> None:
    STATE.driver_for(int(event or 0))._event(int(event or 0))
    _add(out, graph, deps, n, WAIT_EVENT, int(event or 0))  # the launch is one stream: nothing to wait for


@api("cuGraphAddMemAllocNode", 11040, P, P, P, c_size_t, P)
def cuGraphAddMemAllocNode(out: int, graph: int | None, deps: int | None, n: int, params: int | None) -> None:
    g = _get(graph, Graph, "graph")
    if not params:
        raise CudaError(codes.INVALID_VALUE, "memory allocation node parameters are NULL")
    size = ctypes.c_size_t.from_address(int(params) + _MEM_ALLOC_BYTES).value
    addr = g.memory.alloc(size)
    _add(out, graph, deps, n, MEM_ALLOC, (addr, size))
    put_u64(int(params) + _MEM_ALLOC_DPTR, addr)


@api("cuGraphAddMemFreeNode", 11040, P, P, P, c_size_t, ctypes.c_uint64)
def cuGraphAddMemFreeNode(out: int, graph: int | None, deps: int | None, n: int, ptr: int) -> None:
    _get(graph, Graph, "graph")
    if not is_graph_memory(ptr):
        raise CudaError(codes.INVALID_VALUE, f"memory free node: 0x{ptr:x} is not graph memory")
    _add(out, graph, deps, n, MEM_FREE, ptr)


@api("cuDeviceGetGraphMemAttribute", 11040, c_int, c_int, P)
def cuDeviceGetGraphMemAttribute(device: int, attr: int, out: int) -> None:
    """Used and reserved graph memory, now and at its high-water mark: the same here (each allocation is its own)."""
    STATE.check_device(device)
    if attr not in (0, 1, 2, 3) or not out:
        raise CudaError(codes.INVALID_VALUE, f"cuDeviceGetGraphMemAttribute: attribute {attr} (0-3) or NULL value")
    put_u64(out, footprint[attr % 2])


@api("cuDeviceSetGraphMemAttribute", 11040, c_int, c_int, P)
def cuDeviceSetGraphMemAttribute(device: int, attr: int, value: int) -> None:
    STATE.check_device(device)
    if attr not in (1, 3) or not value or ctypes.c_uint64.from_address(int(value)).value != 0:
        raise CudaError(codes.INVALID_VALUE, "cuDeviceSetGraphMemAttribute: only a high-water mark, reset to 0")
    footprint[1] = footprint[0]


@api("cuDeviceGraphMemTrim", 11040, c_int)
def cuDeviceGraphMemTrim(device: int) -> None:
    STATE.check_device(device)  # nothing cached to trim: graph memory goes when its graph goes


def _memories(g: Graph) -> list[GraphMemory]:
    return [g.memory] + [m for n in g.nodes if n.kind == GRAPH for m in _memories(n.params)]


@api("cuGraphGetNodes", 10000, P, P, P)
def cuGraphGetNodes(graph: int | None, nodes: int | None, count: int) -> None:
    g = _get(graph, Graph, "graph")
    _list(g.nodes, nodes, count)


@api("cuGraphGetRootNodes", 10000, P, P, P)
def cuGraphGetRootNodes(graph: int | None, nodes: int | None, count: int) -> None:
    g = _get(graph, Graph, "graph")
    _list([n for n in g.nodes if not n.deps], nodes, count)


def _list(items: list[Node], out: int | None, count: int) -> None:
    if not count:
        raise CudaError(codes.INVALID_VALUE, "numNodes is NULL")
    if not out:
        put_u64(count, len(items))
        return
    room = ctypes.c_size_t.from_address(count).value
    for i, n in enumerate(items[:room]):
        put_u64(int(out) + 8 * i, _give(n))
    put_u64(count, min(room, len(items)))


@api("cuGraphNodeGetType", 10000, P, P)
def cuGraphNodeGetType(node: int | None, out: int) -> None:
    put_i32(out, _get(node, Node, "graph node").kind)


def _kernel_node(node: int | None) -> Node:
    n = _get(node, Node, "graph node")
    if n.kind != KERNEL:
        raise CudaError(codes.INVALID_VALUE, "not a kernel node")
    return n


def _get_kernel_params(node: int | None, out: int, v2: bool) -> None:
    """The node's launch, with ``kernelParams`` pointing at the node's own copy of each parameter (valid while the
    node lives, so a program may read them, change a field and set them back)."""
    if not out:
        raise CudaError(codes.INVALID_VALUE, "pNodeParams is NULL")
    n = _kernel_node(node)
    info, grid, block, shared, params = n.params[:5]
    if n.view is None:
        buf = ctypes.create_string_buffer(bytes(params), max(1, len(params)))
        ptrs = (c_void_p * max(1, len(info.params)))(*[ctypes.addressof(buf) + off for _s, _a, off in info.params])
        n.view = (buf, ptrs)
    ptrs = n.view[1]
    func, kern = n.params[6:8] if len(n.params) > 6 else (info.handle, 0)
    if not v2 and not func:
        func = kern
    layout, fields = (_KERNEL_V2, (kern, 0)) if v2 else (_KERNEL_V1, ())
    packed = layout.pack(func, *grid, *block, shared, ctypes.addressof(ptrs), 0, *fields)
    ctypes.memmove(out, packed, layout.size)


@api("cuGraphKernelNodeGetParams", 10000, P, P)
def cuGraphKernelNodeGetParams(node: int | None, out: int) -> None:
    _get_kernel_params(node, out, v2=False)


@api("cuGraphKernelNodeGetParams", 12000, P, P)
def cuGraphKernelNodeGetParams_v2(node: int | None, out: int) -> None:
    _get_kernel_params(node, out, v2=True)


@api("cuGraphKernelNodeSetParams", 10000, P, P)
def cuGraphKernelNodeSetParams(node: int | None, params: int | None) -> None:
    n = _kernel_node(node)
    n.params = _kernel_params(params, v2=False)
    n.view = None


@api("cuGraphKernelNodeSetParams", 12000, P, P)
def cuGraphKernelNodeSetParams_v2(node: int | None, params: int | None) -> None:
    n = _kernel_node(node)
    n.params = _kernel_params(params, v2=True)
    n.view = None


def _clone(g: Graph) -> Graph:
    copy = Graph(memory=g.memory.hold())  # a clone shares the original's graph memory
    twins: dict[int, Node] = {}
    for n in g.nodes:
        twin = Node(
            n.kind, _clone(n.params) if n.kind == GRAPH else n.params, [twins[id(d)] for d in n.deps], n.issue_fn
        )
        twins[id(n)] = twin
        copy.nodes.append(twin)
    return copy


@api("cuGraphClone", 10000, P, P)
def cuGraphClone(out: int, graph: int | None) -> None:
    put_u64(out, _give(_clone(_get(graph, Graph, "graph"))))


_KIND_NAMES = {
    KERNEL: "KERNEL",
    MEMCPY: "MEMCPY",
    MEMSET: "MEMSET",
    HOST: "HOST",
    GRAPH: "GRAPH",
    EMPTY: "EMPTY",
    WAIT_EVENT: "WAIT_EVENT",
    EVENT_RECORD: "EVENT_RECORD",
    MEM_ALLOC: "MEM_ALLOC",
    MEM_FREE: "MEM_FREE",
}


def _dot_lines(g: Graph, verbose: int, kernels: int, prefix: str) -> list[str]:
    lines, names = [], {}
    for i, n in enumerate(g.nodes):
        names[id(n)] = f"{prefix}n{i}"
        label = _KIND_NAMES.get(n.kind, str(n.kind))
        if n.kind == KERNEL and n.params is not None:
            info, grid, block, shared = n.params[:4]
            label += f"\\n{info.name}"
            if kernels:
                label += f"\\ngrid {grid} block {block} shared {shared}\\n{len(n.params[4])} parameter bytes"
        elif n.kind == MEM_ALLOC and verbose:
            label += f"\\n0x{n.params[0]:x} ({n.params[1]} bytes)"
        lines.append(f'  "{names[id(n)]}" [label="{label}"];')
        if n.kind == GRAPH:
            lines += _dot_lines(n.params, verbose, kernels, f"{prefix}n{i}_")
    for n in g.nodes:
        lines += [f'  "{names[id(d)]}" -> "{names[id(n)]}";' for d in n.deps]
    return lines


@api("cuGraphDebugDotPrint", 11030, P, P, c_uint)
def cuGraphDebugDotPrint(graph: int | None, path: int | None, flags: int) -> None:
    """The graph in Graphviz's DOT language: a node per graph node (kernels by name), an edge per dependency;
    CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE (1) adds each node's parameters, KERNEL_NODE_PARAMS (4) a kernel's."""
    g = _get(graph, Graph, "graph")
    if not path:
        raise CudaError(codes.INVALID_VALUE, "cuGraphDebugDotPrint: path is NULL")
    text = "digraph wooly_graph {\n" + "\n".join(_dot_lines(g, flags & 1, flags & 5, "")) + "\n}\n"
    try:
        with open(ctypes.string_at(int(path)), "w") as f:
            f.write(text)
    except OSError as exc:
        raise CudaError(codes.OPERATING_SYSTEM, f"cuGraphDebugDotPrint: {exc}") from None


# ---------------------------------------------------------------------------- executables
def _instantiate(out: int, graph: int | None) -> None:
    g = _get(graph, Graph, "graph")
    if not out:
        raise CudaError(codes.INVALID_VALUE, "phGraphExec is NULL")
    order = g.order()
    of = {id(n): Node(n.kind, n.params, [], n.issue_fn) for n in order}
    put_u64(out, _give(Exec([of[id(n)] for n in order], of, [mem.hold() for mem in _memories(g)])))


@api("cuGraphInstantiate", (10000, 11000), P, P, P, P, c_size_t)
def cuGraphInstantiate(out: int, graph: int | None, err_node: int | None, log: int | None, size: int) -> None:
    _instantiate(out, graph)


@api("cuGraphInstantiateWithFlags", 11040, P, P, c_ulonglong)
def cuGraphInstantiateWithFlags(out: int, graph: int | None, flags: int) -> None:
    if flags & ~0xF:
        raise CudaError(codes.INVALID_VALUE, f"cuGraphInstantiateWithFlags: flags {flags}")
    _instantiate(out, graph)


@api("cuGraphInstantiateWithParams", 12000, P, P, P)
def cuGraphInstantiateWithParams(out: int, graph: int | None, params: int | None) -> None:
    _instantiate(out, graph)
    if params:
        put_i32(int(params) + 24, 0)  # CUDA_GRAPH_INSTANTIATE_PARAMS.result_out = CUDA_GRAPH_INSTANTIATE_SUCCESS


@api("cuGraphExecDestroy", 10000, P)
def cuGraphExecDestroy(exe: int | None) -> None:
    e = _get(exe, Exec, "graph exec")
    _forget(e)
    for mem in e.memory:
        mem.release()


@api("cuGraphLaunch", 10000, P, P)
def cuGraphLaunch(exe: int | None, stream: int | None) -> None:
    e = _get(exe, Exec, "graph exec")
    STATE.driver_for(int(stream or 0))._stream(int(stream or 0))
    e.launch(int(stream or 0))


@api("cuGraphUpload", 11010, P, P)
def cuGraphUpload(exe: int | None, stream: int | None) -> None:
    _get(exe, Exec, "graph exec")  # nothing to upload: nodes are issued at launch


def _exec_kernel_set(exe: int | None, node: int | None, params: int | None, v2: bool) -> None:
    e = _get(exe, Exec, "graph exec")
    n = _get(node, Node, "graph node")
    twin = e.of.get(id(n))
    if twin is None or twin.kind != KERNEL:
        raise CudaError(codes.INVALID_VALUE, "the node is not a kernel node of the executable's graph")
    twin.params = _kernel_params(params, v2=v2)


@api("cuGraphExecKernelNodeSetParams", 10010, P, P, P)
def cuGraphExecKernelNodeSetParams(exe: int | None, node: int | None, params: int | None) -> None:
    _exec_kernel_set(exe, node, params, v2=False)


@api("cuGraphExecKernelNodeSetParams", 12000, P, P, P)
def cuGraphExecKernelNodeSetParams_v2(exe: int | None, node: int | None, params: int | None) -> None:
    _exec_kernel_set(exe, node, params, v2=True)


@api("cuGraphExecUpdate", (10020, 12000), P, P, P)
def cuGraphExecUpdate(exe: int | None, graph: int | None, result: int | None) -> None:
    """Take the new graph's node parameters when its topology matches the executable's (the update CUDA allows);
    otherwise CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE with the reason in the result info."""
    e = _get(exe, Exec, "graph exec")
    g = _get(graph, Graph, "graph")
    order = g.order()
    same = len(order) == len(e.nodes) and all(a.kind == b.kind for a, b in zip(order, e.nodes, strict=False))
    if result:
        ctypes.memset(int(result), 0, 24)
        put_i32(int(result), 0 if same else 2)  # CU_GRAPH_EXEC_UPDATE_SUCCESS / ERROR_TOPOLOGY_CHANGED
    if not same:
        raise CudaError(
            codes.GRAPH_EXEC_UPDATE_FAILURE, "cuGraphExecUpdate: the graph's topology differs from the executable's"
        )
    for new, twin in zip(order, e.nodes, strict=True):
        twin.params, twin.issue_fn = new.params, new.issue_fn
        e.of[id(new)] = twin


# ---------------------------------------------------------------------------- stream capture
@api("cuStreamBeginCapture", (10000, 10010), P, c_uint)
def cuStreamBeginCapture(stream: int | None, mode: int) -> None:
    drv = STATE.driver_for(int(stream or 0))
    key = drv._stream(int(stream or 0))
    if key == 0:
        raise CudaError(
            codes.STREAM_CAPTURE_UNSUPPORTED, "cuStreamBeginCapture: the legacy default stream cannot capture"
        )
    if key in captures:
        raise CudaError(codes.ILLEGAL_STATE, "cuStreamBeginCapture: the stream is capturing already")
    if mode not in (0, 1, 2):
        raise CudaError(codes.INVALID_VALUE, f"cuStreamBeginCapture: mode {mode}")
    captures[key] = Capture(Graph(), key, mode, next(capture_ids))


def _unjoined(cap: Capture) -> bool:
    """Whether a stream that joined the capture has work the origin stream never waited for."""
    seen: set[int] = set()
    todo = list(cap.tails.get(cap.origin, []))
    while todo:
        n = todo.pop()
        if id(n) not in seen:
            seen.add(id(n))
            todo.extend(n.deps)
    return any(id(n) not in seen for s, tails in cap.tails.items() if s != cap.origin for n in tails)


def _end(cap: Capture) -> None:
    for s in [s for s, c in captures.items() if c is cap]:
        del captures[s]
    for ev in [ev for ev, (c, _) in capture_events.items() if c is cap]:
        del capture_events[ev]


@api("cuStreamEndCapture", 10000, P, P)
def cuStreamEndCapture(stream: int | None, out: int) -> None:
    key = stream_key(int(stream or 0))
    cap = captures.get(key)
    if not out:
        raise CudaError(codes.INVALID_VALUE, "cuStreamEndCapture: phGraph is NULL")
    if cap is None:
        raise CudaError(codes.ILLEGAL_STATE, "cuStreamEndCapture: the stream is not capturing")
    if cap.origin != key:  # the capture goes on, invalidated: its origin stream must still end it
        cap.invalid = cap.invalid or "cuStreamEndCapture on a stream other than the one it began on"
        raise CudaError(codes.STREAM_CAPTURE_UNMATCHED, "cuStreamEndCapture: not the stream the capture began on")
    _end(cap)
    put_u64(out, 0)
    failure = None
    if cap.invalid:
        failure = CudaError(codes.STREAM_CAPTURE_INVALIDATED, f"cuStreamEndCapture: {cap.invalid}")
    elif _unjoined(cap):
        failure = CudaError(
            codes.STREAM_CAPTURE_UNJOINED, "cuStreamEndCapture: a stream forked from the capture was not joined back"
        )
    if failure is not None:
        cap.graph.memory.release()
        raise failure
    put_u64(out, _give(cap.graph))


def _status(key: int) -> int:
    """CU_STREAM_CAPTURE_STATUS_NONE, _ACTIVE or _INVALIDATED; asking about the legacy default stream while a
    blocking stream captures is CUDA_ERROR_STREAM_CAPTURE_IMPLICIT (it would wait on the capturing stream)."""
    cap = captures.get(key) if captures else None
    if cap is None:
        if key == 0 and any(not STATE.stream_flags.get(s, (0, 0))[0] & 1 for s in captures):
            raise CudaError(codes.STREAM_CAPTURE_IMPLICIT, "the legacy stream would wait on a capturing stream")
        return 0
    return 2 if cap.invalid else 1


@api("cuStreamIsCapturing", 10000, P, P)
def cuStreamIsCapturing(stream: int | None, out: int) -> None:
    if not out:
        raise CudaError(codes.INVALID_VALUE, "cuStreamIsCapturing: captureStatus is NULL")
    put_i32(out, _status(STATE.driver_for(int(stream or 0))._stream(int(stream or 0))))


def _capture_info(stream: int | None, status: int, ident: int) -> Capture | None:
    key = STATE.driver_for(int(stream or 0))._stream(int(stream or 0))
    cap = captures.get(key) if captures else None
    if not status:
        raise CudaError(codes.INVALID_VALUE, "captureStatus_out is NULL")
    put_i32(status, _status(key))
    if ident and cap:
        put_u64(ident, cap.ident)
    return cap


@api("cuStreamGetCaptureInfo", 10010, P, P, P)
def cuStreamGetCaptureInfo(stream: int | None, status: int, ident: int) -> None:
    _capture_info(stream, status, ident)


@api("cuStreamGetCaptureInfo", 11030, P, P, P, P, P, P)
def cuStreamGetCaptureInfo_v2(stream: int | None, status: int, ident: int, graph: int, deps: int, n: int) -> None:
    cap = _capture_info(stream, status, ident)
    tails = cap.tails.get(stream_key(int(stream or 0)), []) if cap else []
    if graph:
        put_u64(graph, _give(cap.graph) if cap else 0)
    if deps:
        _deps_out[:] = [(ctypes.c_uint64 * max(1, len(tails)))(*[_give(t) for t in tails])]
        put_u64(deps, ctypes.addressof(_deps_out[0]))
    if n:
        put_u64(n, len(tails))


@api("cuStreamGetCaptureInfo", 12030, P, P, P, P, P, P, P)
def cuStreamGetCaptureInfo_v3(
    stream: int | None, status: int, ident: int, graph: int, deps: int, edges: int, n: int
) -> None:
    cuStreamGetCaptureInfo_v2(stream, status, ident, graph, deps, n)
    if edges:
        put_u64(edges, 0)  # NULL: every edge is a default edge


_deps_out: list[ctypes.Array] = []  # what cuStreamGetCaptureInfo_v2 points dependencies_out at: valid until the next
# call, as CUDA's array is


@api("cuThreadExchangeStreamCaptureMode", 10010, P)
def cuThreadExchangeStreamCaptureMode(mode: int) -> None:
    if not mode:
        raise CudaError(codes.INVALID_VALUE, "mode is NULL")
    held = ctypes.c_int.from_address(int(mode))
    held.value, _mode[0] = _mode[0], held.value


_mode = [0]  # the thread's capture interaction mode (one thread's worth: it only gates what may be called)
