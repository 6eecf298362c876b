"""`::`-qualified modifiers (NOTE [qualified modifiers], jit/ptx/parser.py): cache hints are dropped (with the
`.L2::cache_hint` policy operand), `.shared::cta`/`.shared::cluster` are `.shared`, the bulk copy without
transaction counts runs, and everything else qualified is reported as not supported, never run wrongly."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from jit import GlobalRange, JitError, compile_module
from jit.ptx.parser import parse
from tests.unit.jit.helpers import HEADER, PTX_DIR

NVCC = (PTX_DIR / "qualified_sm90.ptx").read_text()  # from qualified.cu


def launch(m, name: str, grid: int, block: int, bufs: list[np.ndarray], *ints: int) -> None:  # type: ignore[no-untyped-def]
    k = m.get_kernel(name)
    raw = b"".join(struct.pack("<Q", b.ctypes.data) for b in bufs) + b"".join(struct.pack("<i", v) for v in ints)
    kw = {"allowed_ranges": [GlobalRange(b.ctypes.data, b.nbytes) for b in bufs]} if m.bounds_check else {}
    k.launch((grid,), (block,), 0, raw.ljust(k.param_buffer_size, b"\0"), **kw)


def test_parser_normalises_qualified_modifiers() -> None:
    ptx = (
        HEADER
        + """.visible .entry k(.param .u64 p)
{ .reg .b64 %rd<4>; .reg .f32 %f<2>;
  ld.param.u64 %rd1, [p];
  createpolicy.fractional.L2::evict_last.b64 %rd2, 1.0;
  ld.global.nc.L1::no_allocate.L2::cache_hint.f32 %f1, [%rd1], %rd2;
  mbarrier.arrive.shared::cta.b64 %rd3, [%rd1];
  ld.shared::cluster.f32 %f1, [%rd1];
  ret; }
"""
    )
    body = [s for s in parse(ptx).functions[0].body or [] if hasattr(s, "opcode")]
    ld = body[2]
    assert ld.opcode == "ld" and ld.mods == ["global", "nc", "f32"] and len(ld.operands) == 2  # policy dropped
    assert body[3].mods == ["arrive", "shared", "b64"]
    assert body[4].mods == ["shared", "f32"]


@pytest.mark.parametrize("checked", [False, True])
def test_nvcc_sm90_kernels(checked: bool) -> None:
    """Streaming/last-use/non-coherent loads and streaming stores, cooperative-groups and cuda::pipeline
    memcpy_async, cuda::barrier, whose sm_90 arrive is `mbarrier.arrive.shared::cta` (was INVALID_PTX), and an
    aligned memcpy_async on a cuda::barrier (a bulk copy with transaction counts)."""
    m = compile_module(NVCC, bounds_check=checked, tier="optimized")
    n = 1000
    x = np.random.default_rng(0).random((n, 4), dtype=np.float32)
    out = np.zeros(n, np.float32)
    launch(m, "hints", 8, 128, [x, out], n)
    np.testing.assert_allclose(out, x[:, 0] + x[:, 1] + x[:, 2] + x[:, 3], rtol=1e-6)
    inp = np.random.default_rng(1).random(4 * 256, dtype=np.float32)
    staged = np.zeros_like(inp)
    launch(m, "staged", 4, 256, [inp, staged])
    np.testing.assert_array_equal(staged.reshape(4, 256), np.roll(inp.reshape(4, 256), -1, axis=1) * 2)
    chunks = 5
    src = np.arange(chunks * 128, dtype=np.int32)
    piped = np.zeros(128, np.int32)
    launch(m, "piped", 1, 128, [src, piped], chunks)
    np.testing.assert_array_equal(piped, sum(src.reshape(chunks, 128)[c] * (c + 1) for c in range(chunks)))
    b_in = np.arange(3 * 128, dtype=np.int32)
    barred = np.zeros_like(b_in)
    launch(m, "barred", 3, 128, [b_in, barred])
    np.testing.assert_array_equal(barred.reshape(3, 128), (b_in.reshape(3, 128) + 1)[:, ::-1])
    t_in = np.random.default_rng(3).random(3 * 256, dtype=np.float32)
    t_out = np.zeros_like(t_in)
    launch(m, "txcopy", 3, 256, [t_in, t_out])
    np.testing.assert_array_equal(t_out.reshape(3, 256), t_in.reshape(3, 256)[:, ::-1] + 1)


# every thread: shared[t] = in[t] (cp.async with a prefetch-size hint), a cache-hinted load, a bulk copy of the
# block's shared tile to out2 (shared::cta -> global, bulk_group), proxy fence, a hinted store
HINTED = (
    HEADER
    + """.visible .entry k(.param .u64 in, .param .u64 out, .param .u64 out2)
{
  .reg .pred %p<2>; .reg .b32 %r<8>; .reg .f32 %f<4>; .reg .b64 %rd<12>;
  .shared .align 16 .b8 tile[512];
  ld.param.u64 %rd1, [in]; ld.param.u64 %rd2, [out]; ld.param.u64 %rd3, [out2];
  mov.u32 %r1, %tid.x; mul.wide.u32 %rd4, %r1, 4;
  add.s64 %rd5, %rd1, %rd4;
  mov.u32 %r2, tile; cvt.u64.u32 %rd6, %r2; add.s64 %rd6, %rd6, %rd4; cvt.u32.u64 %r3, %rd6;
  prefetch.global.L2::evict_last [%rd5];
  cp.async.cg.shared.global.L2::128B [%r3], [%rd5], 4;
  cp.async.commit_group; cp.async.wait_group 0;
  bar.sync 0;
  createpolicy.fractional.L2::evict_first.b64 %rd7, 0.5;
  ld.global.nc.L1::no_allocate.L2::cache_hint.f32 %f1, [%rd5], %rd7;
  ld.shared::cta.f32 %f2, [%r3];
  add.f32 %f3, %f1, %f2;
  add.s64 %rd8, %rd2, %rd4;
  st.global.L1::no_allocate.f32 [%rd8], %f3;
  fence.proxy.async.shared::cta;
  bar.sync 0;
  setp.ne.u32 %p1, %r1, 0;
  @%p1 bra DONE;
  mov.u64 %rd9, tile;
  cvta.shared::cta.u64 %rd10, %rd9;
  cp.async.bulk.global.shared::cta.bulk_group [%rd3], [%r2], 512;
  cp.async.bulk.commit_group; cp.async.bulk.wait_group 0;
DONE:
  ret;
}
"""
)


@pytest.mark.parametrize("checked", [False, True])
def test_hinted_forms_run(checked: bool) -> None:
    m = compile_module(HINTED, bounds_check=checked, tier="optimized")
    x = np.random.default_rng(2).random(128, dtype=np.float32)
    out, out2 = np.zeros(128, np.float32), np.zeros(128, np.float32)
    launch(m, "k", 1, 128, [x, out, out2])
    np.testing.assert_array_equal(out, x + x)
    np.testing.assert_array_equal(out2, x)


def test_bulk_copy_is_bounds_checked() -> None:
    m = compile_module(HINTED, bounds_check=True, tier="optimized")
    x = np.zeros(128, np.float32)
    out, out2 = np.zeros(128, np.float32), np.zeros(64, np.float32)  # the bulk copy writes 512 bytes
    with pytest.raises(JitError) as ei:
        launch(m, "k", 1, 128, [x, out, out2])
    assert ei.value.code == 700


@pytest.mark.parametrize(
    "instr",
    [
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%rd1], [%rd1], 16, [%rd1], %rs1;",
        "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.u32 [%rd1], [%rd1], 16;",
        "st.async.shared::cluster.mbarrier::complete_tx::bytes.u32 [%rd1], %r1, [%rd1];",
        "red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.add.u32 [%rd1], %r1, [%rd1];",
        "tcgen05.fence::before_thread_sync;",
    ],
)
def test_other_qualified_forms_are_not_supported(instr: str) -> None:
    ptx = (
        HEADER
        + """.visible .entry k(.param .u64 p)
{ .reg .b32 %r<2>; .reg .b64 %rd<2>; .reg .b16 %rs<2>;
  ld.param.u64 %rd1, [p]; mov.u32 %r1, 1; mov.u16 %rs1, 1;
  """
        + instr
        + """
  ret; }
"""
    )
    with pytest.raises(JitError) as ei:
        compile_module(ptx, tier="quick")
    assert ei.value.code == 801 and instr.split()[0].split(".")[0] in ei.value.message
