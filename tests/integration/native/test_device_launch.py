"""Dynamic parallelism in an nvcc-built program, unmodified, under ``wooly run`` against a real gpud.

progs/cdp_app.cu and progs/cdp_child.cu are built as users build CUDA dynamic parallelism: relocatable device code
(``-rdc=true``) linked with cudadevrt, with static and shared cudart and PTX-only. The program registers the
device-linked image with its objects' fatbins beside it (NOTE [relocatable device code] in shim/native/images.py);
its kernels launch kernels (NOTE [device launches] in jit/devlaunch.py): a recursive quicksort over device-side
streams calling a function of the other object, a kernel of the other object, a device-side copy, a launch error, and
a kernel's attributes and occupancy and the device's SM count asked from device code, equal to the host's answers.
A build with machine code only fails with CUDA_ERROR_NO_BINARY_FOR_GPU naming the flag that embeds PTX.
"""

from __future__ import annotations

import os

import pytest

from tests.integration.native.conftest import PROGS, wooly_run
from tests.integration.native.test_nvcc_binaries import NVCC, build_each_way

pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")


@pytest.fixture(scope="module")
def binaries(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    srcs = [os.path.join(PROGS, "cdp_app.cu"), os.path.join(PROGS, "cdp_child.cu")]
    return build_each_way(str(tmp_path_factory.mktemp("cdp")), "cdp", srcs, ("-rdc=true",), ("-lcudadevrt",))


@pytest.mark.parametrize("build", ["static", "shared", "ptx"])
def test_kernels_launching_kernels(binaries: dict[str, str], wooly_gpud: str, build: str) -> None:
    proc = wooly_run([binaries[build]], server=wooly_gpud)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-4:-2] == ["sorted 3000 values", "child launch error 9 then 0"], proc.stdout + proc.stderr
    assert lines[-2].startswith("device-side queries agree with the host") and lines[-1] == "PASS", proc.stdout


def test_machine_code_only_is_refused_by_name(binaries: dict[str, str], wooly_gpud: str) -> None:
    proc = wooly_run([binaries["sass"]], server=wooly_gpud)
    assert proc.returncode != 0
    assert "CUDA_ERROR_NO_BINARY_FOR_GPU" in proc.stderr and "compute_80" in proc.stderr, proc.stderr
