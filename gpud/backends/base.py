"""The backend contract.

A backend is one device of one vendor. Public methods validate their arguments and turn every
failure into a ``CudaError``; the private hooks (``_alloc``, ``_copyin`` ...) do the vendor work
and may raise anything. gpud's session layer has already checked that addresses belong to the
calling session, so hooks only see ranges inside live allocations.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from gpud.errors import CudaError, codes
from proto import launch as rules
from proto.messages import DeviceInfo

F = TypeVar("F", bound=Callable[..., Any])


def wrap_errors(default_code: int) -> Callable[[F], F]:
    """Decorator for public backend methods: any non-CUDA exception becomes ``default_code``."""

    def deco(fn: F) -> F:
        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except CudaError:
                raise
            except MemoryError as exc:
                raise CudaError(codes.OUT_OF_MEMORY, f"{fn.__name__}: host memory exhausted: {exc}") from None
            except Exception as exc:  # noqa: BLE001 - the contract is "everything becomes a CUDA error"
                raise CudaError(default_code, f"{fn.__name__}: {type(exc).__name__}: {exc}") from None

        return inner  # type: ignore[return-value]

    return deco


@dataclass
class Allocation:
    addr: int
    size: int
    backing: Any = None  # whatever keeps the memory alive (mmap, device pointer object ...)
    alias: Any = None  # NOTE [device memory aliases]: set once a torch tensor maps these pages (gpud/aten_alias.py)


@dataclass
class ParamInfo:
    size: int
    align: int
    offset: int


@dataclass
class Function:
    name: str
    params: list[ParamInfo]
    attributes: dict[str, int] = field(default_factory=dict)
    native: Any = None
    module: Any = None  # the Module it came from, where a session keeps it (NOTE [migration])


@dataclass
class Module:
    functions: dict[str, Any]
    globals: dict[str, tuple[int, int]]  # name -> (addr, size)
    native: Any = None
    kernel_names: list[str] = field(default_factory=list)


@dataclass
class LaunchResult:
    printf: str = ""


class Backend(ABC):
    kind: ClassVar[str] = "base"
    # Capabilities, declared by each backend so that nothing outside backends/ asks which vendor it is.
    # ``host_memory``: device memory is host memory of gpud's own process (the CPU backend): its pages may be
    # mapped into other ranges (dedup's shared copy-on-write pages, mapped host memory) and discarded or
    # faulted in place (sleep and wake: ``discard_pages``, ``populate_pages``).
    host_memory: ClassVar[bool] = False

    def torch_device(self) -> str:
        """The device gpud's torch computes ATen ops on for this backend (the PyTorch face)."""
        return f"cuda:{self.ordinal}"  # NVIDIA (CUDA build) and AMD (ROCm build) alike

    def discard_pages(self, addr: int, size: int) -> None:  # noqa: B027 - optional hook
        """Give a range's device pages back while keeping its addresses (a tenant going to sleep). Default: keep
        them (a CUDA backend would unmap and remap VMM pages)."""

    def populate_pages(self, addr: int, size: int) -> None:  # noqa: B027 - optional hook
        """Make a range's pages present before a bulk copy into it (a tenant waking). Default: nothing to do."""

    def __init__(self, ordinal: int = 0) -> None:
        self.ordinal = ordinal

    # ------------------------------------------------------------- public contract
    @abstractmethod
    def info(self) -> DeviceInfo: ...

    @property
    def total_memory(self) -> int:
        return self.info().total_mem

    @wrap_errors(codes.OUT_OF_MEMORY)
    def alloc(self, size: int, arena: Any = None, at: int | None = None) -> Allocation:
        """``size`` bytes of device memory; inside ``arena`` (a session's reserved range, NOTE [session arenas]) when
        given, at exactly ``at`` when that is given too (a session moving in keeps its addresses)."""
        if size <= 0:
            raise CudaError(codes.INVALID_VALUE, f"allocation size must be > 0, got {size}")
        if arena is None:
            return self._alloc(size)
        return self._alloc_in(arena, size, at)

    def new_arena(self, base: int | None = None) -> Any:
        """A session's own range of device addresses (NOTE [session arenas]), at ``base`` when given; None where the
        backend cannot place allocations (they then go wherever the driver puts them, and the session cannot move
        to another node with its pointers)."""
        return None

    def _alloc_in(self, arena: Any, size: int, at: int | None) -> Allocation:
        raise CudaError(codes.NOT_SUPPORTED, f"the {self.kind} backend has no session arenas")

    @wrap_errors(codes.INVALID_VALUE)
    def free(self, allocation: Allocation) -> None:
        self._free(allocation)

    @wrap_errors(codes.ILLEGAL_ADDRESS)
    def copyin(self, addr: int, data: memoryview | bytes) -> None:
        self._copyin(addr, data)

    @wrap_errors(codes.ILLEGAL_ADDRESS)
    def copyout(self, addr: int, size: int) -> bytearray:
        return self._copyout(addr, size)

    @wrap_errors(codes.ILLEGAL_ADDRESS)
    def copyout_into(self, addr: int, size: int, dest_addr: int) -> None:
        """Copy device memory into host memory at ``dest_addr`` (a shared-memory staging area)."""
        self._copyout_into(addr, size, dest_addr)

    @wrap_errors(codes.ILLEGAL_ADDRESS)
    def copyin_from(self, addr: int, size: int, src_addr: int) -> None:
        self._copyin_from(addr, size, src_addr)

    @wrap_errors(codes.ILLEGAL_ADDRESS)
    def copy(self, dst: int, src: int, size: int) -> None:
        self._copy(dst, src, size)

    @wrap_errors(codes.ILLEGAL_ADDRESS)
    def memset(self, addr: int, value: int, elem_size: int, count: int) -> None:
        if elem_size not in (1, 2, 4):
            raise CudaError(codes.INVALID_VALUE, f"memset element size must be 1, 2 or 4, got {elem_size}")
        self._memset(addr, value, elem_size, count)

    @wrap_errors(codes.ILLEGAL_ADDRESS)
    def gemm(self, g: Any) -> None:
        """A checked proto BlasGemm (NOTE [vendor libraries], gpud/blas.py), in stream order."""
        self._gemm(g)

    def _gemm(self, g: Any) -> None:
        raise CudaError(codes.NOT_SUPPORTED, f"cuBLAS calls are not supported by the {self.kind} backend yet")

    @wrap_errors(codes.ILLEGAL_ADDRESS)
    def geam(self, g: Any) -> None:
        """A checked proto BlasGeam (gpud/blas.py), in stream order."""
        self._geam(g)

    def _geam(self, g: Any) -> None:
        raise CudaError(codes.NOT_SUPPORTED, f"cuBLAS calls are not supported by the {self.kind} backend yet")

    @wrap_errors(codes.ILLEGAL_ADDRESS)
    def blas_vector(self, v: Any) -> None:
        """A checked proto BlasVector (cuBLAS level 1, gpud/blas.py), in stream order."""
        self._blas_vector(v)

    def _blas_vector(self, v: Any) -> None:
        raise CudaError(codes.NOT_SUPPORTED, f"cuBLAS calls are not supported by the {self.kind} backend yet")

    @wrap_errors(codes.ILLEGAL_ADDRESS)
    def blas_matrix(self, g: Any) -> None:
        """A checked proto BlasMatrix (cuBLAS level 2, gpud/blas.py), in stream order."""
        self._blas_matrix(g)

    def _blas_matrix(self, g: Any) -> None:
        raise CudaError(codes.NOT_SUPPORTED, f"cuBLAS calls are not supported by the {self.kind} backend yet")

    @wrap_errors(codes.ILLEGAL_ADDRESS)
    def spmv(self, s: Any) -> None:
        """A checked proto SparseMv (cuSPARSE SpMV, gpud/sparse.py), in stream order."""
        self._spmv(s)

    def _spmv(self, s: Any) -> None:
        raise CudaError(codes.NOT_SUPPORTED, f"cuSPARSE calls are not supported by the {self.kind} backend yet")

    @wrap_errors(codes.ILLEGAL_ADDRESS)
    def sparse_convert(self, s: Any) -> None:
        """A proto SparseIndices, SparseTranspose, SparseSort or SparseGather (cuSPARSE's conversions,
        gpud/sparse.py), in stream order."""
        self._sparse_convert(s)

    def _sparse_convert(self, s: Any) -> None:
        raise CudaError(codes.NOT_SUPPORTED, f"cuSPARSE calls are not supported by the {self.kind} backend yet")

    @wrap_errors(codes.ILLEGAL_ADDRESS)
    def sparse_counted(self, s: Any) -> int:
        """A proto SparseGemm, SparseGeam, SparseFromDense or SparseCompress (cuSPARSE's operations whose result's
        size is data, gpud/sparse.py), in stream order: the result's nnz."""
        return self._sparse_counted(s)

    def _sparse_counted(self, s: Any) -> int:
        raise CudaError(codes.NOT_SUPPORTED, f"cuSPARSE calls are not supported by the {self.kind} backend yet")

    @wrap_errors(codes.ILLEGAL_ADDRESS)
    def rand(self, r: Any) -> None:
        """A checked proto RandGenerate (proto/rand.py), in stream order."""
        self._rand(r)

    def _rand(self, r: Any) -> None:
        raise CudaError(codes.NOT_SUPPORTED, f"cuRAND calls are not supported by the {self.kind} backend yet")

    @wrap_errors(codes.ILLEGAL_ADDRESS)
    def fft(self, f: Any) -> None:
        """A checked proto FftExec (NOTE [vendor libraries], gpud/fft.py), in stream order."""
        self._fft(f)

    def _fft(self, f: Any) -> None:
        raise CudaError(codes.NOT_SUPPORTED, f"cuFFT calls are not supported by the {self.kind} backend yet")

    @wrap_errors(codes.ILLEGAL_ADDRESS)
    def solve(self, s: Any) -> None:
        """A checked proto SolverCall (gpud/solver.py), in stream order."""
        self._solve(s)

    def _solve(self, s: Any) -> None:
        raise CudaError(codes.NOT_SUPPORTED, f"cuSOLVER calls are not supported by the {self.kind} backend yet")

    @wrap_errors(codes.INVALID_IMAGE)
    def load_module(self, image: bytes, fmt: str) -> Module:
        return self._load_module(image, fmt)

    @wrap_errors(codes.INVALID_VALUE)
    def unload_module(self, module: Module) -> None:
        self._unload_module(module)

    @wrap_errors(codes.NOT_FOUND)
    def get_function(self, module: Module, name: str) -> Function:
        return self._get_function(module, name)

    @wrap_errors(codes.LAUNCH_FAILED)
    def launch(
        self,
        function: Function,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_mem: int,
        params: bytes,
        allowed_ranges: Sequence[tuple[int, int]] | None = None,
        cooperative: bool = False,
        deadline_s: float | None = None,
        cancel: Any = None,
        share: Any = None,
    ) -> LaunchResult:
        """Run a kernel to completion. ``allowed_ranges``: the (start, size) regions the launching
        session may touch, for backends that check kernel memory accesses (NOTE [bounds check]).
        ``cooperative``: a cooperative launch (cuLaunchCooperativeKernel: all blocks resident, grid sync).
        ``deadline_s``, ``cancel`` (a token from ``new_cancel``): backends that can stop a running kernel stop it
        after that long, or when the token is cancelled, with CUDA_ERROR_LAUNCH_TIMEOUT (NOTE [watchdog] in
        jit/watchdog.py); the others run it to its end. ``share`` (from ``new_share``): run on that tenant's part
        of the device (NOTE [spatial sharing] in jit/cores.py)."""
        # The device's limits (proto/launch.py), whatever the client checked: dynamic shared memory up to the
        # device's opt-in bound (the client enforces cuFuncSetAttribute, the driver API's contract).
        dev = self.info().attributes
        static = int(function.attributes.get("shared_size_bytes", 0))
        rules.check(
            f"launch of {function.name}",
            dev,
            grid,
            block,
            shared_mem,
            max_threads=function.attributes.get("max_threads_per_block"),
            static_shared=static,
            dynamic_shared=rules.optin_shared_limit(dev, static),
            params=len(params),
            cooperative=cooperative,
        )
        stop = {"deadline_s": deadline_s, "cancel": cancel} if (deadline_s or cancel is not None) else {}
        if share is not None:
            stop["share"] = share
        if cooperative:  # the client checked occupancy; gpud still bounds what it runs at once (one thread a block)
            return self._launch(function, grid, block, shared_mem, params, allowed_ranges, cooperative=True, **stop)
        return self._launch(function, grid, block, shared_mem, params, allowed_ranges, **stop)

    #: whether ``new_share`` divides this device between tenants at run time (NOTE [spatial sharing])
    divides_cores: ClassVar[bool] = False

    def new_share(self, tenant: str, weight: float, priority: int, aging_s: float) -> Any:
        """The tenant's claim on a device this backend divides between tenants at run time (NOTE [spatial
        sharing] in jit/cores.py), or None where it cannot (the scheduler then time-slices)."""
        return None

    def new_cancel(self) -> Any:
        """A token that stops the launches given it (``cancel``), or None where kernels cannot be stopped."""
        return None

    def cancel(self, token: Any, why: str) -> None:  # noqa: B027 - optional hook
        """Stop the running launches of ``token`` and fail later ones, saying ``why``."""

    def synchronize(self) -> None:  # noqa: B027 - optional hook
        """Wait for work the vendor runtime still runs asynchronously (none on the CPU)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the device."""

    # ------------------------------------------------------------- vendor hooks
    @abstractmethod
    def _alloc(self, size: int) -> Allocation: ...

    @abstractmethod
    def _free(self, allocation: Allocation) -> None: ...

    @abstractmethod
    def _copyin(self, addr: int, data: memoryview | bytes) -> None: ...

    @abstractmethod
    def _copyout(self, addr: int, size: int) -> bytearray: ...

    @abstractmethod
    def _copyout_into(self, addr: int, size: int, dest_addr: int) -> None: ...

    @abstractmethod
    def _copyin_from(self, addr: int, size: int, src_addr: int) -> None: ...

    @abstractmethod
    def _copy(self, dst: int, src: int, size: int) -> None: ...

    @abstractmethod
    def _memset(self, addr: int, value: int, elem_size: int, count: int) -> None: ...

    def _load_module(self, image: bytes, fmt: str) -> Module:
        raise CudaError(codes.NOT_SUPPORTED, f"module loading ({fmt}) is not supported by the {self.kind} backend")

    def _unload_module(self, module: Module) -> None:
        return None

    def _get_function(self, module: Module, name: str) -> Function:
        raise CudaError(codes.NOT_FOUND, f"named symbol not found: {name}")

    def _launch(
        self,
        function: Function,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_mem: int,
        params: bytes,
        allowed_ranges: Sequence[tuple[int, int]] | None = None,
        cooperative: bool = False,
    ) -> LaunchResult:
        raise CudaError(codes.NOT_SUPPORTED, f"cuLaunchKernel is not supported by the {self.kind} backend")
