"""CuPy, unmodified, under ``wooly run`` against a real gpud: NVIDIA's cudart (libcudart.so.12) on the shim's
libcuda, NVRTC on the client producing PTX, and CuPy's precompiled thrust module translated lazily."""

from __future__ import annotations

import os

import pytest

from tests.integration.native.conftest import PROGS, ROOT, wooly_run

pytest.importorskip("cupy")


def test_cupy_program(wooly_gpud: str) -> None:
    proc = wooly_run([os.path.join(PROGS, "cupy_app.py")], server=wooly_gpud, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "OK"
    assert "Error in sys.excepthook" not in proc.stderr  # nothing raises at exit


def test_cupy_fft_on_the_cufft_stand_in(wooly_gpud: str) -> None:
    """cupy.fft / cupyx.scipy.fft through cuFFT's API (NOTE [vendor libraries]): equal to numpy.fft; bad plans and
    executions get cuFFT's own status codes."""
    proc = wooly_run([os.path.join(PROGS, "cupy_fft.py")], server=wooly_gpud, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "OK"


def test_cupy_random_on_the_curand_stand_in(wooly_gpud: str) -> None:
    """cupy.random through cuRAND's host API (NOTE [random numbers]): distributions, seeds, and cuRAND's own
    status codes for what it refuses, float arguments passed by value included."""
    proc = wooly_run([os.path.join(PROGS, "cupy_rand.py")], server=wooly_gpud, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "OK"


def test_cupy_linalg_on_the_cusolver_stand_in(wooly_gpud: str) -> None:
    """cupy.linalg through cuSOLVER's dense API and cuBLAS's batched LU (gpud/solver.py): solve, inv, det,
    cholesky, qr, svd, eigh in four dtypes, batched stacks, lstsq/pinv/rank/norm, and a singular matrix's info."""
    proc = wooly_run([os.path.join(PROGS, "cupy_linalg.py")], server=wooly_gpud, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "OK"


def test_cupy_and_numba_arrays_as_torch_tensors(wooly_gpud: str) -> None:
    """torch.from_dlpack / torch.as_tensor of CuPy and numba arrays, and cupy.from_dlpack / cupy.asarray /
    numba.cuda.as_cuda_array of cuda tensors, make no copy (NOTE [device memory aliases] in gpud/aten_alias.py):
    writes through either side are seen by the other, and the producer is kept while the consumer uses it."""
    pytest.importorskip("torch")
    pytest.importorskip("numba.cuda")
    proc = wooly_run(
        [os.path.join(ROOT, "tests", "integration", "torch", "scripts", "dlpack_cupy.py")],
        server=wooly_gpud,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    lines = [line for line in out.splitlines() if not line.startswith(" ") and "Warning" not in line]
    assert lines == [
        "cupy cuda:0 [0.0, 100.0, -5.0, 3.0, 4.0, 5.0] [0.0, 100.0, -5.0, 3.0, 4.0, 5.0]",
        "float16 torch.float16 True",
        "int64 torch.int64 True",
        "bool torch.bool True",
        "complex64 torch.complex64 True",
        "uint8 torch.uint8 True",
        "view (3, 2) (4, 1) [[1, 2], [5, 6], [9, 10]]",
        "capsule [0.0, 1.0, 2.0]",
        "kept True",  # CuPy's pool did not hand the array's memory to the next arrays while torch held it
        "numba [2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0, 16.0] True",
        # the other way: CuPy (from_dlpack, asarray of a view) and numba kernels on a cuda tensor's memory
        "from torch [0.0, 3.0, 7.0, 10.0, 13.0, 16.0, 18.0, 21.0, 24.0, 27.0] True",
        "numba on torch [3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0]",
        "cupy matmul True",
        "OK",
    ], out
