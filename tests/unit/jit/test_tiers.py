"""NOTE [compile tiers] (jit/compiler.py): quick code at once, optimised code switched in when a background
compile lands; the optimised object goes to the caches so the next compile of the same PTX starts optimised."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

import jit
import jit.compiler as jc
from jit import JitError
from tests.unit.jit.helpers import HEADER, pack

# out[i] = a[i] * 3 + i (grid-stride): the same values from either tier
PTX = (
    HEADER
    + """
.visible .entry k(.param .u64 out, .param .u64 a, .param .u32 n)
{
  .reg .b32 %r<12>; .reg .b64 %rd<8>; .reg .pred %p<2>;
  ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [a]; ld.param.u32 %r1, [n];
  mov.u32 %r2, %tid.x; mov.u32 %r3, %ctaid.x; mov.u32 %r4, %ntid.x; mad.lo.u32 %r5, %r3, %r4, %r2;
  mov.u32 %r6, %nctaid.x; mul.lo.u32 %r7, %r6, %r4;
LOOP:
  setp.ge.u32 %p1, %r5, %r1; @%p1 bra DONE;
  mul.wide.u32 %rd3, %r5, 4; add.s64 %rd4, %rd2, %rd3; ld.global.u32 %r8, [%rd4];
  mad.lo.u32 %r9, %r8, 3, %r5; add.s64 %rd5, %rd1, %rd3; st.global.u32 [%rd5], %r9;
  add.u32 %r5, %r5, %r7; bra LOOP;
DONE:
  ret;
}
"""
)


@pytest.fixture
def tiers(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Tiering on (the test suite turns it off by default), a private disk cache, empty in-memory state."""
    monkeypatch.setenv("WOOLY_JIT_TIERS", "1")
    monkeypatch.setenv("WOOLY_JIT_CACHE", "1")
    monkeypatch.setenv("WOOLY_JIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(jc, "_MEM_CACHE", {})
    monkeypatch.setattr(jc, "_QUICK", {})
    monkeypatch.setattr(jc, "_FAILED", set())


def _ptx(salt: int) -> str:
    return PTX + f"// {salt} {np.random.default_rng().integers(1 << 62)}\n"  # a PTX no cache has seen


def _run(mod, n: int = 5000) -> None:  # type: ignore[no-untyped-def]
    k = mod.get_kernel("k")
    a = np.arange(n, dtype=np.uint32) * 7
    out = np.zeros(n, np.uint32)
    k.launch((4,), (128,), 0, pack(k, out, a, n))
    np.testing.assert_array_equal(out, a * 3 + np.arange(n, dtype=np.uint32))


def test_auto_starts_quick_and_switches_to_optimised(tiers) -> None:  # type: ignore[no-untyped-def]
    ptx = _ptx(1)
    m = jit.compile_module(ptx)
    assert m.tier == "quick"
    quick_fn = m.get_kernel("k")._code.fn
    _run(m)
    assert m.wait_optimized(60)
    assert m.tier == "optimized" and m.get_kernel("k")._code.fn is not quick_fn
    _run(m)
    # the optimised compile ran in the background worker, at a lower priority than ours
    bg = jc._BACKGROUND.worker.proc
    assert bg is not None and os.getpriority(os.PRIO_PROCESS, bg.pid) > os.getpriority(os.PRIO_PROCESS, 0)
    # the optimised object is cached now: the next module of this PTX starts optimised, in memory and on disk
    m2 = jit.compile_module(ptx)
    assert m2.tier == "optimized" and m2.get_kernel("k")._code.fn is m.get_kernel("k")._code.fn
    jc._MEM_CACHE.clear()
    assert jit.compile_module(ptx).tier == "optimized"


def test_modules_compiled_while_pending_share_the_switch(tiers) -> None:  # type: ignore[no-untyped-def]
    ptx = _ptx(2)
    a, b = jit.compile_module(ptx), jit.compile_module(ptx)
    assert a.tier == b.tier == "quick" and a.get_kernel("k")._code.fn is b.get_kernel("k")._code.fn
    assert a.wait_optimized(60) and b.wait_optimized(60)
    assert a.get_kernel("k")._code.fn is b.get_kernel("k")._code.fn


def test_launches_during_the_switch_stay_correct(tiers) -> None:  # type: ignore[no-untyped-def]
    m = jit.compile_module(_ptx(3))
    errors: list[BaseException] = []
    seen: set[str] = set()

    def loop() -> None:
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                seen.add(m.tier)
                _run(m, 3000)
                if "optimized" in seen:  # launched on both sides of the switch
                    return
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    t = threading.Thread(target=loop)
    t.start()
    t.join(120)
    assert not errors, errors
    assert seen == {"quick", "optimized"}


def test_quick_and_optimized_tiers_on_request(tiers) -> None:  # type: ignore[no-untyped-def]
    q = jit.compile_module(_ptx(4), tier="quick")
    assert q.tier == "quick" and not q.wait_optimized(0.5)
    _run(q)
    o = jit.compile_module(_ptx(5), tier="optimized")
    assert o.tier == "optimized" and o.wait_optimized(0)
    _run(o)
    with pytest.raises(JitError) as ei:
        jit.compile_module(_ptx(6), tier="fastest")
    assert ei.value.code == 1  # CUDA_ERROR_INVALID_VALUE


def test_tiers_off_means_optimised(tiers, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("WOOLY_JIT_TIERS", "0")
    assert jit.compile_module(_ptx(7)).tier == "optimized"


@pytest.mark.parametrize(
    "fault",
    [JitError(218, "PTX compiler worker died (exit status -6); LLVM rejected this module"), OSError("pipe closed")],
)
def test_a_failed_optimised_compile_keeps_the_quick_code(
    tiers,
    monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
    fault: Exception,
) -> None:
    # fault injection: the background worker reports what a crashed LLVM would, or fails in an unexpected way
    def crash(*a, **k):  # type: ignore[no-untyped-def]
        raise fault

    monkeypatch.setattr(jc._BACKGROUND.worker, "compile", crash)
    ptx = _ptx(8)
    m = jit.compile_module(ptx)
    assert not m.wait_optimized(60) and m.tier == "quick"
    assert ("LLVM rejected" if isinstance(fault, JitError) else "OSError: pipe closed") in m._pending.error
    _run(m)
    again = jit.compile_module(ptx)  # no retry: quick code, nothing pending
    assert again.tier == "quick" and again._pending is None


def test_tiers_must_agree_on_layout() -> None:
    meta = {
        "kernels": [{"name": "k", "symbol": "wooly_run_abc_0", "rec_bytes": 64, "static_shared": 32, "num_regs": 40}],
        "dyn_offset": 0,
    }
    # the symbol and the scratch the code lays out for itself per launch may differ (jit.runtime.KernelCode)
    code_only = {
        "kernels": [{"name": "k", "symbol": "wooly_run_abcq_0", "rec_bytes": 72, "static_shared": 32, "num_regs": 40}],
        "dyn_offset": 0,
    }
    assert jc.same_layout(meta, code_only)
    for field, other in (("static_shared", 48), ("num_regs", 41)):
        k = {**meta["kernels"][0], field: other}
        assert not jc.same_layout(meta, {**meta, "kernels": [k]}), field
    assert not jc.same_layout(meta, {**meta, "dyn_offset": 16})


def test_quick_tier_leaves_out_speed_only_passes_and_switches_their_scratch(tiers) -> None:  # type: ignore[no-untyped-def]
    """The quick tier translates without jit/pipeline.py's SPEED_ONLY passes; here that is a lockstep loop, whose
    stash makes the optimised code's thread records larger. Launches running while the switch happens must each
    get records sized for the code they run: every result is checked bit for bit."""
    from jit.pipeline import front_end

    tl = pytest.importorskip("tests.unit.jit.test_lockstep_loops")
    from numba import float32, void

    ptx = tl.ptx_of(tl.k_sum, void(float32[::1], float32[::1])) + f"// {np.random.default_rng().integers(1 << 62)}\n"
    assert front_end(ptx).functions[0].lockstep is not None
    assert front_end(ptx, quick=True).functions[0].lockstep is None
    m = jit.compile_module(ptx)
    k = m.get_kernel(m.kernel_names[0])
    assert m.tier == "quick"
    quick_rec, regs = k._code.rec_bytes, k.num_regs
    grid, block, n = 64, 128, 64 * 128 * 9 + 77
    x = np.random.default_rng(1).random(n, dtype=np.float32)
    want = tl.seq_sum(x, grid * block).view(np.uint32)
    seen: set[str] = set()
    deadline = time.monotonic() + 120
    while "optimized" not in seen and time.monotonic() < deadline:
        tier = m.tier
        out = np.zeros(grid * block, np.float32)
        buf = bytearray(k.param_buffer_size)
        for p, v in zip(k.params, tl.numba_args(x, out), strict=False):
            buf[p.offset : p.offset + p.size] = int(v).to_bytes(p.size, "little", signed=int(v) < 0)
        k.launch((grid,), (block,), 0, bytes(buf), workers=1)
        assert np.array_equal(out.view(np.uint32), want), tier
        seen.add(tier)
    assert seen == {"quick", "optimized"}
    assert k._code.rec_bytes > quick_rec and k.num_regs == regs


@pytest.mark.parametrize("opt", [0, 2])
def test_worker_warm_up_kernel_compiles(opt: int) -> None:
    """jit.worker compiles _WARM_PTX before its first request (a fresh worker's first compile 87-177 -> 38-49 ms);
    a warm-up that failed would go unnoticed (it swallows errors), so the kernel must stay valid."""
    from jit.worker import _WARM_PTX, compile_ptx

    obj, meta = compile_ptx(_WARM_PTX, "cpu", opt)
    assert obj and [k["name"] for k in meta["kernels"]] == ["warm"] and meta["kernels"][0]["scheduler"]
