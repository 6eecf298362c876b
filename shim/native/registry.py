"""The table of Python implementations behind the native libcuda / libnvidia-ml, and the resolver.

NOTE [trampolines]: the C library (src/wooly_native.c) owns a pool of trampolines. When a program
asks ``cuGetProcAddress_v2("cuMemAlloc", &p, 3020, flags)`` (cuda-bindings fetches every entry
point this way) or calls an exported symbol such as ``cuMemAlloc_v2`` directly, the library asks
``resolve()`` here for the implementation of that (base name, version) and binds a trampoline to
it. A trampoline forwards its integer-class arguments to the ctypes callback registered with
``@api``; a missing implementation makes the trampoline return CUDA_ERROR_NOT_SUPPORTED and
report its name once. Versions: a base name may have several signatures over CUDA's history
(``cuMemAlloc`` v2000 took 32-bit pointers, v3020 64-bit); ``cuda_api.txt`` lists them, and an
implementation declares the signature versions it implements, so an old signature is never
answered by a newer implementation. Per-thread-default-stream variants (``_ptsz``/``_ptds``,
flag CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) map to the same implementation: treating the
per-thread default stream as the legacy one only synchronizes more.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import re
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from proto import errors as codes
from proto import settings as config
from proto.errors import CudaError

log = logging.getLogger("wooly.native")

RESOLVER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint64, ctypes.c_void_p)
REPORT = ctypes.CFUNCTYPE(None, ctypes.c_char_p)


class StatusError(Exception):
    """A failure with the library's own status code (``code``), returned as it is."""

    def __init__(self, code: int, message: str = "") -> None:
        self.code = code
        super().__init__(message or f"status {code}")


class NvmlError(StatusError):
    """An NVML failure: ``code`` is the nvmlReturn_t."""

    def __init__(self, code: int, message: str = "") -> None:
        super().__init__(code, message or f"NVML error {code}")


@dataclass(frozen=True)
class Library:
    """A vendor library the native library stands in for: its symbols' prefix and its own status codes (a failure
    inside one of its calls returns these, not a CUresult)."""

    prefix: str
    status: dict[int, int]  # CUresult of a CudaError -> the library's status
    failed: int  # the status of any other CudaError
    internal: int  # the status of an unexpected exception
    unsupported: str  # what an unsupported entry point is called in the one-line report


# NVML's failures are NVML_ERROR_INVALID_ARGUMENT whatever the cause (nvml.py raises NvmlError for the rest)
LIBRARIES = {
    "nvml": Library("nvml", {}, 2, 999, "NVML_ERROR_NOT_SUPPORTED"),
    "cublas": Library(
        "cublas",
        {
            codes.INVALID_VALUE: 7,
            codes.NOT_SUPPORTED: 15,
            codes.OUT_OF_MEMORY: 3,
            codes.INVALID_HANDLE: 1,
            codes.NOT_INITIALIZED: 1,
        },
        13,  # CUBLAS_STATUS_EXECUTION_FAILED
        14,  # CUBLAS_STATUS_INTERNAL_ERROR
        "CUBLAS_STATUS_NOT_SUPPORTED",
    ),
    "cufft": Library(
        "cufft",
        {
            codes.INVALID_VALUE: 4,  # CUFFT_INVALID_VALUE
            codes.NOT_SUPPORTED: 16,  # CUFFT_NOT_SUPPORTED
            codes.OUT_OF_MEMORY: 2,  # CUFFT_ALLOC_FAILED
            codes.INVALID_HANDLE: 1,  # CUFFT_INVALID_PLAN
            codes.NOT_INITIALIZED: 7,  # CUFFT_SETUP_FAILED
        },
        6,  # CUFFT_EXEC_FAILED
        5,  # CUFFT_INTERNAL_ERROR
        "CUFFT_NOT_SUPPORTED",
    ),
    "curand": Library(
        "curand",
        {
            codes.INVALID_VALUE: 104,  # CURAND_STATUS_OUT_OF_RANGE
            codes.NOT_SUPPORTED: 103,  # CURAND_STATUS_TYPE_ERROR
            codes.OUT_OF_MEMORY: 102,  # CURAND_STATUS_ALLOCATION_FAILED
            codes.INVALID_HANDLE: 101,  # CURAND_STATUS_NOT_INITIALIZED
            codes.NOT_INITIALIZED: 203,  # CURAND_STATUS_INITIALIZATION_FAILED
        },
        201,  # CURAND_STATUS_LAUNCH_FAILURE
        999,  # CURAND_STATUS_INTERNAL_ERROR
        "CURAND_STATUS_INTERNAL_ERROR (not supported)",
    ),
    "cusolver": Library(
        "cusolver",
        {
            codes.INVALID_VALUE: 3,  # CUSOLVER_STATUS_INVALID_VALUE
            codes.NOT_SUPPORTED: 9,  # CUSOLVER_STATUS_NOT_SUPPORTED
            codes.OUT_OF_MEMORY: 2,  # CUSOLVER_STATUS_ALLOC_FAILED
            codes.INVALID_HANDLE: 1,  # CUSOLVER_STATUS_NOT_INITIALIZED
            codes.NOT_INITIALIZED: 1,
        },
        6,  # CUSOLVER_STATUS_EXECUTION_FAILED
        7,  # CUSOLVER_STATUS_INTERNAL_ERROR
        "CUSOLVER_STATUS_NOT_SUPPORTED",
    ),
    "cusparse": Library(
        "cusparse",
        {
            codes.INVALID_VALUE: 3,  # CUSPARSE_STATUS_INVALID_VALUE
            codes.NOT_SUPPORTED: 10,  # CUSPARSE_STATUS_NOT_SUPPORTED
            codes.OUT_OF_MEMORY: 2,  # CUSPARSE_STATUS_ALLOC_FAILED
            codes.INVALID_HANDLE: 1,  # CUSPARSE_STATUS_NOT_INITIALIZED
            codes.NOT_INITIALIZED: 1,
        },
        6,  # CUSPARSE_STATUS_EXECUTION_FAILED
        7,  # CUSPARSE_STATUS_INTERNAL_ERROR
        "CUSPARSE_STATUS_NOT_SUPPORTED",
    ),
}
_PREFIXES = tuple(lib.prefix for lib in LIBRARIES.values())


def library_status(library: str, code: int) -> int:
    """The status a call of ``library`` returns for a CudaError with ``code``."""
    lib = LIBRARIES[library]
    return lib.status.get(code, lib.failed)


@dataclass
class Entry:
    name: str
    versions: tuple[int, ...]
    argtypes: tuple[Any, ...]
    func: Callable[..., Any]
    library: str = ""  # "" for the driver; else a key of LIBRARIES
    cfunc: Any = field(default=None, repr=False)

    def pointer(self) -> int:
        if self.cfunc is None:
            proto = ctypes.CFUNCTYPE(ctypes.c_int, *self.argtypes)
            self.cfunc = proto(_guard(self.name, self.func, self.library))
        return ctypes.cast(self.cfunc, ctypes.c_void_p).value or 0


_ENTRIES: dict[str, list[Entry]] = {}
_VERSIONS: dict[str, list[int]] = {}  # base name -> signature versions (plain, no ptsz)
_PTDS: dict[str, list[int]] = {}  # base name -> versions of its per-thread variants
_last: dict[int, tuple[int, str]] = {}  # thread id -> its last failure (not threading.local: see state.py)
_reported: set[str] = set()


def api(
    name: str, versions: int | tuple[int, ...], *argtypes: Any, library: str = ""
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``func`` as the implementation of ``name`` for the given signature version(s).

    For a vendor library (``library``: a key of ``LIBRARIES``), ``name`` is the exact exported symbol
    (``nvmlDeviceGetCount_v2``, ``cublasSgemm_v2``, ``cufftExecC2C``) and ``versions`` 0; its failures return the
    library's own status codes (``library_status``).
    """
    vs = (versions,) if isinstance(versions, int) else tuple(versions)
    if library and library not in LIBRARIES:
        raise ValueError(f"unknown library {library!r}")

    def deco(func: Callable[..., Any]) -> Callable[..., Any]:
        _ENTRIES.setdefault(name, []).append(Entry(name, vs, tuple(argtypes), func, library))
        return func

    return deco


def _guard(name: str, func: Callable[..., Any], library: str = "") -> Callable[..., int]:
    """Turn a Python implementation into a C callback: exceptions become result codes."""

    trace = config.quiet_client().trace_calls
    lib = LIBRARIES.get(library)

    @functools.wraps(func)
    def call(*args: Any) -> int:
        if trace:
            print(f"wooly: call {name}{tuple(hex(a) if isinstance(a, int) else a for a in args)}", file=sys.stderr)
        try:
            result = func(*args)
            if trace and result:
                print(f"wooly:   -> {result}", file=sys.stderr)
            return 0 if result is None else int(result)
        except CudaError as exc:
            if library == "nvml":
                return 2  # NVML_ERROR_INVALID_ARGUMENT
            set_last_error(exc.code, exc.message if exc.message.startswith(name) else f"{name}: {exc.message}")
            return exc.code if lib is None else lib.status.get(exc.code, lib.failed)
        except StatusError as exc:
            return exc.code
        except BaseException as exc:  # noqa: BLE001 - nothing may unwind into C
            log.exception("wooly: %s raised", name)
            if config.quiet_client().debug:
                print(f"wooly: {name} raised {type(exc).__name__}: {exc}", file=sys.stderr)
            set_last_error(codes.UNKNOWN, f"{name}: {type(exc).__name__}: {exc}")
            return 999 if lib is None else lib.internal  # CUDA_ERROR_UNKNOWN, NVML_ERROR_UNKNOWN: 999 both

    return call


_ALWAYS_SAID = {codes.NO_BINARY_FOR_GPU}  # a runtime on top shows only its own string for these: say why
_said: set[str] = set()


def set_last_error(code: int, message: str) -> None:
    """Remember the detail of the calling thread's last failure (cuGetErrorString shows it)."""
    _last[threading.get_ident()] = (code, message)
    if config.quiet_client().debug or (code in _ALWAYS_SAID and message not in _said):
        _said.add(message)
        print(f"wooly: {codes.error_name(code)}: {message}", file=sys.stderr)


def last_error() -> tuple[int, str] | None:
    return _last.get(threading.get_ident())


def _load_versions() -> None:
    if _VERSIONS:
        return
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cuda_api.txt")
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            parts = line.split()
            target = _PTDS if len(parts) > 2 else _VERSIONS
            target.setdefault(parts[0], []).append(int(parts[1]))


def known(base: str) -> bool:
    _load_versions()
    return base in _VERSIONS or base in _PTDS or base in _ENTRIES


def _signature_version(base: str, requested: int) -> int | None:
    """The plain signature version a request for ``requested`` means (newest not above it)."""
    plain = _VERSIONS.get(base, [])
    fitting = [v for v in plain if v <= requested]
    return max(fitting) if fitting else None


def _parse_symbol(symbol: str) -> tuple[str, int | None]:
    """Exported symbol name -> (base name, signature version): cuMemAlloc_v2 -> (cuMemAlloc, 3020)."""
    base = re.sub(r"_(ptsz|ptds)$", "", symbol)
    ptds = base != symbol
    m = re.match(r"^(\w+?)_v(\d+)$", base)
    k = 1
    if m and (m.group(1) in _VERSIONS or m.group(1) in _ENTRIES):
        base, k = m.group(1), int(m.group(2))
    plain = sorted(_VERSIONS.get(base, []))
    if ptds and not m:
        # cuMemcpyHtoDAsync_v2_ptsz is the per-thread form of the newest plain signature
        return base, (plain[-1] if plain else None)
    if not plain:
        return base, None
    return base, plain[min(k, len(plain)) - 1]


def lookup(symbol: str, version: int) -> tuple[int, Entry | None]:
    """(known?, implementation) for a request: 1/0/-1 as the C resolver returns."""
    _load_versions()
    if symbol.startswith(_PREFIXES):  # exact exported names, no signature versions
        entries = _ENTRIES.get(symbol)
        return (1, entries[0]) if entries else (0, None)
    if version < 0:
        base, sig = _parse_symbol(symbol)
    else:
        base, sig = symbol, _signature_version(symbol, version)
        if sig is None and symbol in _ENTRIES:  # a name newer than our table: take the newest impl
            sig = max(v for e in _ENTRIES[symbol] for v in e.versions)
    if not known(base):
        return -1, None
    for entry in _ENTRIES.get(base, []):
        if sig is not None and sig in entry.versions:
            return 1, entry
    return 0, None


@RESOLVER
def _resolve(name: bytes, version: int, flags: int, out: int) -> int:
    try:
        symbol = name.decode()
        status, entry = lookup(symbol, version)
        if entry is not None:
            ctypes.c_void_p.from_address(out).value = entry.pointer()
        return status
    except BaseException:  # noqa: BLE001 - never unwind into C
        log.exception("wooly: resolving %r failed", name)
        return 0


@REPORT
def _report(name: bytes) -> None:
    symbol = name.decode()
    if symbol in _reported:
        return
    _reported.add(symbol)
    set_last_error(codes.NOT_SUPPORTED, f"{symbol} is not supported by wooly")
    # cuGetExportTable hands out NVIDIA's private tables; its own libraries probe it and cope.
    if not config.quiet_client().quiet_unsupported and symbol != "cuGetExportTable":
        kind = next(
            (lib.unsupported for lib in LIBRARIES.values() if symbol.startswith(lib.prefix)), "CUDA_ERROR_NOT_SUPPORTED"
        )
        print(f"wooly: {kind}: {symbol}", file=sys.stderr)
    if config.quiet_client().trace_unsupported:
        import traceback

        traceback.print_stack(file=sys.stderr)


def unsupported_calls() -> list[str]:
    """Entry points the program called that have no implementation (each reported once)."""
    return sorted(_reported)


def implemented() -> list[str]:
    return sorted(_ENTRIES)


def register_with(lib: ctypes.CDLL) -> None:
    lib.wooly_register.argtypes = [RESOLVER, REPORT]
    lib.wooly_register.restype = None
    lib.wooly_register(_resolve, _report)


# ---------------------------------------------------------------------------- out-parameter helpers
def put_u64(addr: int | None, value: int) -> None:
    if not addr:
        raise CudaError(codes.INVALID_VALUE, "output pointer is NULL")
    ctypes.c_uint64.from_address(addr).value = value & 0xFFFFFFFFFFFFFFFF


def put_i32(addr: int | None, value: int) -> None:
    if not addr:
        raise CudaError(codes.INVALID_VALUE, "output pointer is NULL")
    ctypes.c_int32.from_address(addr).value = int(value)


def put_u32(addr: int | None, value: int) -> None:
    if not addr:
        raise CudaError(codes.INVALID_VALUE, "output pointer is NULL")
    ctypes.c_uint32.from_address(addr).value = int(value) & 0xFFFFFFFF


def put_f32(addr: int | None, value: float) -> None:
    if not addr:
        raise CudaError(codes.INVALID_VALUE, "output pointer is NULL")
    ctypes.c_float.from_address(addr).value = float(value)


def put_str(addr: int | None, length: int, text: str) -> None:
    """Copy a NUL-terminated string into a caller's buffer of ``length`` bytes."""
    if not addr:
        raise CudaError(codes.INVALID_VALUE, "output pointer is NULL")
    data = text.encode()[: max(int(length) - 1, 0)] + b"\0"
    ctypes.memmove(addr, data, len(data))
