"""Kernels through gpud: PTX module load, launch with the .entry parameter layout, isolation."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from proto.errors import CudaError
from tests.conftest import connect

SAXPY = b"""
.version 7.0
.target sm_80
.address_size 64
.visible .entry saxpy(.param .u64 x, .param .u64 y, .param .f32 a, .param .u32 n)
{
  .reg .pred %p; .reg .b32 %r<6>; .reg .f32 %f<4>; .reg .b64 %rd<8>;
  ld.param.u64 %rd1, [x]; ld.param.u64 %rd2, [y]; ld.param.f32 %f1, [a]; ld.param.u32 %r1, [n];
  mov.u32 %r2, %ctaid.x; mov.u32 %r3, %ntid.x; mov.u32 %r4, %tid.x; mad.lo.s32 %r5, %r2, %r3, %r4;
  setp.ge.u32 %p, %r5, %r1; @%p bra DONE;
  mul.wide.u32 %rd3, %r5, 4; add.s64 %rd4, %rd1, %rd3; add.s64 %rd5, %rd2, %rd3;
  ld.global.f32 %f2, [%rd4]; ld.global.f32 %f3, [%rd5]; fma.rn.f32 %f3, %f1, %f2, %f3; st.global.f32 [%rd5], %f3;
DONE:
  ret;
}
"""

# Writes 1.0 at y[i] for every thread, where y + i*4 may be any address the caller passes.
POKE = b"""
.version 7.0
.target sm_80
.address_size 64
.visible .entry poke(.param .u64 p)
{
  .reg .b64 %rd<2>; .reg .f32 %f1;
  ld.param.u64 %rd1, [p]; mov.f32 %f1, 0f3F800000; st.global.f32 [%rd1], %f1;
  ret;
}
"""


def test_saxpy_runs_on_gpud(driver):
    n = 10_000
    x = np.arange(n, dtype=np.float32)
    y = np.full(n, 1.5, dtype=np.float32)
    px, py = driver.mem_alloc(4 * n), driver.mem_alloc(4 * n)
    driver.memcpy_htod(px, x)
    driver.memcpy_htod(py, y)
    mod = driver.module_load_data(SAXPY)
    fn = driver.module_get_function(mod, "saxpy")
    assert [p[2] for p in fn.params] == [0, 8, 16, 20]  # offsets from the .entry declaration
    params = fn.pack_params(
        [struct.pack("<Q", px), struct.pack("<Q", py), struct.pack("<f", 3.0), struct.pack("<I", n)]
    )
    driver.launch_kernel(fn, ((n + 255) // 256, 1, 1), (256, 1, 1), params)
    out = np.frombuffer(bytes(driver.memcpy_dtoh(py, 4 * n)), dtype=np.float32)
    assert np.array_equal(out, 3.0 * x + 1.5)


def test_malformed_ptx_reports_line_and_column(driver):
    with pytest.raises(CudaError) as e:
        driver.module_load_data(b".version 7.0\n.target sm_80\n.address_size 64\n.visible .entry k(\n{ ret; }\n")
    assert e.value.name == "CUDA_ERROR_INVALID_PTX"
    assert ":" in e.value.message


def test_out_of_bounds_kernel_is_isolated(gpud):
    victim = connect(gpud.endpoint)
    attacker = connect(gpud.endpoint)
    try:
        secret = victim.mem_alloc(4096)
        victim.memcpy_htod(secret, b"\x11" * 4096)
        victim.ctx_synchronize()
        mod = attacker.module_load_data(POKE)
        fn = attacker.module_get_function(mod, "poke")
        own = attacker.mem_alloc(64)
        attacker.launch_kernel(fn, (1, 1, 1), (1, 1, 1), struct.pack("<Q", own))
        attacker.ctx_synchronize()  # in bounds: fine
        attacker.launch_kernel(fn, (1, 1, 1), (1, 1, 1), struct.pack("<Q", secret))  # the other tenant's memory
        with pytest.raises(CudaError) as e:
            attacker.ctx_synchronize()
        assert e.value.name == "CUDA_ERROR_ILLEGAL_ADDRESS"
        with pytest.raises(CudaError) as e2:  # sticky for the faulting context, as on a GPU
            attacker.mem_get_info()
        assert e2.value.name == "CUDA_ERROR_ILLEGAL_ADDRESS"
        assert bytes(victim.memcpy_dtoh(secret, 4096)) == b"\x11" * 4096  # untouched
        victim.mem_alloc(16)  # the victim's context is healthy
    finally:
        victim.conn.close()
        attacker.conn.close()


def test_cooperative_launch_through_gpud(driver):
    """Grid sync (nvcc's inline protocol) in a cooperative launch; gpud bounds a cooperative grid itself, whatever
    the client checked: too many blocks is CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE and the session goes on."""
    from pathlib import Path

    ptx = (Path(__file__).parents[1] / "unit" / "jit" / "ptx" / "grid_sync_nvcc.ptx").read_bytes()
    fn = driver.module_get_function(driver.module_load_data(ptx), "k")
    grid, block = 8, 64
    n = grid * block
    a0 = np.arange(n, dtype=np.int32) * 3 - 700
    pa, pb = driver.mem_alloc(4 * n), driver.mem_alloc(4 * n)
    driver.memcpy_htod(pa, a0)
    params = fn.pack_params([struct.pack("<Q", pa), struct.pack("<Q", pb), struct.pack("<i", 2)])
    driver.launch_kernel(fn, (grid, 1, 1), (block, 1, 1), params, cooperative=True)
    out = np.frombuffer(bytes(driver.memcpy_dtoh(pa, 4 * n)), dtype=np.int32)
    from tests.unit.jit.grid_sync_ref import expect

    assert np.array_equal(out, expect("nvcc", a0, 2))
    attrs = driver.devices[0]["attributes"]
    most = int(attrs.get(16, attrs.get("16"))) * int(attrs.get(106, attrs.get("106")))
    with pytest.raises(CudaError) as e:  # the client's own check (proto/launch.py)
        driver.launch_kernel(fn, (most + 1, 1, 1), (1, 1, 1), params, cooperative=True)
    assert e.value.name == "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE"
    driver.launch_kernel(fn, (most + 1, 1, 1), (1, 1, 1), params, cooperative=True, checked=True)  # a client that lies
    with pytest.raises(CudaError) as e:
        driver.ctx_synchronize()
    assert e.value.name == "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE" and "at once" in e.value.message
    driver.launch_kernel(fn, (grid, 1, 1), (block, 1, 1), params, cooperative=True)  # not sticky: runs again
    driver.ctx_synchronize()
