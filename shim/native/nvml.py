"""NVML (libnvidia-ml.so.1) answered from the remote device, so pynvml and tools see the gpud device.

Device handles are small non-NULL integers; every query reads the session's device description
(the hello reply) or asks gpud (memory in use). Clocks, temperature and power of a remote or CPU
device are not observable here: those queries answer NVML_ERROR_NOT_SUPPORTED, as NVML does for
GPUs without the sensor.
"""

from __future__ import annotations

import ctypes
import os
from ctypes import c_int, c_uint, c_void_p
from typing import Any

from shim.driver import DRIVER_VERSION
from shim.native.registry import NvmlError, api, put_i32, put_str, put_u32

P = c_void_p
SUCCESS, UNINITIALIZED, INVALID_ARGUMENT, NOT_SUPPORTED, NOT_FOUND, INSUFFICIENT_SIZE = 0, 1, 2, 3, 6, 7
DRIVER_NOT_LOADED, ARG_VERSION_MISMATCH = 9, 25
HANDLE_BASE = 0x4E564D00  # device i -> HANDLE_BASE + i
DRIVER_VERSION_STRING = f"{DRIVER_VERSION // 1000}.{DRIVER_VERSION % 1000 // 10}.0-wooly"

_state = {"inits": 0}


def _driver() -> Any:
    if _state["inits"] <= 0:
        raise NvmlError(UNINITIALIZED, "nvmlInit has not been called")
    from shim import runtime

    return runtime.driver()


def _devices() -> list[dict[str, Any]]:
    """The program's devices in its own order (NOTE [devices of a program] in shim/runtime.py), as CUDA counts them."""
    from shim import runtime

    _driver()
    return [runtime.device_info(i) for i in range(len(runtime.visible()))]


def _device(handle: int | None) -> tuple[int, dict[str, Any]]:
    from shim import runtime

    _driver()
    i = int(handle or 0) - HANDLE_BASE
    if not 0 <= i < len(runtime.visible()):
        raise NvmlError(INVALID_ARGUMENT, "invalid device handle")
    return i, runtime.device_info(i)


def _out(addr: int | None) -> int:
    if not addr:
        raise NvmlError(INVALID_ARGUMENT, "output pointer is NULL")
    return int(addr)


# ---------------------------------------------------------------------------- init and system
def _init() -> None:
    from shim import runtime

    try:
        runtime.driver()
    except Exception as exc:  # noqa: BLE001 - no gpud: the "driver" is not loaded
        raise NvmlError(DRIVER_NOT_LOADED, str(exc)) from None
    _state["inits"] += 1


for _name in ("nvmlInit", "nvmlInit_v2"):
    api(_name, 0, library="nvml")(_init)


@api("nvmlInitWithFlags", 0, c_uint, library="nvml")
def nvmlInitWithFlags(flags: int) -> None:
    _init()


@api("nvmlShutdown", 0, library="nvml")
def nvmlShutdown() -> None:
    if _state["inits"] <= 0:
        raise NvmlError(UNINITIALIZED)
    _state["inits"] -= 1


@api("nvmlSystemGetDriverVersion", 0, P, c_uint, library="nvml")
def nvmlSystemGetDriverVersion(buf: int, length: int) -> None:
    _driver()
    if length < len(DRIVER_VERSION_STRING) + 1:
        raise NvmlError(INSUFFICIENT_SIZE)
    put_str(_out(buf), length, DRIVER_VERSION_STRING)


@api("nvmlSystemGetNVMLVersion", 0, P, c_uint, library="nvml")
def nvmlSystemGetNVMLVersion(buf: int, length: int) -> None:
    put_str(_out(buf), length, f"{DRIVER_VERSION // 1000}.{DRIVER_VERSION % 1000 // 10}")


for _name in ("nvmlSystemGetCudaDriverVersion", "nvmlSystemGetCudaDriverVersion_v2"):
    api(_name, 0, P, library="nvml")(lambda out: put_i32(_out(out), DRIVER_VERSION))


@api("nvmlSystemGetProcessName", 0, c_uint, P, c_uint, library="nvml")
def nvmlSystemGetProcessName(pid: int, buf: int, length: int) -> None:
    try:
        with open(f"/proc/{pid}/comm") as f:
            put_str(_out(buf), length, f.read().strip())
    except OSError:
        raise NvmlError(NOT_FOUND) from None


# ---------------------------------------------------------------------------- device identity
def _count(out: int) -> None:
    put_u32(_out(out), len(_devices()))


def _by_index(index: int, out: int) -> None:
    if not 0 <= index < len(_devices()):
        raise NvmlError(INVALID_ARGUMENT, f"no device {index}")
    ctypes.c_void_p.from_address(_out(out)).value = HANDLE_BASE + index


for _name in ("nvmlDeviceGetCount", "nvmlDeviceGetCount_v2"):
    api(_name, 0, P, library="nvml")(_count)
for _name in ("nvmlDeviceGetHandleByIndex", "nvmlDeviceGetHandleByIndex_v2"):
    api(_name, 0, c_uint, P, library="nvml")(_by_index)


@api("nvmlDeviceGetHandleByUUID", 0, ctypes.c_char_p, P, library="nvml")
def nvmlDeviceGetHandleByUUID(uuid: bytes, out: int) -> None:
    want = (uuid or b"").decode().removeprefix("GPU-")
    for i, d in enumerate(_devices()):
        if d["uuid"] == want:
            ctypes.c_void_p.from_address(_out(out)).value = HANDLE_BASE + i
            return
    raise NvmlError(NOT_FOUND)


def _bus_id(i: int, d: dict[str, Any]) -> str:
    return str(d.get("pci_bus_id") or f"0000:00:{i:02x}.0")


def _by_pci(bus: bytes, out: int) -> None:
    want = (bus or b"").decode().lower()
    for i, d in enumerate(_devices()):
        if _bus_id(i, d).lower().endswith(want.lstrip("0") if want.startswith("0000") else want):
            ctypes.c_void_p.from_address(_out(out)).value = HANDLE_BASE + i
            return
    raise NvmlError(NOT_FOUND)


for _name in ("nvmlDeviceGetHandleByPciBusId", "nvmlDeviceGetHandleByPciBusId_v2"):
    api(_name, 0, ctypes.c_char_p, P, library="nvml")(_by_pci)


@api("nvmlDeviceGetName", 0, P, P, c_uint, library="nvml")
def nvmlDeviceGetName(handle: int | None, buf: int, length: int) -> None:
    put_str(_out(buf), length, _device(handle)[1]["name"])


@api("nvmlDeviceGetUUID", 0, P, P, c_uint, library="nvml")
def nvmlDeviceGetUUID(handle: int | None, buf: int, length: int) -> None:
    put_str(_out(buf), length, "GPU-" + _device(handle)[1]["uuid"])


@api("nvmlDeviceGetSerial", 0, P, P, c_uint, library="nvml")
def nvmlDeviceGetSerial(handle: int | None, buf: int, length: int) -> None:
    put_str(_out(buf), length, _device(handle)[1]["uuid"].replace("-", "")[:13])


@api("nvmlDeviceGetIndex", 0, P, P, library="nvml")
def nvmlDeviceGetIndex(handle: int | None, out: int) -> None:
    put_u32(_out(out), _device(handle)[0])


@api("nvmlDeviceGetMinorNumber", 0, P, P, library="nvml")
def nvmlDeviceGetMinorNumber(handle: int | None, out: int) -> None:
    put_u32(_out(out), _device(handle)[0])


@api("nvmlDeviceGetCudaComputeCapability", 0, P, P, P, library="nvml")
def nvmlDeviceGetCudaComputeCapability(handle: int | None, major: int, minor: int) -> None:
    cc = _device(handle)[1]["compute_capability"]
    put_i32(_out(major), int(cc[0]))
    put_i32(_out(minor), int(cc[1]))


def _pci(handle: int | None, out: int) -> None:
    i, d = _device(handle)
    bus = _bus_id(i, d)
    dom, b, rest = (bus.split(":") + ["0", "0", "0.0"])[:3]
    devno = rest.split(".")[0]
    # nvmlPciInfo_t: busIdLegacy[16], domain, bus, device, pciDeviceId, pciSubSystemId, busId[32]
    raw = bytearray(16 + 5 * 4 + 32)
    legacy = bus.encode()[:15]
    raw[: len(legacy)] = legacy
    for k, v in enumerate((int(dom, 16), int(b, 16), int(devno, 16), 0x20B010DE, 0)):
        raw[16 + 4 * k : 20 + 4 * k] = int(v).to_bytes(4, "little")
    raw[36 : 36 + min(len(bus), 31)] = bus.encode()[:31]
    ctypes.memmove(_out(out), bytes(raw), len(raw))


for _name in ("nvmlDeviceGetPciInfo", "nvmlDeviceGetPciInfo_v2", "nvmlDeviceGetPciInfo_v3"):
    api(_name, 0, P, P, library="nvml")(_pci)


@api("nvmlDeviceGetBrand", 0, P, P, library="nvml")
def nvmlDeviceGetBrand(handle: int | None, out: int) -> None:
    _device(handle)
    put_i32(_out(out), 0)  # NVML_BRAND_UNKNOWN


@api("nvmlDeviceGetArchitecture", 0, P, P, library="nvml")
def nvmlDeviceGetArchitecture(handle: int | None, out: int) -> None:
    major = int(_device(handle)[1]["compute_capability"][0])
    put_u32(_out(out), {7: 5, 8: 7, 9: 8, 10: 10}.get(major, 0xFFFFFFFF))  # Turing/Ampere/Hopper/Blackwell


# ---------------------------------------------------------------------------- memory and utilization
def _memory(handle: int | None) -> tuple[int, int, int]:
    """(total, free, used) as the device's session sees it (its tenant's quota); a device the program has not used
    yet gets its session now."""
    from shim import runtime

    i, _ = _device(handle)
    try:
        free, total = runtime.device_driver(i).mem_get_info()
    except Exception as exc:  # noqa: BLE001 - gpud refused the session (quota of sessions, device gone)
        raise NvmlError(NOT_SUPPORTED, f"memory of device {i}: {exc}") from None
    return total, free, total - free


@api("nvmlDeviceGetMemoryInfo", 0, P, P, library="nvml")
def nvmlDeviceGetMemoryInfo(handle: int | None, out: int) -> None:
    (ctypes.c_uint64 * 3).from_address(_out(out))[:] = list(_memory(handle))


@api("nvmlDeviceGetMemoryInfo_v2", 0, P, P, library="nvml")
def nvmlDeviceGetMemoryInfo_v2(handle: int | None, out: int) -> None:
    _device(handle)
    version = ctypes.c_uint32.from_address(_out(out)).value
    if version >> 24 != 2:
        raise NvmlError(ARG_VERSION_MISMATCH)
    total, free, used = _memory(handle)
    (ctypes.c_uint64 * 4).from_address(out + 8)[:] = [total, 0, free, used]


@api("nvmlDeviceGetBAR1MemoryInfo", 0, P, P, library="nvml")
def nvmlDeviceGetBAR1MemoryInfo(handle: int | None, out: int) -> None:
    total, free, used = _memory(handle)
    (ctypes.c_uint64 * 3).from_address(_out(out))[:] = [total, free, used]


@api("nvmlDeviceGetUtilizationRates", 0, P, P, library="nvml")
def nvmlDeviceGetUtilizationRates(handle: int | None, out: int) -> None:
    total, _free, used = _memory(handle)
    (ctypes.c_uint32 * 2).from_address(_out(out))[:] = [0, (100 * used // total) if total else 0]


def _no_processes(handle: int | None, count: int | None, infos: int | None) -> None:
    _device(handle)
    put_u32(_out(count), 0)


for _name in (
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetComputeRunningProcesses_v2",
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetGraphicsRunningProcesses",
    "nvmlDeviceGetGraphicsRunningProcesses_v2",
    "nvmlDeviceGetGraphicsRunningProcesses_v3",
):
    # Other tenants' processes are not visible to a client; report none.
    api(_name, 0, P, P, P, library="nvml")(_no_processes)


def _mode(value: int):  # noqa: ANN202
    def query(handle: int | None, out: int) -> None:
        _device(handle)
        put_i32(_out(out), value)

    return query


for _name, _value in (
    ("nvmlDeviceGetPersistenceMode", 1),
    ("nvmlDeviceGetComputeMode", 0),
    ("nvmlDeviceGetDisplayMode", 0),
    ("nvmlDeviceGetDisplayActive", 0),
    ("nvmlDeviceGetPerformanceState", 0),
    ("nvmlDeviceGetPowerState", 0),
    ("nvmlDeviceGetVirtualizationMode", 0),
    ("nvmlDeviceGetMultiGpuBoard", 0),
):
    api(_name, 0, P, P, library="nvml")(_mode(_value))


@api("nvmlDeviceGetMigMode", 0, P, P, P, library="nvml")
def nvmlDeviceGetMigMode(handle: int | None, current: int, pending: int) -> None:
    _device(handle)
    put_u32(_out(current), 0)
    put_u32(_out(pending), 0)


@api("nvmlDeviceGetNumGpuCores", 0, P, P, library="nvml")
def nvmlDeviceGetNumGpuCores(handle: int | None, out: int) -> None:
    attrs = _device(handle)[1]["attributes"]
    put_u32(_out(out), int(attrs.get(16, attrs.get("16", 1))) * 64)


_ = (c_int, os)
