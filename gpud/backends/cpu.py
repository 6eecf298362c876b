"""The CPU backend: device memory is host memory, kernels are PTX JIT-compiled to x86 (``jit``).

A device pointer is the host address of the allocation inside gpud, so JIT'd kernels dereference
pointers directly and copies are plain ``memmove`` calls (ctypes releases the GIL for them, so
copies on stream workers run beside gpud's I/O loop). The device presents itself as an
sm_80-class GPU so that client libraries choose their usual code paths.
"""

from __future__ import annotations

import atexit
import ctypes
import mmap
import os
import platform
import threading
import uuid
from typing import Any

import numpy as np

from gpud import vmem
from gpud.backends.base import Allocation, Backend, Function, LaunchResult, Module, ParamInfo
from gpud.errors import CudaError, codes
from jit.device import sm80_attributes
from proto.messages import DeviceInfo

_ALIGN = 256


def _host_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 16 << 30


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _warm_jit() -> None:
    try:
        import jit

        jit.warm_up()
    except Exception:  # noqa: BLE001 - warming is an optimisation; a real load reports real errors
        pass


_WARMING: list[threading.Thread] = []


def _start_warm_up() -> None:
    """Warm the JIT once per process, in the background. The thread is joined at exit: a daemon thread still
    inside LLVM's set-up while the interpreter finalises crashes the process (SIGSEGV after its output)."""
    if _WARMING:
        return
    t = threading.Thread(target=_warm_jit, name="gpud-jit-warmup", daemon=True)
    _WARMING.append(t)
    t.start()
    atexit.register(t.join, 60)


class CpuBackend(Backend):
    kind = "cpu"
    host_memory = True  # device memory is this process's own pages (see Backend)

    def torch_device(self) -> str:
        return "cpu"

    def discard_pages(self, addr: int, size: int) -> None:
        if addr % vmem.PAGE == 0:
            # Ranges end at a page boundary or at their allocation's end, whose last page is its own.
            vmem.remap_anonymous(addr, size)
        else:
            vmem.discard(addr, size)

    def populate_pages(self, addr: int, size: int) -> None:
        vmem.populate(addr, size)

    def __init__(
        self,
        ordinal: int = 0,
        memory_bytes: int | None = None,
        workers: int | None = None,
        bounds_check: bool = True,
        warm: bool = True,
    ) -> None:
        super().__init__(ordinal)
        # NOTE [bounds check]: with checks on, every global/generic access of a kernel is tested
        # against the launching session's regions, so a wild pointer becomes
        # CUDA_ERROR_ILLEGAL_ADDRESS (sticky for that session) instead of reading or corrupting
        # another tenant's memory or crashing gpud. Costs ~2-3x on memory-bound kernels.
        self.bounds_check = bounds_check
        # Start the JIT's compile worker and loader in the background, so the first module load
        # of a (re)started daemon does not pay for them; gpud answers clients meanwhile. A backend made only to
        # describe the device (`wooly devices`) passes warm=False.
        if warm:
            _start_warm_up()
        self.workers = workers or os.cpu_count() or 1
        self._total = memory_bytes or _host_memory_bytes()
        host = platform.node().encode()
        self._uuid = str(uuid.uuid5(uuid.NAMESPACE_OID, f"wooly-cpu-{host!r}-{ordinal}"))
        self._info = DeviceInfo(
            ordinal=ordinal,
            backend="cpu",
            name=f"wooly CPU ({_cpu_name()}, {self.workers} cores)",
            uuid=self._uuid,
            total_mem=self._total,
            compute_capability=[8, 0],
            attributes=sm80_attributes(self.workers),
            pci_bus_id=f"0000:00:{ordinal:02x}.0",
        )

    def info(self) -> DeviceInfo:
        return self._info

    # -------------------------------------------------------------- memory
    def _alloc(self, size: int) -> Allocation:
        # Anonymous mmap: page-aligned (exceeds cudaMalloc's 256-byte alignment), zero pages are
        # committed lazily, and the memory goes back to the OS on free.
        length = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE
        try:
            m = mmap.mmap(-1, length, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        except (OSError, ValueError) as exc:
            raise CudaError(codes.OUT_OF_MEMORY, f"cannot allocate {size} bytes: {exc}") from None
        buf = (ctypes.c_char * length).from_buffer(m)
        return Allocation(addr=ctypes.addressof(buf), size=size, backing=(m, buf))

    def new_arena(self, base: int | None = None) -> vmem.Arena:
        try:
            return vmem.Arena(base)
        except OSError as exc:
            raise CudaError(codes.OUT_OF_MEMORY, f"cannot reserve a session's address range: {exc.strerror}") from None

    def _alloc_in(self, arena: vmem.Arena, size: int, at: int | None) -> Allocation:
        try:
            addr = arena.alloc(size) if at is None else arena.alloc_at(at, size)
        except (OSError, MemoryError, ValueError) as exc:
            raise CudaError(codes.OUT_OF_MEMORY, f"cannot allocate {size} bytes: {exc}") from None
        return Allocation(addr=addr, size=size, backing=arena)

    def _free(self, allocation: Allocation) -> None:
        if isinstance(allocation.backing, vmem.Arena):
            allocation.backing.free(allocation.addr)
            allocation.backing = None
            return
        m, buf = allocation.backing
        del buf
        allocation.backing = None
        try:
            m.close()
        except BufferError:
            # A view is still exported (a DtoH reply in flight): the mapping goes when it is released.
            pass

    def _copyin(self, addr: int, data: memoryview | bytes) -> None:
        n = len(data) if isinstance(data, bytes) else data.nbytes
        if n:
            src = (ctypes.c_char * n).from_buffer_copy(data) if isinstance(data, bytes) else None
            if src is None:
                view = memoryview(data).cast("B")
                if view.readonly:
                    ctypes.memmove(addr, bytes(view), n)
                    return
                src = (ctypes.c_char * n).from_buffer(view)
            ctypes.memmove(addr, src, n)

    def _copyout(self, addr: int, size: int) -> bytearray:
        out = bytearray(size)
        if size:
            ctypes.memmove((ctypes.c_char * size).from_buffer(out), addr, size)
        return out

    def _copyout_into(self, addr: int, size: int, dest_addr: int) -> None:
        ctypes.memmove(dest_addr, addr, size)

    def _copyin_from(self, addr: int, size: int, src_addr: int) -> None:
        ctypes.memmove(addr, src_addr, size)

    def _copy(self, dst: int, src: int, size: int) -> None:
        ctypes.memmove(dst, src, size)

    def _memset(self, addr: int, value: int, elem_size: int, count: int) -> None:
        if elem_size == 1:
            ctypes.memset(addr, value & 0xFF, count)
            return
        dtype = np.uint16 if elem_size == 2 else np.uint32
        raw = (ctypes.c_char * (count * elem_size)).from_address(addr)
        np.frombuffer(memoryview(raw), dtype=dtype, count=count).fill(value & ((1 << (8 * elem_size)) - 1))

    def _gemm(self, g: Any) -> None:
        from gpud.blas import gemm_numpy

        gemm_numpy(g)

    def _geam(self, g: Any) -> None:
        from gpud.blas import geam_numpy

        geam_numpy(g)

    def _blas_vector(self, v: Any) -> None:
        from gpud.blas import vector_numpy

        vector_numpy(v)

    def _blas_matrix(self, g: Any) -> None:
        from gpud.blas import matrix_numpy

        matrix_numpy(g)

    def _spmv(self, s: Any) -> None:
        from gpud.sparse import spmv_numpy

        spmv_numpy(s)

    def _sparse_convert(self, s: Any) -> None:
        from gpud.sparse import CONVERSIONS

        CONVERSIONS[s.kind](s)

    def _sparse_counted(self, s: Any) -> int:
        from gpud.sparse import PRODUCTS

        return PRODUCTS[s.kind](s)

    def _rand(self, r: Any) -> None:
        from proto.rand import generate_numpy

        generate_numpy(r)

    def _fft(self, f: Any) -> None:
        from gpud.fft import fft_numpy

        fft_numpy(f)

    def _solve(self, s: Any) -> None:
        from gpud.solver import solve_numpy

        solve_numpy(s)

    # -------------------------------------------------------------- modules and launches
    def _jit(self):  # imported lazily: the JIT pulls in llvmlite
        try:
            import jit
        except ImportError as exc:
            raise CudaError(codes.NOT_SUPPORTED, f"the PTX JIT is not available: {exc}") from None
        if not hasattr(jit, "compile_module"):
            raise CudaError(codes.NOT_SUPPORTED, "cuLaunchKernel: the PTX JIT is not available in this build")
        return jit

    def _load_module(self, image: bytes, fmt: str) -> Module:
        if fmt != "ptx":
            raise CudaError(
                codes.NO_BINARY_FOR_GPU,
                f"the CPU backend runs PTX only; a {fmt} image holds machine code for a real GPU",
            )
        jit = self._jit()
        try:
            mod = jit.compile_module(bytes(image), bounds_check=self.bounds_check)
        except jit.JitError as exc:
            raise CudaError(exc.code, exc.message) from None
        globals_ = {name: (g.address, g.size) for name, g in getattr(mod, "globals", {}).items()}
        return Module(functions={}, globals=globals_, native=mod, kernel_names=list(mod.kernel_names))

    def _get_function(self, module: Module, name: str) -> Function:
        jit = self._jit()
        try:
            k = module.native.get_kernel(name)
        except jit.JitError as exc:
            raise CudaError(exc.code, exc.message) from None
        params = [ParamInfo(size=p.size, align=p.align, offset=p.offset) for p in k.params]
        from jit.device import function_attributes

        attrs = function_attributes(k, self._info.attributes)
        attrs["param_buffer_size"] = int(k.param_buffer_size)
        return Function(name=name, params=params, attributes=attrs, native=k)

    divides_cores = True

    def new_share(self, tenant: str, weight: float, priority: int, aging_s: float) -> Any:
        from jit.cores import arbiter

        a = arbiter()
        a.aging_s = aging_s
        return a.share(tenant, weight, priority)

    def new_cancel(self) -> Any:
        from jit.watchdog import Cancel

        return Cancel() if self.bounds_check else None  # unchecked code has no polls (NOTE [watchdog])

    def cancel(self, token: Any, why: str) -> None:
        if token is not None:
            token.cancel(why)

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
        jit = self._jit()
        ranges = allowed_ranges if self.bounds_check else None
        try:
            res = function.native.launch(
                grid=tuple(grid),
                block=tuple(block),
                shared_mem=shared_mem,
                params=params,
                allowed_ranges=ranges,
                cooperative=cooperative,
                deadline_s=deadline_s if self.bounds_check else None,
                cancel=cancel,
                share=share,
                device=self._info.attributes,
            )
        except jit.JitError as exc:
            raise CudaError(exc.code, f"{function.name}: {exc.message}") from None
        return LaunchResult(printf=getattr(res, "printf", "") or "")
