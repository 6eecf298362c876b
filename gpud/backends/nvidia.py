"""The NVIDIA backend: the node's own CUDA driver through cuda-bindings.

Kernels arrive as PTX and go to the driver as they are (its JIT compiles them for the GPU), except that texture and
surface statements become calls of the JIT's PTX texture library (NOTE [textures]); the
kernelParams layout the client needs comes from parsing the PTX ``.entry`` declarations. Device
memory is real device memory, so copies stage through host buffers. Each operation runs to
completion on the calling stream worker (gpud's StreamEngine provides CUDA stream semantics across
workers), keeping one code path for every backend.

Checked on hardware only when a GPU is present (tests/gpu); on a machine without one, ``available()``
returns no devices and gpud falls back to the CPU backend.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

from gpud.backends.base import Allocation, Backend, Function, LaunchResult, Module, ParamInfo
from gpud.errors import CudaError
from proto.messages import DeviceInfo

_ATTR_MAX = 144


def _cu() -> Any:
    from cuda.bindings import driver

    return driver


def _check(result: Any, what: str) -> Any:
    """cuda-bindings returns (CUresult, value...): raise on error, return the value(s)."""
    err, *rest = result if isinstance(result, tuple) else (result,)
    code = int(err)
    if code != 0:
        raise CudaError(code, f"{what} failed on the node's GPU")
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else tuple(rest)


def entry_layouts(ptx: bytes) -> dict[str, tuple[list[ParamInfo], int]]:
    """Kernel name -> (param layout, buffer size), from the PTX .entry declarations."""
    from jit.ptx import ast as A
    from jit.ptx.parser import parse

    out: dict[str, tuple[list[ParamInfo], int]] = {}
    for fn in parse(ptx).functions:
        if not fn.is_entry:
            continue
        off, params = 0, []
        for p in fn.params:
            elem = A.type_bytes(p.type)
            count = 1
            for d in p.dims:
                count *= d
            align = p.align or elem
            off = (off + align - 1) // align * align
            params.append(ParamInfo(size=elem * count, align=align, offset=off))
            off += elem * count
        out[fn.name] = (params, off)
    return out


class NvidiaBackend(Backend):
    kind = "nvidia"

    def __init__(self, ordinal: int = 0) -> None:
        super().__init__(ordinal)
        cu = _cu()
        _check(cu.cuInit(0), "cuInit")
        self._dev = _check(cu.cuDeviceGet(ordinal), "cuDeviceGet")
        self._ctx = _check(cu.cuDevicePrimaryCtxRetain(self._dev), "cuDevicePrimaryCtxRetain")
        self._local = threading.local()
        name = _check(cu.cuDeviceGetName(256, self._dev), "cuDeviceGetName")
        name = name.split(b"\0", 1)[0].decode() if isinstance(name, bytes) else str(name)
        total = int(_check(cu.cuDeviceTotalMem(self._dev), "cuDeviceTotalMem"))
        attrs: dict[int, int] = {}
        for a in range(1, _ATTR_MAX):
            try:
                attrs[a] = int(_check(cu.cuDeviceGetAttribute(cu.CUdevice_attribute(a), self._dev), "attr"))
            except (CudaError, ValueError):
                continue
        uuid = _check(cu.cuDeviceGetUuid(self._dev), "cuDeviceGetUuid")
        raw = bytes(uuid.bytes) if hasattr(uuid, "bytes") else b"\0" * 16
        h = raw.hex()
        self._info = DeviceInfo(
            ordinal=ordinal,
            backend="nvidia",
            name=name,
            uuid=f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}",
            total_mem=total,
            compute_capability=[attrs.get(75, 0), attrs.get(76, 0)],
            attributes=attrs,
            driver_version=int(_check(cu.cuDriverGetVersion(), "cuDriverGetVersion")),
        )

    def _bind(self) -> Any:
        cu = _cu()
        if getattr(self._local, "bound", False) is False:
            _check(cu.cuCtxSetCurrent(self._ctx), "cuCtxSetCurrent")
            self._local.bound = True
        return cu

    def info(self) -> DeviceInfo:
        return self._info

    def _alloc(self, size: int) -> Allocation:
        cu = self._bind()
        ptr = _check(cu.cuMemAlloc(size), "cuMemAlloc")
        return Allocation(addr=int(ptr), size=size, backing=ptr)

    def _free(self, allocation: Allocation) -> None:
        cu = self._bind()
        _check(cu.cuMemFree(allocation.backing), "cuMemFree")

    def _copyin(self, addr: int, data: memoryview | bytes) -> None:
        cu = self._bind()
        buf = bytes(data)
        _check(cu.cuMemcpyHtoD(addr, buf, len(buf)), "cuMemcpyHtoD")

    def _copyout(self, addr: int, size: int) -> bytearray:
        cu = self._bind()
        out = bytearray(size)
        _check(cu.cuMemcpyDtoH(out, addr, size), "cuMemcpyDtoH")
        return out

    def _copyout_into(self, addr: int, size: int, dest_addr: int) -> None:
        cu = self._bind()
        _check(cu.cuMemcpyDtoH(dest_addr, addr, size), "cuMemcpyDtoH")

    def _copyin_from(self, addr: int, size: int, src_addr: int) -> None:
        cu = self._bind()
        _check(cu.cuMemcpyHtoD(addr, src_addr, size), "cuMemcpyHtoD")

    def _copy(self, dst: int, src: int, size: int) -> None:
        cu = self._bind()
        _check(cu.cuMemcpyDtoD(dst, src, size), "cuMemcpyDtoD")

    def _memset(self, addr: int, value: int, elem_size: int, count: int) -> None:
        cu = self._bind()
        fn = {1: cu.cuMemsetD8, 2: cu.cuMemsetD16, 4: cu.cuMemsetD32}[elem_size]
        _check(fn(addr, value, count), f"cuMemsetD{8 * elem_size}")

    def _load_module(self, image: bytes, fmt: str) -> Module:
        cu = self._bind()
        data = bytes(image)
        if fmt == "ptx":
            # texture and surface objects are descriptors in the tenant's memory on every backend, the GPU's too:
            # the module's tex/suld/sust become calls of the PTX texture library (NOTE [textures], jit/texture.py)
            from jit import texture

            supplied = texture.supply(data.rstrip(b"\0"))
            data = (supplied if isinstance(supplied, bytes) else supplied.encode()) + b"\0"
        mod = _check(cu.cuModuleLoadData(data), "cuModuleLoadData")
        layouts = entry_layouts(data.rstrip(b"\0")) if fmt == "ptx" else {}
        return Module(functions={}, globals={}, native=(mod, layouts), kernel_names=list(layouts))

    def _unload_module(self, module: Module) -> None:
        cu = self._bind()
        _check(cu.cuModuleUnload(module.native[0]), "cuModuleUnload")

    def _get_function(self, module: Module, name: str) -> Function:
        cu = self._bind()
        mod, layouts = module.native
        fn = _check(cu.cuModuleGetFunction(mod, name.encode()), f"cuModuleGetFunction({name})")
        params, size = layouts.get(name, ([], 0))
        attr = cu.CUfunction_attribute
        attrs = {
            "max_threads_per_block": int(
                _check(cu.cuFuncGetAttribute(attr.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fn), "attr")
            ),
            "shared_size_bytes": int(
                _check(cu.cuFuncGetAttribute(attr.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn), "attr")
            ),
            "num_regs": int(_check(cu.cuFuncGetAttribute(attr.CU_FUNC_ATTRIBUTE_NUM_REGS, fn), "attr")),
            "param_buffer_size": size,
        }
        return Function(name=name, params=params, attributes=attrs, native=fn)

    def _launch(
        self,
        function,
        grid,
        block,
        shared_mem,
        params,
        allowed_ranges=None,
        cooperative=False,
        deadline_s=None,
        cancel=None,
        share=None,
    ) -> LaunchResult:
        # deadline_s/cancel: a CUDA kernel cannot be stopped from the host short of destroying its context; this
        # backend runs every kernel to its end (NOTE [watchdog] in jit/watchdog.py: the CPU backend's mechanism)
        cu = self._bind()
        size = ctypes.c_size_t(len(params))
        buf = ctypes.create_string_buffer(bytes(params), max(1, len(params)))
        if cooperative:  # cuLaunchCooperativeKernel takes no `extra`: one pointer per parameter, into the buffer
            ptrs = (ctypes.c_void_p * max(1, len(function.params)))(
                *(ctypes.addressof(buf) + p.offset for p in function.params)
            )
            _check(
                cu.cuLaunchCooperativeKernel(function.native, *grid, *block, shared_mem, 0, ctypes.addressof(ptrs)),
                f"cuLaunchCooperativeKernel({function.name})",
            )
            _check(cu.cuStreamSynchronize(0), f"{function.name}")
            return LaunchResult()
        # extra = {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END}
        extra = (ctypes.c_void_p * 5)(1, ctypes.addressof(buf), 2, ctypes.addressof(size), 0)
        _check(
            cu.cuLaunchKernel(function.native, *grid, *block, shared_mem, 0, 0, ctypes.addressof(extra)),
            f"cuLaunchKernel({function.name})",
        )
        _check(cu.cuStreamSynchronize(0), f"{function.name}")
        return LaunchResult()


def available() -> list[Backend]:
    """One backend per visible NVIDIA GPU, or [] without a driver."""
    try:
        cu = _cu()
        if int(cu.cuInit(0)[0]) != 0:
            return []
        count = int(_check(cu.cuDeviceGetCount(), "cuDeviceGetCount"))
    except Exception:  # noqa: BLE001 - no cuda-bindings, no driver, no device: all mean "none"
        return []
    return [NvidiaBackend(i) for i in range(count)]
