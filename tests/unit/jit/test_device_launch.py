"""Kernels that launch kernels (NOTE [device launches], jit/devlaunch.py), from nvcc's own PTX (ptx/device_launch.cu
built with -rdc=true): the children's results, nesting to the limit and one past it, the order of children, tail
launches and device-side copies, launch errors seen by the launching thread, a faulting child failing the host's
launch, and the device runtime's heap; with and without bounds checks, and through a lazily translated module."""

from __future__ import annotations

import numpy as np
import pytest

from jit import JitError, compile_module
from jit.devlaunch import MAX_DEPTH
from tests.unit.jit.helpers import PTX_DIR, pack

PTX = (PTX_DIR / "device_launch.ptx").read_text()
_MODULES: dict[bool, object] = {}


def kernel(short: str, checked: bool):  # type: ignore[no-untyped-def]
    m = _MODULES.get(checked)
    if m is None:
        m = _MODULES[checked] = compile_module(PTX, bounds_check=checked, tier="optimized")
    name = next(n for n in m.kernel_names if n.startswith(f"_Z{len(short)}{short}"))  # type: ignore[attr-defined]
    return m.get_kernel(name)  # type: ignore[attr-defined]


def run(short: str, checked: bool, grid, block, *arrays, extra=()):  # type: ignore[no-untyped-def]
    k = kernel(short, checked)
    kw = {"allowed_ranges": tuple((a.ctypes.data, a.nbytes) for a in arrays)} if checked else {}
    return k.launch(grid, block, 0, pack(k, *arrays, *extra), **kw)


@pytest.mark.parametrize("checked", [False, True])
def test_each_block_launches_a_child(checked: bool) -> None:
    out = np.zeros(4 * 32, dtype=np.int32)
    run("per_block", checked, 4, 8, out)
    i = np.arange(128)
    assert (out == (i // 32) * 32 + (i % 32) * 2).all()


@pytest.mark.parametrize("checked", [False, True])
def test_nesting_to_the_limit_and_one_past_it(checked: bool) -> None:
    log = np.zeros(MAX_DEPTH + 2, dtype=np.int32)
    run("nest", checked, 1, 1, log, extra=(0, MAX_DEPTH + 1))  # the host's grid is depth 0: 24 more levels run
    assert list(log[: MAX_DEPTH + 1]) == list(range(1, MAX_DEPTH + 2))
    log[:] = 0
    run("nest", checked, 1, 1, log, extra=(0, MAX_DEPTH + 2))
    assert list(log[: MAX_DEPTH + 1]) == list(range(1, MAX_DEPTH + 2))
    assert log[MAX_DEPTH + 1] == -65  # cudaErrorLaunchMaxDepthExceeded for the deepest grid's launch


@pytest.mark.parametrize("checked", [False, True])
def test_children_run_after_their_parent_and_tail_launches_last(checked: bool) -> None:
    seq = np.zeros(4, dtype=np.int32)
    run("order", checked, 1, 1, seq)
    assert list(seq) == [3, 1, 2, 3]


@pytest.mark.parametrize("checked", [False, True])
def test_device_copies_are_queued_behind_the_launches_before_them(checked: bool) -> None:
    a, b = np.full(32, -1, dtype=np.int32), np.zeros(32, dtype=np.int32)
    run("copy_after", checked, 1, 1, a, b, extra=(32,))
    assert (b == 100 + np.arange(32)).all()  # copied after produce ran
    assert (a == 0).all()  # then the memset


def test_a_device_copy_outside_the_allowed_ranges_fails_the_launch() -> None:
    a, b = np.zeros(32, dtype=np.int32), np.zeros(32, dtype=np.int32)
    k = kernel("copy_after", True)
    with pytest.raises(JitError) as e:  # b is not in the launch's ranges
        k.launch(1, 1, 0, pack(k, a, b, 32), allowed_ranges=((a.ctypes.data, a.nbytes),))
    assert e.value.code == 700 and "cudaMemcpyAsync" in str(e.value)


@pytest.mark.parametrize("checked", [False, True])
def test_a_bad_launch_is_the_launching_threads_error(checked: bool) -> None:
    out = np.full(4, 7, dtype=np.int32)
    r = run("bad_config", checked, 1, 1, out)
    assert list(out[:2]) == [9, 0]  # cudaErrorInvalidConfiguration, then cleared; nothing launched
    assert r.printf == "cudaErrorInvalidConfiguration invalid configuration argument\n"


def test_a_faulting_child_fails_the_hosts_launch() -> None:
    p = np.zeros(4, dtype=np.int32)
    with pytest.raises(JitError) as e:
        run("launches_wild", True, 1, 1, p)
    assert e.value.code == 700 and "wild" in str(e.value)


@pytest.mark.parametrize("checked", [False, True])
def test_device_malloc_and_printf_order(checked: bool) -> None:
    out = np.zeros(32, dtype=np.int32)
    r = run("with_malloc", checked, 1, 1, out)
    assert (out == np.arange(32) ** 2).all()
    assert r.printf == "parent done\n"


def test_through_a_lazily_translated_module(monkeypatch: pytest.MonkeyPatch) -> None:
    import jit

    monkeypatch.setattr(jit, "lazy_bytes", lambda: 1024)  # NOTE [lazy modules]: this module is split
    m = compile_module(PTX, bounds_check=True, tier="optimized")
    assert type(m).__name__ == "LazyCpuModule"
    out = np.zeros(4 * 32, dtype=np.int32)
    k = m.get_kernel(next(n for n in m.kernel_names if "per_block" in n))
    k.launch(4, 8, 0, pack(k, out), allowed_ranges=((out.ctypes.data, out.nbytes),))
    i = np.arange(128)
    assert (out == (i // 32) * 32 + (i % 32) * 2).all()


FORGED = """.version 7.8
.target sm_80
.address_size 64
.extern .func (.param .b64 func_retval0) __cudaCDP2GetParameterBufferV2(.param .b64 a, .param .align 4 .b8 b[12],
    .param .align 4 .b8 c[12], .param .b32 d);
.extern .func (.param .b32 func_retval0) __cudaCDP2LaunchDeviceV2(.param .b64 a, .param .b64 b);
.extern .func (.param .b32 func_retval0) __cudaCDP2GetLastError();
.visible .entry forged(.param .u64 out, .param .u64 handle, .param .u64 buf)
{
  .reg .b64 %rd<8>; .reg .b32 %r<4>;
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [handle]; ld.param.u64 %rd3, [buf];
  { .param .b64 p0; .param .align 4 .b8 p1[12]; .param .align 4 .b8 p2[12]; .param .b32 p3; .param .b64 r0;
    st.param.b64 [p0], %rd2; st.param.b32 [p1], 1; st.param.b32 [p1+4], 1; st.param.b32 [p1+8], 1;
    st.param.b32 [p2], 1; st.param.b32 [p2+4], 1; st.param.b32 [p2+8], 1; st.param.b32 [p3], 0;
    call.uni (r0), __cudaCDP2GetParameterBufferV2, (p0, p1, p2, p3); ld.param.b64 %rd4, [r0]; }
  st.global.u64 [%rd1], %rd4;
  { .param .b32 r1; call.uni (r1), __cudaCDP2GetLastError, (); ld.param.b32 %r1, [r1]; }
  st.global.u32 [%rd1+8], %r1;
  { .param .b64 q0; .param .b64 q1; .param .b32 r2; st.param.b64 [q0], %rd3; st.param.b64 [q1], 0;
    call.uni (r2), __cudaCDP2LaunchDeviceV2, (q0, q1); ld.param.b32 %r2, [r2]; }
  st.global.u32 [%rd1+12], %r2;
  ret;
}
"""


@pytest.mark.parametrize("handle", [0, 0x1234, (0x7C0D << 48) | 5, 2**64 - 1])
def test_forged_handles_and_buffers_are_errors(handle: int) -> None:
    """A value that names no kernel of the module gets no buffer (cudaErrorInvalidDeviceFunction); launching from a
    buffer the runtime did not hand out is cudaErrorInvalidValue, and nothing runs."""
    k = compile_module(FORGED, bounds_check=True, tier="optimized").get_kernel("forged")
    out = np.zeros(2, dtype=np.uint64)
    k.launch(1, 1, 0, pack(k, out, handle, out.ctypes.data), allowed_ranges=((out.ctypes.data, out.nbytes),))
    assert int(out[0]) == 0  # NULL buffer
    assert int(out[1]) & 0xFFFFFFFF == 98 and int(out[1]) >> 32 == 1


@pytest.mark.parametrize("checked", [False, True])
def test_device_attributes_and_runtime_version(checked: bool) -> None:
    from jit.device import default
    from proto.constants import CUDA_VERSION

    out = np.full(8, -7, dtype=np.int32)
    run("attrs", checked, 1, 1, out)
    assert list(out[:7]) == [1024, default()[16], 1, -7, 101, -7, CUDA_VERSION]  # SM count; invalid value / device
    k = kernel("attrs", checked)
    kw = {"allowed_ranges": ((out.ctypes.data, out.nbytes),)} if checked else {}
    k.launch(1, 1, 0, pack(k, out), device={1: 256, 16: 3}, **kw)  # the device a launch names (gpud's backend's)
    assert list(out[:2]) == [256, 3]


@pytest.mark.parametrize("checked", [False, True])
def test_pitched_2d_and_3d_copies(checked: bool) -> None:
    w, h, dp, sp = 5, 4, 8, 6
    src, dst = np.arange(sp * h, dtype=np.uint8), np.zeros(dp * h, dtype=np.uint8)
    run("copies2d", checked, 1, 1, dst, src, extra=(w, h, dp, sp))
    want = np.full((h, dp), 7, dtype=np.uint8)
    want[:, :w] = src.reshape(h, sp)[:, :w]
    assert (dst.reshape(h, dp) == want).all()
    d = 3
    src, dst = np.arange(sp * h * d, dtype=np.uint8), np.zeros(dp * h * d, dtype=np.uint8)
    run("copies3d", checked, 1, 1, dst, src, extra=(w, h, d, dp, sp))
    want = np.zeros((d, h, dp), dtype=np.uint8)
    want[:, :, : w - 1] = src.reshape(d, h, sp)[:, :, 1:w]
    want[:, :, 0] = 9
    assert (dst.reshape(d, h, dp) == want).all()


@pytest.mark.parametrize("checked", [False, True])
def test_device_copy_errors(checked: bool) -> None:
    out, buf = np.full(5, -1, dtype=np.int32), np.zeros(64, dtype=np.uint8)
    run("copy_errors", checked, 1, 1, out, buf)
    assert list(out) == [12, 801, 1, 1, 1]  # pitch < width, a CUDA array, NULL parameters, ysize < height; last error
    assert (buf == 0).all()


def test_a_pitched_copy_past_the_allowed_ranges_fails_the_launch() -> None:
    w, h, dp, sp = 5, 4, 8, 6
    src, dst = np.arange(sp * h, dtype=np.uint8), np.zeros(dp * (h - 1), dtype=np.uint8)  # dst one row short
    k = kernel("copies2d", True)
    with pytest.raises(JitError) as e:
        k.launch(
            1,
            1,
            0,
            pack(k, dst, src, w, h, dp, sp),
            allowed_ranges=((dst.ctypes.data, dst.nbytes), (src.ctypes.data, src.nbytes)),
        )
    assert e.value.code == 700 and "cudaMemcpy2DAsync" in str(e.value)


def test_launches_are_checked_on_the_devices_attributes() -> None:
    """The JIT's own launch check is proto/launch.py's, on the device's attributes (one owner of the limits)."""
    from jit.device import default

    out = np.zeros(32, dtype=np.int32)
    k = kernel("fill", False)
    optin = default()[97]
    for shared in (optin + 1, -1):
        with pytest.raises(JitError) as e:
            k.launch(1, 32, shared, pack(k, out, 0))
        assert e.value.code == 1 and "dynamic shared memory" in str(e.value)
    k.launch(1, 32, optin, pack(k, out, 0))  # up to the opt-in limit, as gpud's backend allows
    k.launch(1, 32, 0, pack(k, out, 0))  # valid on the default device, and remembered as such there only
    with pytest.raises(JitError) as e:
        k.launch(1, 32, 0, pack(k, out, 0), device={1: 16})  # a device of 16 threads per block
    assert "32 threads per block exceed the limit of 16" in str(e.value)


def test_a_copy_reaching_past_a_tib_is_an_invalid_value() -> None:
    from jit.devlaunch import INVALID_VALUE, SUCCESS, Copy

    ok = Copy(dst=1 << 20, src=2 << 20, width=64, height=4, depth=2, dpitch=64, spitch=64, dslice=256, sslice=256)
    assert ok.error() == SUCCESS
    far = Copy(
        dst=1 << 20, src=2 << 20, width=1, height=2, depth=1 << 20, dpitch=1 << 20, spitch=1, dslice=1 << 21, sslice=2
    )
    assert far.error() == INVALID_VALUE  # each field is small; the rows and slices together reach 2 TiB


@pytest.mark.parametrize("checked", [False, True])
def test_kernel_attributes_occupancy_limits_and_devices(checked: bool) -> None:
    from jit.device import default, function_attributes
    from proto import launch as rules

    out = np.full(26, -7, dtype=np.int64)
    run("queries", checked, 1, 1, out)
    fill, bounded = kernel("fill", checked), kernel("bounded", checked)
    dev = default()
    a = function_attributes(fill, dev)
    assert list(out[:7]) == [0, 1024, 0, 49152, 80, 0, a["num_regs"]]  # ...; a reserved word zeroed
    assert (bounded.max_threads_per_block, bounded.static_shared_bytes) == (128, 1200)
    assert list(out[7:10]) == [128, 1200, 49152 - 1200]
    assert out[10] == 0 and out[11] == rules.blocks_per_sm(dev, 256, 1024, 0) == 8  # 2048 threads per SM
    assert out[12] == rules.blocks_per_sm(dev, 128, 128, 1200 + 40000) == 4  # by shared memory (164 KiB per SM)
    assert out[13] == 0 and out[14] == 1  # past its launch bounds; an unknown flag is cudaErrorInvalidValue
    heap = fill._module.heap().size
    assert list(out[15:19]) == [0, heap, 8192, 215]  # malloc heap; pending launches; an unknown limit
    assert list(out[19:23]) == [0, 1, 0, 1]  # one device; no cache preference; four-byte banks
    assert out[23] == 98 and list(out[24:]) == [98, 0]  # not a kernel; the last error, then cleared
