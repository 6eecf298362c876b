"""Driver API: kernel launches (cuLaunchKernel, cuLaunchKernelEx, cooperative launches).

Launches are validated here as a real driver validates them (block and grid limits, shared
memory, parameters), then queued: the launch returns at once and its execution errors surface
at the next synchronizing call, sticky, as on a GPU. ``kernelParams`` is marshalled from the PTX
``.entry`` parameter layout: parameter *i* is ``size_i`` bytes read from ``kernelParams[i]``,
placed at ``offset_i`` of the parameter buffer; the ``extra`` form hands the buffer over whole.
"""

from __future__ import annotations

import ctypes
import struct
from ctypes import c_uint, c_void_p

from proto import errors as codes
from proto import launch as rules
from proto.errors import CudaError
from shim.driver import FunctionInfo
from shim.native import cu_capture, cu_module
from shim.native.registry import api
from shim.native.state import STATE

P = c_void_p

LAUNCH_PARAM_END, LAUNCH_PARAM_BUFFER_POINTER, LAUNCH_PARAM_BUFFER_SIZE = 0, 1, 2


def marshal(info: FunctionInfo, kernel_params: int | None, extra: int | None) -> bytes:
    """The parameter buffer of a launch, from ``kernelParams`` or from ``extra``."""
    if kernel_params and extra:
        raise CudaError(codes.INVALID_VALUE, f"{info.name}: both kernelParams and extra given")
    if kernel_params:
        ptrs = (c_void_p * len(info.params)).from_address(kernel_params)
        args = []
        for i, (size, _align, offset) in enumerate(info.params):
            if not ptrs[i]:
                raise CudaError(codes.INVALID_VALUE, f"{info.name}: kernelParams[{i}] (offset {offset}) is NULL")
            args.append(ctypes.string_at(int(ptrs[i] or 0), size))
        return info.pack_params(args)
    if extra:
        buf_ptr, buf_size = None, None
        i = 0
        while True:
            key = c_void_p.from_address(extra + 8 * i).value or 0
            if key == LAUNCH_PARAM_END:
                break
            value = c_void_p.from_address(extra + 8 * (i + 1)).value or 0
            if key == LAUNCH_PARAM_BUFFER_POINTER:
                buf_ptr = value
            elif key == LAUNCH_PARAM_BUFFER_SIZE:
                buf_size = ctypes.c_size_t.from_address(value).value if value else None
            else:
                raise CudaError(codes.INVALID_VALUE, f"{info.name}: unknown extra key {key}")
            i += 2
        if buf_ptr is None or buf_size is None:
            raise CudaError(codes.INVALID_VALUE, f"{info.name}: extra lacks CU_LAUNCH_PARAM_BUFFER_POINTER/SIZE")
        # A C struct of the parameters may carry trailing padding: at least the layout's size is needed.
        if buf_size < info.param_buffer_size or buf_size > rules.MAX_PARAM_BYTES:
            raise CudaError(
                codes.INVALID_VALUE,
                f"{info.name}: parameter buffer is {buf_size} bytes, the kernel takes {info.param_buffer_size}",
            )
        return ctypes.string_at(buf_ptr, info.param_buffer_size)
    if info.params:
        raise CudaError(codes.INVALID_VALUE, f"{info.name} takes {len(info.params)} parameters, none given")
    return b""


def validate(
    info: FunctionInfo,
    grid: tuple[int, ...],
    block: tuple[int, ...],
    shared: int,
    params: int,
    cooperative: bool = False,
) -> None:
    """The driver's checks (proto/launch.py), with this function's attributes as cuFuncSetAttribute left them."""
    device = STATE.driver_for(info.module).devices[0]["attributes"]
    threads = block[0] * block[1] * block[2]
    static = cu_module.attribute(info, cu_module.SHARED)
    max_threads = cu_module.attribute(info, cu_module.MAX_THREADS)
    fit = None
    if cooperative:  # a cooperative grid must fit on the device at once: occupancy x SM count blocks
        fit = rules.blocks_per_sm(device, threads, max_threads, static + shared) * max(
            1, rules.attr(device, rules.SM_COUNT)
        )
    rules.check(
        info.name,
        device,
        grid,
        block,
        shared,
        max_threads=max_threads,
        static_shared=static,
        dynamic_shared=cu_module.attribute(info, cu_module.MAX_DYN_SHARED),
        params=params,
        cooperative=cooperative,
        resident_blocks=fit,
    )


def launch(
    fn: int | None,
    grid: tuple[int, ...],
    block: tuple[int, ...],
    shared: int,
    stream: int | None,
    kernel_params: int | None,
    extra: int | None,
    cooperative: bool = False,
) -> None:
    STATE.require_current()
    info = cu_module.function(fn)
    params = marshal(info, kernel_params, extra)
    validate(info, grid, block, shared, len(params), cooperative)
    if cu_capture.captures and cu_capture.record(
        stream, cu_capture.KERNEL, (info, grid, block, shared, params, cooperative), cu_capture.issue_kernel
    ):
        return
    drv, s = STATE.driver_for(info.module), int(stream or 0)
    if s > 2 and STATE.driver_for(s) is not drv:  # a stream of another device (NOTE [devices of a program])
        raise CudaError(
            codes.INVALID_HANDLE,
            f"{info.name}: stream 0x{s:x} belongs to another device than the kernel's module (cuda:{drv.index})",
        )
    drv.launch_kernel(info, grid, block, params, shared_mem=shared, stream=s, cooperative=cooperative, checked=True)


@api("cuLaunchKernel", 4000, P, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, P, P, P)
def cuLaunchKernel(fn, gx, gy, gz, bx, by, bz, shared, stream, kernel_params, extra) -> None:  # noqa: ANN001
    launch(fn, (gx, gy, gz), (bx, by, bz), shared, stream, kernel_params, extra)


@api("cuLaunchCooperativeKernel", 9000, P, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, P, P)
def cuLaunchCooperativeKernel(fn, gx, gy, gz, bx, by, bz, shared, stream, kernel_params) -> None:  # noqa: ANN001
    launch(fn, (gx, gy, gz), (bx, by, bz), shared, stream, kernel_params, None, cooperative=True)


_CONFIG = struct.Struct("<7I4xQQI")  # CUlaunchConfig: grid[3], block[3], shared, stream, attrs, numAttrs
_ATTR_SIZE = 72  # CUlaunchAttribute: id (4) + pad (4) + value union (64)
_ATTR_COOPERATIVE, _ATTR_CLUSTER_DIMENSION = 2, 4


@api("cuLaunchKernelEx", 11060, P, P, P, P)
def cuLaunchKernelEx(config: int | None, fn: int | None, kernel_params: int | None, extra: int | None) -> None:
    if not config:
        raise CudaError(codes.INVALID_VALUE, "cuLaunchKernelEx: config is NULL")
    gx, gy, gz, bx, by, bz, shared, stream, attrs, nattrs = _CONFIG.unpack(ctypes.string_at(config, _CONFIG.size))
    cooperative = False
    for i in range(nattrs if attrs else 0):
        raw = ctypes.string_at(attrs + i * _ATTR_SIZE, _ATTR_SIZE)
        ident = struct.unpack_from("<i", raw)[0]
        if ident == _ATTR_CLUSTER_DIMENSION and struct.unpack_from("<3I", raw, 8) not in ((1, 1, 1), (0, 0, 0)):
            raise CudaError(codes.NOT_SUPPORTED, "cuLaunchKernelEx: thread block clusters are not supported")
        if ident == _ATTR_COOPERATIVE:
            cooperative = struct.unpack_from("<i", raw, 8)[0] != 0
    launch(fn, (gx, gy, gz), (bx, by, bz), shared, stream, kernel_params, extra, cooperative=cooperative)
