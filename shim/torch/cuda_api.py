"""``torch.cuda`` and ``torch.accelerator`` answered from the gpud session.

On the CPU build these functions raise or report "no CUDA"; they are replaced (module attributes,
before the script imports anything from them) by versions that ask the session: device facts
come from the hello reply (cached), memory statistics from gpud's tensor table, synchronisation
and events go through the same queue as the ops, so they are ordered after them.
"""

from __future__ import annotations

import os
import sys
import types
from typing import Any

import torch

from proto import aten as W
from proto import settings as config
from shim.torch import cuda_memory as M
from shim.torch import graphs as G
from shim.torch import stream as S
from shim.torch.cuda_memory import (
    empty_cache,
    max_memory_allocated,
    mem_get_info,
    memory_allocated,
    memory_stats,
    reset_peak_memory_stats,
)


def _devices() -> list[dict[str, Any]]:
    """The program's devices, ``cuda:0`` first (NOTE [devices of a program] in shim/runtime.py; an empty
    CUDA_VISIBLE_DEVICES hides them all)."""
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    if vis is not None and vis.strip() == "":
        return []
    from shim.runtime import visible

    conn = S.stream().driver.conn
    by_ordinal = {d["ordinal"]: d for d in conn.node_devices}
    return [by_ordinal[o] for o in visible() if o in by_ordinal] or list(conn.devices)


def _dev(device: Any = None) -> dict[str, Any]:
    idx = _index(device)
    devs = _devices()
    if not 0 <= idx < len(devs):
        raise RuntimeError(f"CUDA error: invalid device ordinal (device {idx}, {len(devs)} visible)")
    return devs[idx]


_index = S.index_of
_stream_of = S.stream_of


_absent: str | None = None  # why gpud is not there (said once), as CUDA without a driver says False


def is_available() -> bool:
    """True when gpud answers (the process's session opens now, at most WOOLY_PROBE_S when nothing listens)."""
    global _absent
    if not config.quiet_client().server or os.environ.get("CUDA_VISIBLE_DEVICES", "0").strip() == "":
        return False
    if _absent is not None:
        return False
    from proto.errors import CudaError
    from shim.runtime import driver

    try:
        driver()
        return True
    except CudaError as exc:
        _absent = str(exc)
        print(f"wooly: no CUDA device for this program: {exc.name}: {exc.message}", file=sys.stderr)
        return False


def device_count() -> int:
    """0 when there is no session (no gpud, or it refused the hello: a device it lacks), said once as
    ``is_available`` says it; CUDA without a driver counts none the same way."""
    if not is_available():
        return 0
    try:
        return len(_devices())
    except Exception:  # noqa: BLE001 - the connection went away since: no devices
        return 0


def get_device_name(device: Any = None) -> str:
    return str(_dev(device)["name"])


def get_device_capability(device: Any = None) -> tuple[int, int]:
    cc = _dev(device)["compute_capability"]
    return int(cc[0]), int(cc[1])


def _pci(text: str) -> tuple[int, int, int]:
    try:
        domain, bus, rest = text.split(":")
        return int(domain, 16), int(bus, 16), int(rest.split(".")[0], 16)
    except ValueError:
        return 0, 0, 0


class DeviceProperties:
    def __init__(self, d: dict[str, Any]) -> None:
        self.name = d["name"]
        self.total_memory = int(d["total_mem"])
        self.major, self.minor = (int(x) for x in d["compute_capability"])
        attrs = d.get("attributes") or {}
        self.multi_processor_count = int(attrs.get(16, 1))
        self.is_integrated = False
        self.is_multi_gpu_board = False
        self.uuid = d.get("uuid", "")
        self.L2_cache_size = int(attrs.get(38, 0))
        self.warp_size = 32
        self.gcnArchName = "NVIDIA"
        self.max_threads_per_multi_processor = int(attrs.get(39, 2048))
        self.regs_per_multiprocessor = 65536
        self.clock_rate = int(attrs.get(13, 0))
        self.memory_clock_rate = int(attrs.get(36, 0))
        self.memory_bus_width = int(attrs.get(37, 0))
        self.shared_memory_per_block = int(attrs.get(8, 49152))
        self.shared_memory_per_multiprocessor = int(attrs.get(81, 0))
        # where the device sits ("dddd:bb:dd.f"): which of gpud's devices this session runs on
        domain, bus, dev = _pci(str(d.get("pci_bus_id", "")))
        self.pci_domain_id, self.pci_bus_id, self.pci_device_id = domain, bus, dev

    def __repr__(self) -> str:
        return (
            f"_CudaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
            f"total_memory={self.total_memory // (1 << 20)}MB, multi_processor_count={self.multi_processor_count}, "
            f"uuid={self.uuid})"
        )


def _lazy_init() -> None:
    S.INITIALIZED[0] = True


def is_initialized() -> bool:
    return S.INITIALIZED[0]


def get_device_properties(device: Any = None) -> DeviceProperties:
    _lazy_init()
    props = DeviceProperties(_dev(device))
    props.total_memory = mem_get_info(device)[1]  # the virtual GPU's size (a tenant quota), as mem_get_info says
    return props


def synchronize(device: Any = None) -> None:
    _lazy_init()
    _stream_of(device).call([W.OP_SYNC, [], {}, []], "synchronize")


def manual_seed(seed: int) -> None:
    S.seed(int(seed))
    _state["initial_seed"] = int(seed) & ((1 << 64) - 1)


def seed() -> None:
    import random

    s = random.getrandbits(63)
    S.seed(s)
    _state["initial_seed"] = s


_state: dict[str, Any] = {"initial_seed": 67280421310721}


def initial_seed() -> int:
    return int(_state["initial_seed"])


def get_rng_state(device: Any = None) -> torch.Tensor:
    """CUDA's 16 bytes (seed, offset): NOTE [rng state] in gpud/aten_exec.py."""
    value, _ = _stream_of(device).call([W.OP_GET_RNG, [], {}, []], "get_rng_state")
    return torch.frombuffer(bytearray(value), dtype=torch.uint8).clone()


def set_rng_state(new_state: torch.Tensor, device: Any = None) -> None:
    data = bytes(new_state.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    _stream_of(device).push([W.OP_SET_RNG, [data], {}, []])


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(states: list[torch.Tensor]) -> None:
    for i, st in enumerate(states):
        set_rng_state(st, i)


def current_device() -> int:
    _lazy_init()
    return S.current_device()


def set_device(device: Any) -> None:
    """The calling thread's current device, kept by the C++ device guard (NOTE [a cuda device in a CPU build])."""
    _lazy_init()
    idx = _index(device)
    if idx < 0:
        return
    if idx:
        _dev(idx)  # CUDA refuses an ordinal it lacks at once
    if S.GUARD["active"]:
        torch._C._accelerator_setDeviceIndex(idx)


class device:  # noqa: N801 - torch.cuda.device
    def __init__(self, device: Any) -> None:
        self.idx = -1 if device is None else _index(device)
        self.prev = -1

    def __enter__(self) -> None:
        if self.idx >= 0:
            self.prev = current_device()
            set_device(self.idx)

    def __exit__(self, *exc: Any) -> None:
        if self.prev >= 0:
            set_device(self.prev)


device_of = device


class Event:
    def __init__(
        self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False, external: bool = False
    ) -> None:
        _lazy_init()
        st = self._st = S.stream(S.current_device())  # an event belongs to the device current at its creation
        self._drv = st.driver
        self.enable_timing = enable_timing
        # CU_EVENT_DISABLE_TIMING = 2
        self._h = st.driver_call(self._drv.event_create, 0 if enable_timing else 2)
        self.recorded = False

    @property
    def device(self) -> torch.device:
        return torch.device("cuda", self._st.device)

    def record(self, stream: Any = None) -> None:
        self._st.driver_call(self._drv.event_record, self._h, 0)
        self.recorded = True

    def wait(self, stream: Any = None) -> None:
        """A stream of another device waits for this event: its session waits for this one's work (a round
        trip); on the same device nothing is needed, gpud runs a session's work in order."""
        target = stream.device_index if stream is not None else S.current_device()
        if target != self._st.device and self.recorded:
            self.synchronize()

    def query(self) -> bool:
        return bool(self._st.driver_call(self._drv.event_query, self._h))

    def synchronize(self) -> None:
        self._st.driver_call(self._drv.event_synchronize, self._h)

    def elapsed_time(self, end_event: Event) -> float:
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("CUDA error: both events must be created with enable_timing=True")
        if end_event._st is not self._st:
            raise RuntimeError("CUDA error: invalid resource handle (the two events are on different devices)")
        st = self._st
        st.driver_call(self._drv.event_synchronize, end_event._h)
        return float(st.driver_call(self._drv.event_elapsed_time, self._h, end_event._h))

    def __del__(self) -> None:
        try:
            if S.current() is not None and self._drv.conn.alive:
                self._drv.event_destroy(self._h)
        except Exception:  # noqa: BLE001
            pass


class Stream:
    """A stream object; gpud runs a session's ops in order, so every stream is the default one."""

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
        _lazy_init()
        self.device = torch.device("cuda", _index(device))
        self.priority = priority
        self.cuda_stream = 0
        self.stream_id = 0
        self.device_index = self.device.index
        self.device_type = 1

    def synchronize(self) -> None:
        synchronize(self.device_index)

    def is_capturing(self) -> bool:
        return False

    def query(self) -> bool:
        synchronize(self.device_index)
        return True

    def wait_event(self, event: Event) -> None:
        event.wait(self)

    def wait_stream(self, stream: Any) -> None:
        """Work queued here after this call runs after ``stream``'s: the same device's is in order already;
        another device's is waited for now (its session synchronised)."""
        other = getattr(stream, "device_index", None)
        if other is not None and other != self.device_index:
            synchronize(other)

    def record_event(self, event: Event | None = None) -> Event:
        event = event or Event()
        event.record(self)
        return event

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream) and other.device_index == self.device_index

    def __hash__(self) -> int:
        return self.device_index

    def __repr__(self) -> str:
        return f"<torch.cuda.Stream device={self.device} cuda_stream=0x0>"


_DEFAULT_STREAMS: dict[int, Stream] = {}


def current_stream(device: Any = None) -> Stream:
    idx = _index(device)
    st = _DEFAULT_STREAMS.get(idx)
    if st is None:
        st = _DEFAULT_STREAMS[idx] = Stream(idx)
    return st


default_stream = current_stream


class _StreamContext:
    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def __enter__(self) -> Any:
        return self.stream

    def __exit__(self, *exc: Any) -> None:
        pass


def stream(stream: Any) -> _StreamContext:
    return _StreamContext(stream)


def set_stream(stream: Any) -> None:
    pass


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


_CUDA = {
    "is_available": is_available,
    "device_count": device_count,
    "get_device_name": get_device_name,
    "get_device_capability": get_device_capability,
    "get_device_properties": get_device_properties,
    "synchronize": synchronize,
    **M.TABLE,
    "manual_seed": manual_seed,
    "manual_seed_all": manual_seed,
    "seed": seed,
    "seed_all": seed,
    "initial_seed": initial_seed,
    "get_rng_state": get_rng_state,
    "set_rng_state": set_rng_state,
    "get_rng_state_all": get_rng_state_all,
    "set_rng_state_all": set_rng_state_all,
    "current_device": current_device,
    "set_device": set_device,
    "device": device,
    "device_of": device_of,
    "Event": Event,
    "Stream": Stream,
    "current_stream": current_stream,
    "default_stream": default_stream,
    "stream": stream,
    "set_stream": set_stream,
    "is_current_stream_capturing": G.is_current_stream_capturing,
    "is_initialized": is_initialized,
    "init": _lazy_init,
    "_lazy_init": _lazy_init,
    "is_bf16_supported": lambda including_emulation=True: True,
    "ipc_collect": _noop,
    "get_arch_list": lambda: ["sm_80", "sm_90"],
    "get_device_properties_all": None,
    "_is_in_bad_fork": lambda: False,
}


def patch() -> None:
    cuda = torch.cuda
    for name, fn in _CUDA.items():
        if fn is not None:
            setattr(cuda, name, fn)
    for mod_name in ("torch.cuda.random", "torch.cuda.memory", "torch.cuda.graphs"):
        mod = sys.modules.get(mod_name)
        if mod is not None:
            for name, fn in _CUDA.items():
                if fn is not None and hasattr(mod, name):
                    setattr(mod, name, fn)
    _patch_accelerator()
    _patch_cudnn()
    _patch_comm()


def _patch_accelerator() -> None:
    acc = getattr(torch, "accelerator", None)
    if acc is None:
        return
    table = {
        "is_available": is_available,
        "device_count": device_count,
        "current_accelerator": lambda check_available=False: torch.device("cuda") if is_available() else None,
        "current_device_index": current_device,
        "current_device_idx": current_device,
        "set_device_index": set_device,
        "set_device_idx": set_device,
        "synchronize": synchronize,
        "current_stream": current_stream,
        "set_stream": set_stream,
        "device_index": device,
        "get_device_capability": lambda device=None: {"major": get_device_capability(device)[0]},
        "empty_cache": empty_cache,
        "memory_allocated": memory_allocated,
        "max_memory_allocated": max_memory_allocated,
        "memory_reserved": memory_allocated,
        "max_memory_reserved": max_memory_allocated,
        "memory_stats": memory_stats,
        "reset_peak_memory_stats": reset_peak_memory_stats,
        "reset_accumulated_memory_stats": _noop,
        "get_memory_info": mem_get_info,
    }
    mods = [acc] + [m for m in (getattr(acc, "memory", None),) if isinstance(m, types.ModuleType)]
    for mod in mods:
        for name, fn in table.items():
            if hasattr(mod, name) or mod is acc:
                setattr(mod, name, fn)


def _patch_cudnn() -> None:
    cudnn = torch.backends.cudnn
    cudnn.is_available = lambda: True
    cudnn.version = lambda: 90100
    # No cuDNN kernels run on this side: C++ composites pick their native paths (gpud runs them),
    # and nn.RNN's flatten_parameters skips its cuDNN weight layout (without a warning).
    cudnn.is_acceptable = lambda tensor: False


# ---------------------------------------------------------------------- several devices: torch.cuda.comm
# NOTE [devices of a program] (shim/runtime.py): nn.DataParallel and torch.cuda.comm move tensors between the
# program's devices. Their C++ versions copy with the CUDA runtime (absent here) or NCCL (gpud has no NCCL between
# sessions), so they are answered here: a copy to another device goes through the client, and a group of tensors
# travels as one flat buffer per dtype (one download, one upload), as the CUDA version coalesces its copies.
def _to_dev(t: torch.Tensor, dev: int) -> torch.Tensor:
    return t if getattr(t, "_d", None) == dev and t.device.type == "cuda" else t.to(torch.device("cuda", dev))


def _dev_index(d: Any) -> int:
    from torch._utils import _get_device_index

    return _get_device_index(d, True)


def comm_broadcast(tensor: torch.Tensor, devices: Any = None, *, out: Any = None) -> tuple[torch.Tensor, ...]:
    if (devices is None) == (out is None):
        raise RuntimeError(
            f"Exactly one of 'devices' and 'out' must be specified, but got devices={devices} and out={out}"
        )
    if out is not None:
        for o in out:
            o.copy_(tensor)
        return tuple(out)
    return tuple(_to_dev(tensor, _dev_index(d)) for d in devices)


def comm_broadcast_coalesced(tensors: Any, devices: Any, buffer_size: int = 10485760) -> list[tuple[torch.Tensor, ...]]:
    from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

    devs = [_dev_index(d) for d in devices]
    tensors = list(tensors)
    for t in tensors:
        if getattr(t, "_d", -1) != devs[0]:
            raise RuntimeError(f"all tensors must be on devices[0]: {devs[0]}")
    outs: list[tuple[torch.Tensor, ...]] = [tuple(tensors)]
    groups: dict[Any, list[int]] = {}
    for i, t in enumerate(tensors):
        groups.setdefault((t.dtype, t.is_sparse), []).append(i)
    for d in devs[1:]:
        row: list[Any] = [None] * len(tensors)
        for (_, sparse), idx in groups.items():
            if sparse:
                for i in idx:
                    row[i] = tensors[i].to(torch.device("cuda", d))
                continue
            with torch.no_grad():
                flat = _flatten_dense_tensors([tensors[i] for i in idx]).to(torch.device("cuda", d))
                for i, part in zip(idx, _unflatten_dense_tensors(flat, [tensors[i] for i in idx]), strict=True):
                    row[i] = part
        outs.append(tuple(row))
    return outs


def comm_scatter(
    tensor: torch.Tensor,
    devices: Any = None,
    chunk_sizes: Any = None,
    dim: int = 0,
    streams: Any = None,
    *,
    out: Any = None,
) -> tuple[torch.Tensor, ...]:
    if out is not None:
        sizes = [o.size(dim) for o in out]
        for o, part in zip(out, tensor.split(sizes, dim), strict=True):
            o.copy_(part)
        return tuple(out)
    devs = [_dev_index(d) for d in devices]
    if chunk_sizes is None:
        parts = tensor.chunk(len(devs), dim)
    else:
        if sum(chunk_sizes) != tensor.size(dim):
            raise RuntimeError(
                f"Chunk sizes must sum to the source tensor's size along dim {dim}: {list(chunk_sizes)} vs {tensor.size(dim)}"
            )
        parts = tensor.split(list(chunk_sizes), dim)
    return tuple(_to_dev(p.contiguous(), d) for p, d in zip(parts, devs, strict=False))


def comm_gather(tensors: Any, dim: int = 0, destination: Any = None, *, out: Any = None) -> torch.Tensor:
    if out is not None:
        out.copy_(torch.cat([t.to(out.device) for t in tensors], dim))
        return out
    if destination == -1 or (isinstance(destination, (str, torch.device)) and torch.device(destination).type == "cpu"):
        return torch.cat([t.cpu() for t in tensors], dim)
    dest = S.current_device() if destination is None else _dev_index(destination)
    return torch.cat([_to_dev(t, dest) for t in tensors], dim)


def _patch_comm() -> None:
    import torch.nn.parallel.comm as comm

    table = {
        "broadcast": comm_broadcast,
        "broadcast_coalesced": comm_broadcast_coalesced,
        "scatter": comm_scatter,
        "gather": comm_gather,
    }
    mods = [comm] + [m for m in (sys.modules.get("torch.cuda.comm"),) if m is not None]
    for mod in mods:
        for name, fn in table.items():
            setattr(mod, name, fn)
    nccl = sys.modules.get("torch.cuda.nccl")
    if nccl is not None:  # a CUDA build has NCCL: it would run on this side, on tensors that are gpud's
        setattr(nccl, "is_available", lambda tensors: False)  # noqa: B010
