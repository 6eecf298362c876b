"""nvcc-built programs, unmodified, under ``wooly run`` against a real gpud.

One CUDA runtime program (progs/runtime_app.cu: streams, events, shared memory, symbols, device
printf, an invalid copy) is built the ways users build: nvcc's default (static cudart), with
``-cudart shared``, and PTX-only; each must print PASS. A build with machine code only must fail
with CUDA_ERROR_NO_BINARY_FOR_GPU naming the nvcc flag that fixes it. What runs is NVIDIA's own
cudart on the shim's libcuda (NOTE [export tables]) with the client in an interpreter the shim
starts (NOTE [embedded interpreter]).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.conftest import ROOT
from tests.integration.native.conftest import PROGS, wooly_run

NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")

BUILDS = {
    "static": [],
    "shared": ["-cudart", "shared"],
    "ptx": ["-gencode", "arch=compute_80,code=compute_80"],
    "sass": ["-gencode", "arch=compute_80,code=sm_80"],
}


def build_each_way(
    out: str, stem: str, srcs: list[str], flags: tuple[str, ...] = (), libs: tuple[str, ...] = ()
) -> dict[str, str]:
    """``srcs`` built each of the BUILDS ways (two at a time) into ``out``: {way: executable}."""

    def build(name: str) -> str:
        exe = os.path.join(out, f"{stem}_{name}")
        cmd = [str(NVCC), *BUILDS[name], *flags, "-o", exe, *srcs, *libs]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return exe

    with ThreadPoolExecutor(2) as pool:
        return dict(zip(BUILDS, pool.map(build, BUILDS), strict=True))


@pytest.fixture(scope="module")
def binaries(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return build_each_way(str(tmp_path_factory.mktemp("nvcc")), "app", [os.path.join(PROGS, "runtime_app.cu")])


@pytest.mark.parametrize("build", ["static", "shared", "ptx"])
def test_runtime_program_passes(binaries: dict[str, str], wooly_gpud: str, build: str) -> None:
    proc = wooly_run([binaries[build]], server=wooly_gpud)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1] == "PASS", proc.stdout + proc.stderr
    assert "sm_80" in lines[0] and "wooly" in lines[0]
    # device printf lands between the host's lines in program order, as on a GPU
    assert lines.index("device says 7") < lines.index("bad copy: cudaErrorInvalidValue")


def test_embedded_gpud_and_exit_code_and_stdin(binaries: dict[str, str]) -> None:
    """No WOOLY_SERVER: wooly run starts its own gpud; the program's stdin and exit status are its own."""
    proc = wooly_run_stdin([binaries["static"], "--read-stdin"], "42\n")
    assert proc.returncode == 42, proc.stdout + proc.stderr
    assert "stdin: 42" in proc.stdout


def wooly_run_stdin(args: list[str], text: str) -> subprocess.CompletedProcess[str]:
    e = dict(os.environ)
    e.pop("WOOLY_SERVER", None)
    e["PYTHONPATH"] = ROOT + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    return subprocess.run(
        [sys.executable, "-m", "woolyhv", "run", *args],
        input=text,
        capture_output=True,
        text=True,
        timeout=240,
        env=e,
        cwd=ROOT,
    )


def test_machine_code_only_is_a_clear_error(binaries: dict[str, str], wooly_gpud: str) -> None:
    proc = wooly_run([binaries["sass"]], server=wooly_gpud)
    assert proc.returncode != 0
    assert "CUDA_ERROR_NO_BINARY_FOR_GPU" in proc.stderr, proc.stderr
    assert "sm_80 only" in proc.stderr and "-gencode arch=compute_80,code=compute_80" in proc.stderr
    assert "_Z5saxpyiPKfPf" in proc.stderr  # the kernels it could not run are named
    assert "no kernel image is available" in proc.stdout  # and cudart's own message reaches the program


def test_nvrtc_cubin_becomes_ptx(tmp_path: pytest.TempPathFactory, wooly_gpud: str, native_lib: str) -> None:
    """A program that asks NVRTC for a cubin gets PTX it can load (NOTE [nvrtc stand-in])."""
    from shim.native import build

    real = build.real_nvrtc()
    if real is None:
        pytest.skip("no NVRTC installed")
    include = os.path.join(os.path.dirname(os.path.dirname(real)), "include")
    if not os.path.exists(os.path.join(include, "nvrtc.h")):
        include = "/usr/local/cuda/include"
    exe = str(tmp_path / "nvrtc_cubin")
    proc = subprocess.run(
        [
            NVCC,
            "-I",
            include,
            "-o",
            exe,
            os.path.join(PROGS, "nvrtc_cubin.cpp"),
            f"-L{native_lib}",
            "-lcuda",
            f"-L{os.path.dirname(real)}",
            f"-l:{os.path.basename(real)}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    run = wooly_run([exe], server=wooly_gpud)
    assert run.returncode == 0 and run.stdout.strip().endswith("PASS"), run.stdout + run.stderr


def _build_and_pass(tmp_path: pytest.TempPathFactory, server: str, source: str, *flags: str) -> None:
    """Build progs/<source> with nvcc and the given flags; under ``wooly run`` it must exit 0 and print PASS last."""
    exe = str(tmp_path / os.path.splitext(source)[0])
    proc = subprocess.run(
        [NVCC, "-o", exe, os.path.join(PROGS, source), *flags], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    run = wooly_run([exe], server=server)
    assert run.returncode == 0 and run.stdout.strip().endswith("PASS"), run.stdout + run.stderr


PTX_ONLY = ("-gencode", "arch=compute_80,code=compute_80")


def test_cublas_calls_run_on_gpud(tmp_path: pytest.TempPathFactory, wooly_gpud: str, native_lib: str) -> None:
    """sgemm (transposed, padded), strided-batched dgemm with scalars in device memory, GemmEx f16 -> f32, a bad
    leading dimension, and level 1/2 on strided and backward vectors (saxpy, sdot in both pointer modes, isamax,
    snrm2, dgemv), through the cuBLAS stand-in (NOTE [vendor libraries]), checked on the host."""
    _build_and_pass(tmp_path, wooly_gpud, "cublas_app.cu", f"-L{native_lib}", "-lcublas")


def test_stream_ordered_allocation_and_memory_pools(tmp_path: pytest.TempPathFactory, wooly_gpud: str) -> None:
    """cudaMallocAsync/cudaFreeAsync around a kernel, the default pool's attributes, an explicit pool (NOTE [memory
    pools])."""
    _build_and_pass(tmp_path, wooly_gpud, "mempool_app.cu", *PTX_ONLY)


def test_virtual_memory_management(tmp_path: pytest.TempPathFactory, wooly_gpud: str, native_lib: str) -> None:
    """cuMemAddressReserve/cuMemCreate/cuMemMap: two allocations mapped back to back with a kernel across the
    seam, one moved to another reservation with its contents, aliasing refused (NOTE [virtual memory on gpud])."""
    _build_and_pass(tmp_path, wooly_gpud, "vmm_app.cu", *PTX_ONLY, f"-L{native_lib}", "-lcuda")


def test_cuda_graphs(tmp_path: pytest.TempPathFactory, wooly_gpud: str) -> None:
    """CUDA graphs through cudart (NOTE [graphs in the native face]): a two-stream capture with fork and join,
    graph memory, host functions and copies whose host memory is read at each launch; an explicit graph whose
    executable's kernel parameters change; clone, update, a 3D copy, and the errors of invalid captures
    (synchronising, an unjoined fork)."""
    _build_and_pass(tmp_path, wooly_gpud, "graph_app.cu", *PTX_ONLY)


def test_a_kernel_on_a_non_blocking_stream_sees_a_synchronous_upload(
    tmp_path: pytest.TempPathFactory, wooly_gpud: str
) -> None:
    """cudaMemcpy returns with the bytes on the device (NOTE [synchronous uploads]): a kernel launched next on a
    non-blocking stream read zeros where a deduplicated upload's chunks were not mapped yet (3 of 3 runs before)."""
    _build_and_pass(tmp_path, wooly_gpud, "sync_upload.cu", *PTX_ONLY)


def test_the_jit_linker_links_ptx_modules(tmp_path: pytest.TempPathFactory, wooly_gpud: str, native_lib: str) -> None:
    """cuLinkCreate/AddData/AddFile/Complete (NOTE [linking PTX]): a kernel calling a function of another PTX
    module runs once the two are linked; a cubin input is NO_BINARY_FOR_GPU with the error log filled."""
    ptx = {}
    for name in ("kernel", "twice"):
        ptx[name] = str(tmp_path / f"{name}.ptx")
        src = os.path.join(PROGS, "link", f"{name}.cu")
        proc = subprocess.run(
            [NVCC, "-rdc=true", "-ptx", "-arch=compute_80", "-o", ptx[name], src],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr
    exe = str(tmp_path / "link_app")
    src = os.path.join(PROGS, "link_app.cpp")
    proc = subprocess.run(
        [NVCC, "-o", exe, src, f"-L{native_lib}", "-lcuda"], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    run = wooly_run([exe, ptx["kernel"], ptx["twice"]], server=wooly_gpud)
    assert run.returncode == 0 and run.stdout.strip().endswith("PASS"), run.stdout + run.stderr


def test_curand_sobol(tmp_path: pytest.TempPathFactory, wooly_gpud: str, native_lib: str) -> None:
    """cuRAND's 32-bit Sobol generator and direction vectors (NOTE [sobol]): the numbers a kernel steps from the
    table equal the host API's, host and device generators agree, misuse gets cuRAND's status codes."""
    _build_and_pass(tmp_path, wooly_gpud, "curand_sobol.cu", f"-L{native_lib}", "-lcurand")


def test_cusparse_ilu0_and_spsv(tmp_path: pytest.TempPathFactory, wooly_gpud: str, native_lib: str) -> None:
    """cusparse<t>csrilu02, its zero pivot, and cusparseSpSV_* with the factors' FILL_MODE/DIAG_TYPE, through the
    native library (cuda-samples conjugateGradientPrecond's calls): L U y = b solves A y = b."""
    _build_and_pass(tmp_path, wooly_gpud, "cusparse_ilu.cu", f"-L{native_lib}", "-lcusparse")


def test_curand_host_generators_match_device_ones(
    tmp_path: pytest.TempPathFactory, wooly_gpud: str, native_lib: str
) -> None:
    """curandCreateGeneratorHost runs proto/rand.py's definition on the client: the same seed gives the same
    uniform and normal numbers on the host as on the device (cuda-samples MersenneTwisterGP11213 compares them)."""
    _build_and_pass(tmp_path, wooly_gpud, "curand_host.cu", f"-L{native_lib}", "-lcurand")


def test_textures_and_surfaces(tmp_path: pytest.TempPathFactory, wooly_gpud: str) -> None:
    """CUDA arrays (2D, 3D, layered, cubemap) filled by cudaMemcpy2DToArray/cudaMemcpy3D, texture objects (bilinear
    with a texture unit's 8-bit weights, wrap/clamp/border, normalized and element-type reads of uchar4, linear
    memory with tex1Dfetch), surface objects (surf2Dwrite, surf2Dread with zero and clamp boundaries), the objects'
    descriptors read back, misuse refused, and a forged texture handle failing its launch with
    cudaErrorIllegalAddress (NOTE [textures])."""
    _build_and_pass(tmp_path, wooly_gpud, "texture_app.cu")


def test_cusolver_sparse(tmp_path: pytest.TempPathFactory, wooly_gpud: str, native_lib: str) -> None:
    """cuSOLVER's sparse API through the native library (NOTE [sparse solves]): csrlsv{chol,lu,qr} on the host and
    the device (Cholesky reading the lower triangle only), the low-level csrchol (device) and csrqr (host, shifted)
    families, csrperm's map, symrcm, singular and indefinite matrices reported, bad indices refused."""
    _build_and_pass(tmp_path, wooly_gpud, "cusolver_sp.cu", f"-L{native_lib}", "-lcusolver")
