"""The shipped examples pass under ``wooly run`` with no GPU: embedded daemon and separate ``wooly gpud``."""

from __future__ import annotations

import os

import pytest

from tests.integration.native.conftest import EXAMPLES, PROGS, wooly_run

pytestmark = pytest.mark.timeout(600)


def _check(proc, marker: str) -> None:  # noqa: ANN001
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-4000:]}"
    assert marker in proc.stdout


@pytest.mark.parametrize("example", ["numba_kernels.py", "nvrtc_saxpy.py"])
def test_example_embedded(native_lib: str, example: str) -> None:
    _check(wooly_run([os.path.join(EXAMPLES, example)]), "OK")


@pytest.mark.parametrize("example", ["numba_kernels.py", "nvrtc_saxpy.py"])
def test_example_separate_gpud(wooly_gpud: str, example: str) -> None:
    _check(wooly_run([os.path.join(EXAMPLES, example)], server=wooly_gpud), "OK")


def test_cuda_core_program(wooly_gpud: str) -> None:
    _check(wooly_run([os.path.join(PROGS, "cuda_core_prog.py")], server=wooly_gpud), "cuda.core OK")


def test_numba_mismatch_exits_nonzero(native_lib: str, tmp_path) -> None:  # noqa: ANN001
    """A wrong result must fail the example: run it with a kernel that computes the wrong thing."""
    src = open(os.path.join(EXAMPLES, "numba_kernels.py")).read().replace("out[i] = a * x[i] + y[i]", "out[i] = x[i]")
    prog = tmp_path / "broken.py"
    prog.write_text(src)
    proc = wooly_run([str(prog)])
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "MISMATCH: saxpy" in proc.stderr


def test_mapped_and_managed_memory(wooly_gpud: str) -> None:
    """gpud on this host: numba's mapped_array / managed_array are reachable from kernels."""
    _check(wooly_run([os.path.join(PROGS, "mapped_memory.py")], server=wooly_gpud), "mapped/managed OK")


def test_fork_after_cuda_init(wooly_gpud: str) -> None:
    """numba's test_fork: a forked child of a CUDA process fails fast; the parent's session lives on."""
    _check(wooly_run([os.path.join(PROGS, "fork_child.py")], server=wooly_gpud, timeout=120), "fork OK")


def test_ipc_between_processes(wooly_gpud: str) -> None:
    """cuIpcGetMemHandle in one process, cuIpcOpenMemHandle (handle by value) in a spawned child."""
    _check(wooly_run([os.path.join(PROGS, "ipc_prog.py")], server=wooly_gpud, timeout=180), "ipc OK")


def test_cooperative_launches_with_grid_sync(wooly_gpud: str) -> None:
    """numba's grid groups and nvcc's cg::this_grid().sync() through cuLaunchCooperativeKernel, on a separate gpud."""
    _check(wooly_run([os.path.join(PROGS, "grid_sync_prog.py")], server=wooly_gpud, timeout=300), "grid sync OK")


def test_dynamic_shared_memory_opt_in(wooly_gpud: str) -> None:
    """cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES) past 48 KiB: the client and gpud agree on the limit."""
    _check(wooly_run([os.path.join(PROGS, "dynamic_shared.py")], server=wooly_gpud), "dynamic shared OK")
