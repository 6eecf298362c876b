"""A native program on a gpud with two devices sees both (NOTE [devices of a program] in shim/runtime.py): CUDA runtime
programs (cudaSetDevice per device, peer copies through the client), numba's ``cuda.gpus``, CuPy, NVML, each device a
session of its own; a stream of the wrong device is CUDA's invalid-handle error. Against a real gpud offering two CPU
devices (``--cpu-devices 2``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.native.conftest import PROGS, serve_gpud, wooly_run

NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)


@pytest.fixture(scope="module")
def gpud2(native_lib: str) -> Iterator[str]:
    with serve_gpud("--cpu-devices", "2", "--cpu-memory", str(512 << 20)) as endpoint:
        yield endpoint


def _run_json(gpud: str, tmp_path: Path, name: str, source: str, **env: str) -> dict:
    """Run ``source`` as ``name`` under ``wooly run``; the JSON object its last line prints."""
    prog = tmp_path / name
    prog.write_text(source)
    proc = wooly_run([str(prog)], server=gpud, env=env or None)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_runtime_program_uses_both_devices(gpud2: str, tmp_path: Path) -> None:
    exe = str(tmp_path / "multi_device")
    build = subprocess.run([NVCC, "-o", exe, os.path.join(PROGS, "multi_device.cu")], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    proc = wooly_run([exe], server=gpud2)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "devices 2" and lines[-1] == "PASS", proc.stdout
    assert "pointer on device 1" in lines and "peer access 0" in lines and "peer copies ok" in lines
    assert "graph on device 1 ok" in lines
    assert "wrong stream: cudaErrorInvalidResourceHandle" in lines
    # the devices gpud names, in the program's order: CUDA_VISIBLE_DEVICES=1 leaves gpud's device 1 alone
    proc = wooly_run([exe], server=gpud2, env={"CUDA_VISIBLE_DEVICES": "1"})
    assert proc.returncode == 1 and proc.stdout.splitlines()[0] == "devices 1", proc.stdout + proc.stderr


NUMBA_PROG = r"""
import json
import numpy as np
from numba import cuda

@cuda.jit
def scale(x, k):
    i = cuda.grid(1)
    if i < x.size:
        x[i] *= k

out = {"count": len(cuda.gpus), "results": [], "current": []}
for dev in cuda.gpus:
    with dev:
        a = cuda.to_device(np.arange(64, dtype=np.float32))
        s = cuda.stream()
        scale[2, 32, s](a, dev.id + 2)
        s.synchronize()
        out["results"].append(a.copy_to_host().tolist())
        out["current"].append(cuda.get_current_device().id)
        out.setdefault("free", []).append(cuda.current_context().get_memory_info()[0])
cuda.select_device(1)
out["selected"] = cuda.get_current_device().id
b = cuda.device_array(16, dtype=np.float32)  # device 1's memory
cuda.select_device(0)
b.copy_to_device(np.ones(16, dtype=np.float32))  # from device 0: unified addressing finds its device
out["b"] = b.copy_to_host().tolist()
print(json.dumps(out))
"""


def test_numba_program_over_cuda_gpus(gpud2: str, tmp_path: Path) -> None:
    pytest.importorskip("numba.cuda")
    out = _run_json(gpud2, tmp_path, "numba_gpus.py", NUMBA_PROG, NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS="0")
    assert out["count"] == 2 and out["current"] == [0, 1] and out["selected"] == 1
    assert out["results"] == [[2.0 * i for i in range(64)], [3.0 * i for i in range(64)]]
    assert all(f > 0 for f in out["free"])
    assert out["b"] == [1.0] * 16


NVML_PROG = r"""
import json
import pynvml as nv
nv.nvmlInit()
n = nv.nvmlDeviceGetCount()
handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
try:
    nv.nvmlDeviceGetHandleByIndex(n)
    beyond = "no error"
except nv.NVMLError as exc:
    beyond = str(exc)
print(json.dumps({
    "count": n,
    "uuids": [nv.nvmlDeviceGetUUID(h) for h in handles],
    "totals": [nv.nvmlDeviceGetMemoryInfo(h).total for h in handles],
    "index": [nv.nvmlDeviceGetIndex(h) for h in handles],
    "beyond": beyond,
}))
"""


def test_nvml_counts_the_programs_devices(gpud2: str, tmp_path: Path) -> None:
    pytest.importorskip("pynvml")
    out = _run_json(gpud2, tmp_path, "nvml_devices.py", NVML_PROG)
    assert out["count"] == 2 and out["index"] == [0, 1]
    assert len(set(out["uuids"])) == 2 and all(t > 0 for t in out["totals"])
    assert "Invalid Argument" in out["beyond"]
    one = _run_json(gpud2, tmp_path, "nvml_one.py", NVML_PROG, WOOLY_DEVICE="1")  # a program asking for one device
    assert one["count"] == 1 and one["uuids"] == out["uuids"][1:]


CUPY_PROG = r"""
import json
import cupy as cp
out = {"count": cp.cuda.runtime.getDeviceCount(), "sums": [], "current": []}
for d in range(out["count"]):
    with cp.cuda.Device(d):
        out["sums"].append(float((cp.arange(10, dtype=cp.float32) * (d + 1)).sum()))
        out["current"].append(cp.cuda.runtime.getDevice())
with cp.cuda.Device(1):
    c = cp.arange(10, dtype=cp.float32)
with cp.cuda.Device(0):
    z = c.copy()  # device 1's array copied while device 0 is current: a peer copy
    out["z"] = [z.device.id, z.tolist()]
print(json.dumps(out))
"""


def test_cupy_program_over_two_devices(gpud2: str, tmp_path: Path) -> None:
    pytest.importorskip("cupy")
    out = _run_json(gpud2, tmp_path, "cupy_devices.py", CUPY_PROG)
    assert out["count"] == 2 and out["current"] == [0, 1] and out["sums"] == [45.0, 90.0]
    assert out["z"] == [0, [float(i) for i in range(10)]]
