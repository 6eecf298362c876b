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
    """The session's view: its one device (NOTE [session devices] in gpud/server.py; CUDA_VISIBLE_DEVICES chose it
    at hello, and an empty one hides it)."""
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    if vis is not None and vis.strip() == "":
        return []
    return list(S.stream().driver.devices)


def _dev(device: Any = None) -> dict[str, Any]:
    idx = _index(device)
    devs = _devices()
    if not 0 <= idx < len(devs):
        raise RuntimeError(f"CUDA error: invalid device ordinal (device {idx}, {len(devs)} visible)")
    return devs[idx]


def _index(device: Any) -> int:
    if device is None:
        return 0
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        return device.index or 0
    return int(getattr(device, "idx", 0) or 0)


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


def get_device_properties(device: Any = None) -> DeviceProperties:
    props = DeviceProperties(_dev(device))
    props.total_memory = mem_get_info(device)[1]  # the virtual GPU's size (a tenant quota), as mem_get_info says
    return props


def synchronize(device: Any = None) -> None:
    S.stream().call([W.OP_SYNC, [], {}, []], "synchronize")


def manual_seed(seed: int) -> None:
    S.seed(int(seed))


def seed() -> None:
    import random

    s = random.getrandbits(63)
    S.seed(s)
    _state["initial_seed"] = s


_state: dict[str, Any] = {"device": 0, "initial_seed": 67280421310721}


def initial_seed() -> int:
    return int(_state["initial_seed"])


def get_rng_state(device: Any = None) -> torch.Tensor:
    value, _ = S.stream().call([W.OP_GET_RNG, [], {}, []], "get_rng_state")
    return torch.frombuffer(bytearray(value), dtype=torch.uint8).clone()


def set_rng_state(new_state: torch.Tensor, device: Any = None) -> None:
    data = bytes(new_state.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    S.stream().push([W.OP_SET_RNG, [data], {}, []])


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state()]


def set_rng_state_all(states: list[torch.Tensor]) -> None:
    if states:
        set_rng_state(states[0])


def current_device() -> int:
    return int(_state["device"])


def set_device(device: Any) -> None:
    idx = _index(device)
    if idx < 0:
        return
    _state["device"] = idx


class device:  # noqa: N801 - torch.cuda.device
    def __init__(self, device: Any) -> None:
        self.idx = _index(device)
        self.prev = 0

    def __enter__(self) -> None:
        self.prev = _state["device"]
        _state["device"] = self.idx

    def __exit__(self, *exc: Any) -> None:
        _state["device"] = self.prev


device_of = device


class Event:
    def __init__(
        self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False, external: bool = False
    ) -> None:
        st = S.stream()
        self._drv = st.driver
        self.enable_timing = enable_timing
        # CU_EVENT_DISABLE_TIMING = 2
        self._h = st.driver_call(self._drv.event_create, 0 if enable_timing else 2)
        self.recorded = False

    def record(self, stream: Any = None) -> None:
        S.stream().driver_call(self._drv.event_record, self._h, 0)
        self.recorded = True

    def wait(self, stream: Any = None) -> None:
        pass  # one in-order stream on gpud: waiting is implied

    def query(self) -> bool:
        return bool(S.stream().driver_call(self._drv.event_query, self._h))

    def synchronize(self) -> None:
        S.stream().driver_call(self._drv.event_synchronize, self._h)

    def elapsed_time(self, end_event: Event) -> float:
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("CUDA error: both events must be created with enable_timing=True")
        st = S.stream()
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
        self.device = torch.device("cuda", _index(device))
        self.priority = priority
        self.cuda_stream = 0
        self.stream_id = 0
        self.device_index = self.device.index
        self.device_type = 1

    def synchronize(self) -> None:
        synchronize()

    def is_capturing(self) -> bool:
        return False

    def query(self) -> bool:
        synchronize()
        return True

    def wait_event(self, event: Event) -> None:
        pass

    def wait_stream(self, stream: Any) -> None:
        pass

    def record_event(self, event: Event | None = None) -> Event:
        event = event or Event()
        event.record(self)
        return event

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream)

    def __hash__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return f"<torch.cuda.Stream device={self.device} cuda_stream=0x0>"


_DEFAULT_STREAM: Stream | None = None


def current_stream(device: Any = None) -> Stream:
    global _DEFAULT_STREAM
    if _DEFAULT_STREAM is None:
        _DEFAULT_STREAM = Stream()
    return _DEFAULT_STREAM


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
    "is_initialized": lambda: True,
    "init": _noop,
    "_lazy_init": _noop,
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
