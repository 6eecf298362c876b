"""Driver API: modules, libraries, functions and kernels, their attributes, occupancy.

A CUlibrary is a module loaded context-independently; with one session per process the two are
the same thing, so a library handle is its module handle and a CUkernel is its CUfunction
(cuKernelGetFunction returns the handle unchanged). Launches live in cu_launch.
"""

from __future__ import annotations

import ctypes
import re
from ctypes import c_char_p, c_int, c_size_t, c_uint, c_void_p

from proto import errors as codes
from proto import launch as rules
from proto.errors import CudaError
from shim.driver import FunctionInfo
from shim.native import images
from shim.native.registry import api, put_i32, put_u32, put_u64
from shim.native.state import STATE

P = c_void_p

_functions: dict[tuple[int, str], FunctionInfo] = {}  # (module, name) -> function
_by_handle: dict[int, FunctionInfo] = {}
_overrides: dict[int, dict[int, int]] = {}  # function -> attribute overrides (cuFuncSetAttribute)
_names: dict[int, ctypes.Array] = {}  # function -> its name as a C string (cuFuncGetName)
_libraries: set[int] = set()
# cuLibraryGetKernel hands out a kernel without translating it (NOTE [lazy modules], jit/ptx/split.py: the
# CUDA runtime asks for every kernel it registered at start); the first use translates it.
_deferred: dict[int, tuple[int, str]] = {}  # kernel handle -> (library, name)
_deferred_by_key: dict[tuple[int, str], int] = {}
_globals: dict[int, list[int]] = {}  # module -> global addresses registered in STATE.global_ranges
_facts: dict[int, tuple[int, dict[str, int]]] = {}  # module -> (.const bytes, entry -> .maxnreg)
_targets: dict[int, int] = {}  # module -> the architecture its PTX targets (.target sm_75 -> 75)
# NOTE [devices of a program] (shim/runtime.py): a library is context-independent, and each device of the program
# is a session of its own, so a library used on a device other than the one it was loaded on is loaded there too
# (once, from its image) and its kernels and globals are that copy's there.
_images: dict[int, bytes] = {}  # library -> its image, for the devices it has not been loaded on yet
_copies: dict[tuple[int, int], int] = {}  # (library, device) -> the library's module on that device
_TARGET = re.compile(r"^\s*\.target\s+sm_(\d+)", re.M)

_CONST = re.compile(
    r"^\s*(?:\.(?:visible|weak)\s+)?\.const\s+(?:\.align\s+\d+\s+)?\.[a-z]+(\d+)\s+[\w$]+((?:\s*\[\s*\d+\s*\])*)", re.M
)
_ENTRY = re.compile(r"\.entry\s+([\w$]+)\s*\([^)]*\)\s*([^{]*)\{", re.S)
_MAXNREG = re.compile(r"\.maxnreg\s+(\d+)")

# CUfunction_attribute
MAX_THREADS, SHARED, CONST, LOCAL, REGS, PTX_VERSION, BINARY_VERSION, CACHE_CA, MAX_DYN_SHARED, CARVEOUT = range(10)


def ptx_facts(ptx: str) -> tuple[int, dict[str, int]]:
    """What the PTX text says that the backend's report may not: .const bytes, per-entry .maxnreg."""
    const = 0
    for bits, dims in _CONST.findall(ptx):
        n = 1
        for d in re.findall(r"\d+", dims):
            n *= int(d)
        const += max(int(bits) // 8, 1) * n
    maxnreg = {}
    for name, directives in _ENTRY.findall(ptx):
        m = _MAXNREG.search(directives)
        if m:
            maxnreg[name] = int(m.group(1))
    return const, maxnreg


def load(ptx: bytes, *, library: bool = False) -> int:
    """Load a module; a library (cuLibraryLoad*) is context-independent and needs no current context."""
    if not library:
        STATE.require_current()
    h = STATE.driver().module_load_data(ptx, "ptx")
    if library:
        _images[h] = ptx
    _facts[h] = ptx_facts(ptx.decode(errors="replace"))
    # a kernel's PTX_VERSION is its PTX's target, as on a GPU that JIT-compiles compute_75 PTX: CUB and
    # thrust check it against the architectures they were built for
    target = _TARGET.search(ptx[:65536].decode(errors="replace"))
    if target:
        _targets[h] = int(target.group(1))
    return h


def module(h: int | None) -> int:
    m = int(h or 0)
    if m not in STATE.driver_for(m).modules:
        raise CudaError(codes.INVALID_HANDLE, f"invalid module handle 0x{m:x}")
    return m


def here(m: int) -> int:
    """Module ``m``, or for a library loaded on another device, its copy on the current context's device."""
    drv = STATE.driver()
    if m not in _images or STATE.driver_for(m) is drv:
        return m
    copy = _copies.get((m, drv.index))
    if copy is None or copy not in drv.modules:
        copy = _copies[(m, drv.index)] = drv.module_load_data(_images[m], "ptx")
        _facts[copy] = _facts.get(m, (0, {}))
        if m in _targets:
            _targets[copy] = _targets[m]
    return copy


def function(h: int | None) -> FunctionInfo:
    info = _by_handle.get(int(h or 0))
    if int(h or 0) in _deferred:  # a library's kernel: its function on the current device (NOTE [devices ...])
        lib, name = _deferred[int(h or 0)]
        if lib not in _images or STATE.driver_for(lib) is STATE.driver():
            if info is None:
                info = _by_handle[int(h or 0)] = get_function(lib, name.encode())
        else:
            info = get_function(here(lib), name.encode())
    if info is None or info.module not in STATE.driver_for(info.module).modules:
        raise CudaError(codes.INVALID_HANDLE, f"invalid function handle 0x{int(h or 0):x}")
    return info


def get_function(mod: int | None, name: bytes | None) -> FunctionInfo:
    m = module(mod)
    if not name:
        raise CudaError(codes.INVALID_VALUE, "function name is NULL")
    key = (m, name.decode())
    info = _functions.get(key)
    if info is None:
        info = STATE.driver_for(m).module_get_function(m, key[1])
        _functions[key] = info
        _by_handle[info.handle] = info
    return info


def unload(mod: int | None) -> None:
    m = module(mod)
    for key in [k for k in _functions if k[0] == m]:
        _by_handle.pop(_functions.pop(key).handle, None)
    for h in [h for h, info in _by_handle.items() if info.module == m]:
        del _by_handle[h]
    for key in [k for k in _deferred_by_key if k[0] == m]:
        _deferred.pop(_deferred_by_key.pop(key), None)
    for addr in _globals.pop(m, []):
        STATE.global_ranges.pop(addr, None)
    _libraries.discard(m)
    _facts.pop(m, None)
    _targets.pop(m, None)
    _images.pop(m, None)
    for copy_key in [k for k in _copies if k[0] == m]:
        unload(_copies.pop(copy_key))
    STATE.driver_for(m).module_unload(m)


def get_global(out_ptr: int, out_size: int, mod: int | None, name: bytes | None) -> None:
    m = here(module(mod))
    if not name:
        raise CudaError(codes.INVALID_VALUE, "global name is NULL")
    addr, size = STATE.driver_for(m).module_get_global(m, name.decode())
    STATE.global_ranges[addr] = size
    _globals.setdefault(m, []).append(addr)
    if out_ptr:
        put_u64(out_ptr, addr)
    if out_size:
        put_u64(out_size, size)


def _device() -> dict:
    return STATE.driver().devices[0]["attributes"]


def attribute(info: FunctionInfo, attrib: int) -> int:
    over = _overrides.get(info.handle, {})
    if attrib in over:
        return over[attrib]
    a = info.attributes
    static = int(a.get("shared_size_bytes", 0))
    const, maxnreg = _facts.get(info.module, (0, {}))
    regs = int(a.get("num_regs", 32))
    table = {
        MAX_THREADS: int(a.get("max_threads_per_block", 1024)),
        SHARED: static,
        CONST: max(int(a.get("const_size_bytes", 0)), const),
        LOCAL: int(a.get("local_size_bytes", 0)),
        REGS: min(regs, maxnreg.get(info.name, regs)),
        PTX_VERSION: _targets.get(info.module, int(a.get("ptx_version", 80))),
        BINARY_VERSION: int(a.get("binary_version", 80)),
        CACHE_CA: 0,
        MAX_DYN_SHARED: rules.dynamic_shared_limit(_device(), static),
        CARVEOUT: -1,
        10: 0,
        11: 0,
        12: 0,
        13: 0,
        14: 0,
        15: 0,
    }
    if attrib not in table:
        raise CudaError(codes.INVALID_VALUE, f"unknown function attribute {attrib}")
    return table[attrib]


def set_attribute(info: FunctionInfo, attrib: int, value: int) -> None:
    if attrib == MAX_DYN_SHARED:
        limit = rules.optin_shared_limit(_device(), attribute(info, SHARED))
        if not 0 <= value <= limit:
            raise CudaError(codes.INVALID_VALUE, f"{info.name}: dynamic shared memory {value} exceeds {limit} bytes")
    elif attrib == CARVEOUT:
        if not -1 <= value <= 100:
            raise CudaError(codes.INVALID_VALUE, f"{info.name}: carveout {value} not in [-1, 100]")
    elif attrib not in (10, 11, 12, 13, 14, 15):
        raise CudaError(codes.INVALID_VALUE, f"function attribute {attrib} cannot be set")
    _overrides.setdefault(info.handle, {})[attrib] = int(value)


def _cname(info: FunctionInfo) -> int:
    buf = _names.get(info.handle)
    if buf is None:
        buf = _names[info.handle] = ctypes.create_string_buffer(info.name.encode())
    return ctypes.addressof(buf)


# ---------------------------------------------------------------------------- modules
@api("cuModuleLoadData", 2000, P, P)
def cuModuleLoadData(out: int, image: int | None) -> None:
    put_u64(out, load(images.read_image(image)))


@api("cuModuleLoadDataEx", 2010, P, P, c_uint, P, P)
def cuModuleLoadDataEx(out: int, image: int | None, n: int, opts: int | None, vals: int | None) -> None:
    cuModuleLoadData(out, image)


@api("cuModuleLoadFatBinary", 2000, P, P)
def cuModuleLoadFatBinary(out: int, image: int | None) -> None:
    cuModuleLoadData(out, image)


@api("cuModuleLoad", 2000, P, c_char_p)
def cuModuleLoad(out: int, path: bytes | None) -> None:
    put_u64(out, load(images.read_file(path)))


@api("cuModuleUnload", 2000, P)
def cuModuleUnload(mod: int | None) -> None:
    unload(mod)


@api("cuModuleGetFunction", 2000, P, P, c_char_p)
def cuModuleGetFunction(out: int, mod: int | None, name: bytes | None) -> None:
    put_u64(out, get_function(mod, name).handle)


@api("cuModuleGetGlobal", 3020, P, P, P, c_char_p)
def cuModuleGetGlobal(dptr: int, size: int, mod: int | None, name: bytes | None) -> None:
    get_global(dptr, size, mod, name)


@api("cuModuleGetLoadingMode", 11070, P)
def cuModuleGetLoadingMode(out: int) -> None:
    """Lazy unless CUDA_MODULE_LOADING=EAGER, as CUDA 12.2+: big modules are translated per kernel at first
    use (NOTE [lazy modules]), and the CUDA runtime then asks for kernels only when it launches them."""
    import os

    put_i32(out, 1 if os.environ.get("CUDA_MODULE_LOADING", "").upper() == "EAGER" else 2)


@api("cuModuleGetFunctionCount", 12040, P, P)
def cuModuleGetFunctionCount(out: int, mod: int | None) -> None:
    m = module(mod)
    put_u32(out, len(STATE.driver_for(m).modules[m].get("kernels", [])))


# ---------------------------------------------------------------------------- libraries and kernels
@api("cuLibraryLoadData", 12000, P, P, P, P, c_uint, P, P, c_uint)
def cuLibraryLoadData(out: int, code: int | None, *_options: object) -> None:
    h = load(images.read_image(code), library=True)
    _libraries.add(h)
    put_u64(out, h)


@api("cuLibraryLoadFromFile", 12000, P, c_char_p, P, P, c_uint, P, P, c_uint)
def cuLibraryLoadFromFile(out: int, path: bytes | None, *_options: object) -> None:
    h = load(images.read_file(path), library=True)
    _libraries.add(h)
    put_u64(out, h)


@api("cuLibraryUnload", 12000, P)
def cuLibraryUnload(lib: int | None) -> None:
    unload(lib)


@api("cuLibraryGetKernel", 12000, P, P, c_char_p)
def cuLibraryGetKernel(out: int, lib: int | None, name: bytes | None) -> None:
    m = module(lib)
    if not name:
        raise CudaError(codes.INVALID_VALUE, "kernel name is NULL")
    key = (m, name.decode())
    h = _deferred_by_key.get(key)
    if h is None:
        if key in _functions:  # asked for through the library's module already: that function is the kernel
            h = _functions[key].handle
        elif key[1] not in STATE.driver_for(m).modules[m].get("kernels", []):
            raise CudaError(codes.NOT_FOUND, f"named symbol not found: no kernel {key[1]} in library 0x{m:x}")
        else:
            h = STATE.driver_for(m)._new_id()
        _deferred_by_key[key] = h
        _deferred[h] = key  # a kernel is the library's on every device (function(), NOTE [devices of a program])
    put_u64(out, h)


@api("cuLibraryGetModule", 12000, P, P)
def cuLibraryGetModule(out: int, lib: int | None) -> None:
    put_u64(out, module(lib))


@api("cuLibraryGetGlobal", 12000, P, P, P, c_char_p)
def cuLibraryGetGlobal(dptr: int, size: int, lib: int | None, name: bytes | None) -> None:
    get_global(dptr, size, lib, name)


@api("cuKernelGetFunction", 12000, P, P)
def cuKernelGetFunction(out: int, kernel: int | None) -> None:
    put_u64(out, function(kernel).handle)


@api("cuKernelGetLibrary", 12050, P, P)
def cuKernelGetLibrary(out: int, kernel: int | None) -> None:
    k = int(kernel or 0)
    put_u64(out, _deferred[k][0] if k in _deferred and k not in _by_handle else function(kernel).module)


@api("cuKernelGetAttribute", 12000, P, c_int, P, c_int)
def cuKernelGetAttribute(out: int, attrib: int, kernel: int | None, dev: int) -> None:
    STATE.check_device(dev)
    put_i32(out, attribute(function(kernel), attrib))


@api("cuKernelSetAttribute", 12000, c_int, c_int, P, c_int)
def cuKernelSetAttribute(attrib: int, value: int, kernel: int | None, dev: int) -> None:
    STATE.check_device(dev)
    set_attribute(function(kernel), attrib, value)


@api("cuKernelSetCacheConfig", 12000, P, c_int, c_int)
def cuKernelSetCacheConfig(kernel: int | None, config: int, dev: int) -> None:
    function(kernel)


@api("cuKernelGetName", 12030, P, P)
def cuKernelGetName(out: int, kernel: int | None) -> None:
    ctypes.c_void_p.from_address(out).value = _cname(function(kernel))


@api("cuKernelGetParamInfo", 12040, P, c_size_t, P, P)
def cuKernelGetParamInfo(kernel: int | None, index: int, offset: int, size: int) -> None:
    cuFuncGetParamInfo(kernel, index, offset, size)


# ---------------------------------------------------------------------------- functions
@api("cuFuncGetAttribute", 2020, P, c_int, P)
def cuFuncGetAttribute(out: int, attrib: int, fn: int | None) -> None:
    put_i32(out, attribute(function(fn), attrib))


@api("cuFuncSetAttribute", 9000, P, c_int, c_int)
def cuFuncSetAttribute(fn: int | None, attrib: int, value: int) -> None:
    set_attribute(function(fn), attrib, value)


@api("cuFuncSetCacheConfig", 3000, P, c_int)
def cuFuncSetCacheConfig(fn: int | None, config: int) -> None:
    function(fn)


@api("cuFuncSetSharedMemConfig", 4020, P, c_int)
def cuFuncSetSharedMemConfig(fn: int | None, config: int) -> None:
    function(fn)


@api("cuFuncGetModule", 11000, P, P)
def cuFuncGetModule(out: int, fn: int | None) -> None:
    put_u64(out, function(fn).module)


@api("cuFuncGetName", 12030, P, P)
def cuFuncGetName(out: int, fn: int | None) -> None:
    ctypes.c_void_p.from_address(out).value = _cname(function(fn))


@api("cuFuncGetParamInfo", 12040, P, c_size_t, P, P)
def cuFuncGetParamInfo(fn: int | None, index: int, offset: int, size: int) -> None:
    info = function(fn)
    if not 0 <= index < len(info.params):
        raise CudaError(codes.INVALID_VALUE, f"{info.name} has {len(info.params)} parameters, no index {index}")
    psize, _align, poff = info.params[index]
    if offset:
        put_u64(offset, poff)
    if size:
        put_u64(size, psize)


@api("cuFuncIsLoaded", 12040, P, P)
def cuFuncIsLoaded(out: int, fn: int | None) -> None:
    function(fn)
    put_i32(out, 1)  # CU_FUNCTION_LOADING_STATE_LOADED


@api("cuFuncLoad", 12040, P)
def cuFuncLoad(fn: int | None) -> None:
    function(fn)


# ---------------------------------------------------------------------------- occupancy
def blocks_per_sm(info: FunctionInfo, block: int, dyn_smem: int) -> int:
    return rules.blocks_per_sm(_device(), block, attribute(info, MAX_THREADS), attribute(info, SHARED) + dyn_smem)


@api("cuOccupancyMaxActiveBlocksPerMultiprocessor", 6050, P, P, c_int, c_size_t)
def cuOccupancyMaxActiveBlocksPerMultiprocessor(out: int, fn: int | None, block: int, dyn: int) -> None:
    put_i32(out, blocks_per_sm(function(fn), block, dyn))


@api("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", 7000, P, P, c_int, c_size_t, c_uint)
def cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
    out: int, fn: int | None, block: int, dyn: int, flags: int
) -> None:
    put_i32(out, blocks_per_sm(function(fn), block, dyn))


SMEM_FOR_BLOCK = ctypes.CFUNCTYPE(c_size_t, c_int)


def _max_potential(min_grid: int, block_out: int, fn: int | None, cb: int | None, dyn: int, limit: int) -> None:
    info = function(fn)
    top = attribute(info, MAX_THREADS)
    if limit > 0:
        top = min(top, limit)
    size_of = SMEM_FOR_BLOCK(cb) if cb else None
    best, best_active = 32, -1
    for block in range(32, top + 1, 32):
        smem = int(size_of(block)) if size_of else dyn
        active = blocks_per_sm(info, block, smem) * block
        if active > best_active or (active == best_active and block > best):
            best, best_active = block, active
    sms = int(STATE.driver().devices[0]["attributes"].get(16, 1))
    smem = int(size_of(best)) if size_of else dyn
    put_i32(min_grid, max(1, blocks_per_sm(info, best, smem)) * sms)
    put_i32(block_out, best)


@api("cuOccupancyMaxPotentialBlockSize", 6050, P, P, P, P, c_size_t, c_int)
def cuOccupancyMaxPotentialBlockSize(
    min_grid: int, block: int, fn: int | None, cb: int | None, dyn: int, limit: int
) -> None:
    _max_potential(min_grid, block, fn, cb, dyn, limit)


@api("cuOccupancyMaxPotentialBlockSizeWithFlags", 7000, P, P, P, P, c_size_t, c_int, c_uint)
def cuOccupancyMaxPotentialBlockSizeWithFlags(
    min_grid: int, block: int, fn: int | None, cb: int | None, dyn: int, limit: int, flags: int
) -> None:
    _max_potential(min_grid, block, fn, cb, dyn, limit)


@api("cuOccupancyAvailableDynamicSMemPerBlock", 10020, P, P, c_int, c_int)
def cuOccupancyAvailableDynamicSMemPerBlock(out: int, fn: int | None, blocks: int, block: int) -> None:
    info = function(fn)
    blocks = max(1, blocks)
    device = _device()
    static = attribute(info, SHARED)
    per_block = rules.attr(device, rules.MAX_SHARED_PER_SM) // blocks - static
    put_u64(out, max(0, min(per_block, rules.optin_shared_limit(device, static))))
