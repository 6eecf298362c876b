# torch's stubs give ProcessGroup's methods the overloads of its Python API; a backend implements the C++ one.
# mypy: disable-error-code="override, assignment"
"""torch.distributed for CUDA tensors that live on gpud: the process-group backend a program asks for as "nccl".

NOTE [collectives]
A distributed program (``torchrun train.py``, ``mp.spawn`` over ranks, ``DistributedDataParallel``) asks for the
"nccl" backend, or for the default backend of the "cuda" device, which is NCCL's. NCCL moves device memory between
GPUs by itself; here the tensors are gpud's, each rank a client of its own (a session per process, NOTE [child
interpreters]), and gpud keeps sessions apart: no device memory crosses between them on gpud. So a collective of
CUDA tensors goes through the ranks' host memory, where PyTorch's own Gloo backend does the exchange over the same
rendezvous store: each rank downloads its tensors, Gloo runs the collective on the host copies, each rank uploads
the result into its tensors. The device a collective leaves its result on, its dtype and shape, and the values
(Gloo's reductions, summed in the same order on every rank, so every rank holds the same bits) are what NCCL gives;
the cost is two copies per byte and a host exchange, fine for the programs this is for (a laptop running a script
written for GPUs, a CI job), not for training at scale, where gpud's nodes would need a device-side exchange.

What is routed here: "nccl" and "gloo" (whose CUDA side needs a CUDA build's Gloo; both become "wooly", a backend
of both devices that hands host tensors to Gloo as they are), "nccl" in a per-device string ("cpu:gloo,cuda:nccl"),
and the default backend of "cuda" (``get_default_backend_for_device``, ``init_process_group()`` with no backend).
``dist.get_backend()`` names the backend the program asked for ("nccl"); PyTorch's own code sees "wooly". Every
collective completes before it returns (its ``Work`` is done; ``async_op=True`` waits cost nothing more), which is
stream order for the program: its later ops are queued after the upload. ``ReduceOp.AVG`` (NCCL's, not Gloo's) is a
sum divided by the group size.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

NAME = "wooly"
_installed = False
_asked: dict[Any, str] = {}  # process group -> the backend string the program gave for it


def _remote(t: torch.Tensor) -> bool:
    return t.device.type == "cuda"


def _down(t: torch.Tensor) -> torch.Tensor:
    """A host copy of ``t`` Gloo can use (contiguous); a host tensor as it is."""
    return t.detach().to("cpu").contiguous() if _remote(t) else t


def _up(dst: torch.Tensor, src: torch.Tensor) -> None:
    if dst is not src:
        with torch.no_grad():
            dst.copy_(src)


def _done(result: Any) -> Any:
    from torch._C._distributed_c10d import _create_work_from_future  # type: ignore[attr-defined]
    from torch.futures import Future

    fut: Future[Any] = Future()
    fut.set_result(result)
    return _create_work_from_future(fut)


def _plain_op(opts: Any, size: int) -> tuple[Any, Callable[[torch.Tensor], Any] | None]:
    """The Gloo reduction for ``opts.reduceOp``, and what to do to the result after (AVG: divide by the group size)."""
    op = opts.reduceOp
    if op == dist.ReduceOp.AVG:
        return (
            dist.ReduceOp.SUM,
            lambda t: t.div_(size) if t.is_floating_point() or t.is_complex() else t.floor_divide_(size),
        )
    return op, None


class DeviceCollectives(dist.ProcessGroup):
    """The backend of the "cuda" device: collectives of remote tensors run by Gloo on host copies (NOTE
    [collectives])."""

    def __init__(self, store: Any, rank: int, size: int, timeout: Any) -> None:
        super().__init__(rank, size)  # type: ignore[call-arg]  # the (rank, size) constructor of a Python group
        self._rank, self._size = rank, size
        self._host: Any = dist.ProcessGroupGloo(store, rank, size, timeout)
        # PyTorch keeps a Python group as the group itself; its name, its backends by device (DeviceMesh, FSDP2,
        # functional collectives ask) are the C++ group's, which come from registered backends: Gloo's, for both
        # devices. Every collective is this class's own (above all, CUDA tensors never reach Gloo directly).
        for device in ("cpu", "cuda"):
            self._register_backend(torch.device(device), dist.ProcessGroup.BackendType.CUSTOM, self._host)

    def getBackendName(self) -> str:  # noqa: N802 - PyTorch's name
        return NAME

    # ------------------------------------------------------------------ reductions
    def _reduce_opts(self, opts: Any, cls: Any) -> tuple[Any, Callable[[torch.Tensor], Any] | None]:
        op, after = _plain_op(opts, self._size)
        new = cls()
        for name in ("rootRank", "rootTensor", "timeout"):
            if hasattr(opts, name):
                setattr(new, name, getattr(opts, name))
        new.reduceOp = op
        return new, after

    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:
        opts = opts if opts is not None else dist.AllreduceOptions()
        gopts, after = self._reduce_opts(opts, dist.AllreduceOptions)
        host = [_down(t) for t in tensors]
        self._host.allreduce(host, gopts).wait()
        for t, h in zip(tensors, host, strict=True):
            if after is not None:
                after(h)
            _up(t, h)
        return _done(tensors)

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:
        for t in tensors:
            self.allreduce([t], _as_allreduce(opts)).wait()
        return _done(tensors)

    def reduce(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:
        opts = opts if opts is not None else dist.ReduceOptions()
        gopts, after = self._reduce_opts(opts, dist.ReduceOptions)
        host = [_down(t) for t in tensors]
        self._host.reduce(host, gopts).wait()
        if self._rank == opts.rootRank:
            for t, h in zip(tensors, host, strict=True):
                if after is not None:
                    after(h)
                _up(t, h)
        return _done(tensors)

    def reduce_scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]], opts: Any = None) -> Any:
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        op, after = _plain_op(opts, self._size)
        for out, parts in zip(outputs, inputs, strict=True):
            flat = torch.stack([_down(p) for p in parts])  # every rank's part, reduced across ranks
            aopts = dist.AllreduceOptions()
            aopts.reduceOp = op
            self._host.allreduce([flat], aopts).wait()
            mine = flat[self._rank]
            if after is not None:
                after(mine)
            _up(out, mine)
        return _done(outputs)

    def _reduce_scatter_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Any:  # noqa: A002
        parts = list(input.chunk(self._size))
        return self.reduce_scatter([output], [parts], opts)

    reduce_scatter_single = _reduce_scatter_base  # the name since PyTorch 2.13

    def reduce_scatter_tensor_coalesced(
        self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None
    ) -> Any:
        for out, inp in zip(outputs, inputs, strict=True):
            self._reduce_scatter_base(out, inp, opts).wait()
        return _done(outputs)

    reduce_scatter_single_coalesced = reduce_scatter_tensor_coalesced

    # ------------------------------------------------------------------ moves
    def broadcast(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:
        opts = opts if opts is not None else dist.BroadcastOptions()
        host = [_down(t) for t in tensors]
        self._host.broadcast(host, opts).wait()
        if self._rank != opts.rootRank:
            for t, h in zip(tensors, host, strict=True):
                _up(t, h)
        return _done(tensors)

    def allgather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any = None) -> Any:
        opts = opts if opts is not None else dist.AllgatherOptions()  # type: ignore[attr-defined]
        host_in = [_down(t) for t in inputs]
        host_out = [[torch.empty_like(h) for _ in range(self._size)] for h in host_in]
        self._host.allgather(host_out, host_in, opts).wait()
        for outs, hs in zip(outputs, host_out, strict=True):
            for t, h in zip(outs, hs, strict=True):
                _up(t, h)
        return _done(outputs)

    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Any:  # noqa: A002
        parts = list(output.chunk(self._size))
        self.allgather([parts], [input], opts).wait()
        return _done([output])

    all_gather_single = _allgather_base

    def allgather_into_tensor_coalesced(
        self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None
    ) -> Any:
        for out, inp in zip(outputs, inputs, strict=True):
            self._allgather_base(out, inp, opts).wait()
        return _done(outputs)

    all_gather_single_coalesced = allgather_into_tensor_coalesced

    def allgather_coalesced(
        self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any = None
    ) -> Any:
        for outs, inp in zip(outputs, inputs, strict=True):
            self.allgather([outs], [inp], opts).wait()
        return _done(outputs)

    def gather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any = None) -> Any:
        opts = opts if opts is not None else dist.GatherOptions()
        host_in = [_down(t) for t in inputs]
        root = self._rank == opts.rootRank
        host_out = [[torch.empty_like(h) for _ in range(self._size)] for h in host_in] if root else []
        self._host.gather(host_out, host_in, opts).wait()
        if root:
            for outs, hs in zip(outputs, host_out, strict=True):
                for t, h in zip(outs, hs, strict=True):
                    _up(t, h)
        return _done(outputs)

    def scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]], opts: Any = None) -> Any:
        opts = opts if opts is not None else dist.ScatterOptions()
        host_out = [_down(t).clone() if not _remote(t) else torch.empty(t.shape, dtype=t.dtype) for t in outputs]
        host_in = [[_down(t) for t in parts] for parts in inputs] if self._rank == opts.rootRank else []
        self._host.scatter(host_out, host_in, opts).wait()
        for t, h in zip(outputs, host_out, strict=True):
            _up(t, h)
        return _done(outputs)

    def alltoall_base(
        self,
        output: torch.Tensor,
        input: torch.Tensor,
        output_split_sizes: list[int],
        input_split_sizes: list[int],
        opts: Any = None,  # noqa: A002
    ) -> Any:
        opts = opts if opts is not None else dist.AllToAllOptions()
        host_out = torch.empty(output.shape, dtype=output.dtype)
        self._host.alltoall_base(host_out, _down(input), output_split_sizes, input_split_sizes, opts).wait()
        _up(output, host_out)
        return _done([output])

    all_to_all_single = alltoall_base

    def alltoall(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None) -> Any:
        opts = opts if opts is not None else dist.AllToAllOptions()
        host_out = [torch.empty(t.shape, dtype=t.dtype) for t in outputs]
        self._host.alltoall(host_out, [_down(t) for t in inputs], opts).wait()
        for t, h in zip(outputs, host_out, strict=True):
            _up(t, h)
        return _done(outputs)

    def send(self, tensors: list[torch.Tensor], dst: int, tag: int = 0) -> Any:
        self._host.send([_down(t) for t in tensors], dst, tag).wait()
        return _done(tensors)

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int = 0) -> Any:
        host = [torch.empty(t.shape, dtype=t.dtype) for t in tensors]
        self._host.recv(host, src, tag).wait()
        for t, h in zip(tensors, host, strict=True):
            _up(t, h)
        return _done(tensors)

    def barrier(self, opts: Any = None) -> Any:
        self._host.barrier(opts if opts is not None else dist.BarrierOptions()).wait()
        return _done([])


def _as_allreduce(opts: Any) -> Any:
    new = dist.AllreduceOptions()
    if opts is not None and hasattr(opts, "reduceOp"):
        new.reduceOp = opts.reduceOp
    return new


def _create(store: Any, rank: int, size: int, timeout: Any) -> DeviceCollectives:
    return DeviceCollectives(store, rank, size, timeout)


def routed(backend: Any) -> Any:
    """The backend string with "nccl" (and a bare "gloo") replaced so CUDA tensors come here (NOTE [collectives])."""
    if backend is None:
        return None
    text = str(backend).lower()
    if text in ("nccl", "gloo"):
        return NAME
    if ":" in text and "nccl" in text:
        parts = []
        for item in text.split(","):
            dev, _, name = item.partition(":")
            parts.append(f"{dev}:{NAME if name.strip() == 'nccl' else name}")
        return ",".join(parts)
    return backend


def install() -> None:
    """Register the backend and route a program's "nccl" to it (idempotent)."""
    global _installed
    if _installed or not dist.is_available():
        return
    _installed = True
    dist.Backend.register_backend(NAME, _create, devices=["cpu", "cuda"])
    dist.Backend.default_device_backend_map["cuda"] = NAME
    c10d = dist.distributed_c10d

    def wrap(name: str, position: int) -> None:
        real = getattr(c10d, name)

        def patched(*args: Any, **kwargs: Any) -> Any:
            asked = kwargs.get("backend", args[position] if len(args) > position else None)
            if "backend" in kwargs:
                kwargs["backend"] = backend = routed(kwargs["backend"])
            elif len(args) > position:
                backend = routed(args[position])
                args = (*args[:position], backend, *args[position + 1 :])
            else:
                backend = dist.Backend.default_device_backend_map.get("cuda")
            if backend == NAME:
                # ``device_id`` binds a group to a device for NCCL's eager connection and communicator splits; this
                # group is its own backend (PyTorch keeps a Python group as it is, with no per-device backends to
                # look up), and there is nothing to connect ahead
                kwargs.pop("device_id", None)
            group = real(*args, **kwargs)
            made = group if name == "new_group" else c10d._world.default_pg
            if asked is not None and made is not None:
                _asked[made] = str(asked).lower()
            return group

        patched.__wrapped__ = real  # type: ignore[attr-defined]
        patched.__name__ = real.__name__
        patched.__doc__ = real.__doc__
        for module in (c10d, dist):
            if getattr(module, name, None) is real:
                setattr(module, name, patched)

    wrap("init_process_group", 0)
    wrap("new_group", 2)
    real_get_backend = c10d.get_backend

    def get_backend(group: Any = None) -> Any:
        """The backend the program asked for ("nccl"), not the one that serves it; PyTorch's own code, which
        calls ``distributed_c10d.get_backend``, still sees "wooly" and takes no NCCL-only path."""
        found = real_get_backend(group)
        asked = _asked.get(group if group is not None else c10d._world.default_pg)
        if asked is not None:
            return dist.Backend(asked)
        return dist.Backend(str(found).replace(NAME, "nccl")) if NAME in str(found) else found

    get_backend.__wrapped__ = real_get_backend  # type: ignore[attr-defined]
    get_backend.__doc__ = real_get_backend.__doc__
    dist.get_backend = get_backend
