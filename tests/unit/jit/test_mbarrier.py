"""NOTE [mbarrier]: shared-memory barrier objects, waited on in polling loops that must yield on the CPU."""

from __future__ import annotations

import numpy as np
import pytest

from jit.errors import JitError
from tests.unit.jit.helpers import HEADER, launch

# Every thread stores to s[t], arrives, polls until the phase completes, then reads its neighbour's slot: a
# neighbour that has not arrived yet (threads run one after another) must get to run while the others poll.
# Then a second phase on the same barrier (s2[t] = s[t+1] + 1000, waited on by parity, read back from the left
# neighbour); arrive's state gives the pending count.
TWO_PHASES = (
    HEADER
    + """
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<16>; .reg .b64 %rd<16>; .reg .pred %p<4>;
  .shared .align 8 .b64 bar;
  .shared .align 4 .b32 s[256];
  .shared .align 4 .b32 s2[256];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ntid.x;
  setp.ne.u32 %p1, %r1, 0;
  @%p1 bra INIT_DONE;
  mbarrier.init.shared.b64 [bar], %r2;
INIT_DONE:
  bar.sync 0;
  mul.lo.u32 %r3, %r1, 3;
  mov.u32 %r4, s; shl.b32 %r5, %r1, 2; add.u32 %r6, %r4, %r5;
  st.shared.u32 [%r6], %r3;
  mbarrier.arrive.shared.b64 %rd1, [bar];
  mbarrier.pending_count.b64 %r12, %rd1;
WAIT1:
  mbarrier.test_wait.shared.b64 %p2, [bar], %rd1;
  @!%p2 bra WAIT1;
  add.u32 %r7, %r1, 1; rem.u32 %r7, %r7, %r2; shl.b32 %r7, %r7, 2; add.u32 %r7, %r4, %r7;
  ld.shared.u32 %r8, [%r7];
  add.u32 %r9, %r8, 1000;
  mov.u32 %r13, s2; add.u32 %r14, %r13, %r5;
  st.shared.u32 [%r14], %r9;
  mbarrier.arrive.shared.b64 _, [bar];
WAIT2:
  mbarrier.try_wait.parity.shared.b64 %p3, [bar], 1;
  @!%p3 bra WAIT2;
  sub.u32 %r10, %r1, 1; add.u32 %r10, %r10, %r2; rem.u32 %r10, %r10, %r2; shl.b32 %r10, %r10, 2;
  add.u32 %r10, %r13, %r10; ld.shared.u32 %r11, [%r10];
  ld.param.u64 %rd2, [out]; mul.wide.u32 %rd3, %r1, 8; add.s64 %rd4, %rd2, %rd3;
  st.global.u32 [%rd4], %r11; st.global.u32 [%rd4+4], %r12;
  ret;
}
"""
)


@pytest.mark.parametrize("n", [256, 96, 1])
def test_two_phases_with_polling_threads(n: int) -> None:
    out = np.zeros((n, 2), np.uint32)
    launch(TWO_PHASES, "k", (2,), (n,), out)
    t = np.arange(n)
    # phase 2 reads its left neighbour's value, which is 1000 + 3 * (the left neighbour's right neighbour = t)
    assert (out[:, 0] == 3 * t + 1000).all()
    # each arrival of phase 1 saw a different pending count (the state is the word before the arrival): 1..n
    assert sorted(out[:, 1].tolist()) == list(range(1, n + 1))


# Thread 0 arrives and drops out of the barrier; the rest arrive twice. The second phase expects one arrival fewer.
# cp.async + cp.async.mbarrier.arrive.noinc: the completion of the copy counts as the thread's arrival.
DROP_AND_ASYNC = (
    HEADER
    + """
.visible .entry k(.param .u64 src, .param .u64 out)
{
  .reg .b32 %r<16>; .reg .b64 %rd<16>; .reg .pred %p<4>;
  .shared .align 8 .b64 bar;
  .shared .align 8 .b64 bar2;
  .shared .align 4 .b32 s[256];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ntid.x;
  setp.ne.u32 %p1, %r1, 0;
  @%p1 bra INIT_DONE;
  mbarrier.init.shared.b64 [bar], %r2;
  mbarrier.init.shared.b64 [bar2], %r2;
INIT_DONE:
  bar.sync 0;
  ld.param.u64 %rd1, [src]; mul.wide.u32 %rd2, %r1, 4; add.s64 %rd3, %rd1, %rd2;
  mov.u32 %r4, s; shl.b32 %r5, %r1, 2; add.u32 %r6, %r4, %r5;
  cp.async.ca.shared.global [%r6], [%rd3], 4;
  cp.async.mbarrier.arrive.noinc.shared.b64 [bar2];
WAITC:
  mbarrier.test_wait.parity.shared.b64 %p3, [bar2], 0;
  @!%p3 bra WAITC;
  setp.eq.u32 %p2, %r1, 0;
  @!%p2 bra STAY;
  mbarrier.arrive_drop.shared.b64 _, [bar];
  bra.uni OUT;
STAY:
  mbarrier.arrive.shared.b64 %rd5, [bar];
W1:
  mbarrier.test_wait.shared.b64 %p3, [bar], %rd5;
  @!%p3 bra W1;
  mbarrier.arrive.shared.b64 %rd6, [bar];
W2:
  mbarrier.test_wait.shared.b64 %p3, [bar], %rd6;
  @!%p3 bra W2;
OUT:
  add.u32 %r7, %r1, 1; rem.u32 %r7, %r7, %r2; shl.b32 %r7, %r7, 2; add.u32 %r7, %r4, %r7;
  ld.shared.u32 %r8, [%r7];
  ld.param.u64 %rd7, [out]; add.s64 %rd8, %rd7, %rd2; st.global.u32 [%rd8], %r8;
  ret;
}
"""
)


def test_arrive_drop_and_async_copy_arrivals() -> None:
    n = 128
    src = np.arange(n, dtype=np.uint32) * 7 + 1
    out = np.zeros(n, np.uint32)
    launch(DROP_AND_ASYNC, "k", (3,), (n,), src, out)  # hangs if the dropped arrival is still expected
    assert (out == np.roll(src, -1)).all()


# Transaction counts (sm_90): thread 0 arrives with expect_tx(512); the last thread, after its own arrival, copies
# the 512-byte source into shared memory in two steps that complete on the barrier: a bulk copy of 256 bytes, then a
# plain copy whose 256 bytes it reports with mbarrier.complete_tx. The phase may complete only after both, whatever
# order the threads arrive in; everyone then reads the tile.
TX = (
    HEADER.replace("sm_80", "sm_90").replace("7.8", "8.0")
    + """
.visible .entry k(.param .u64 src, .param .u64 out)
{
  .reg .b32 %r<20>; .reg .b64 %rd<16>; .reg .pred %p<6>;
  .shared .align 8 .b64 bar;
  .shared .align 16 .b8 tile[512];
  mov.u32 %r1, %tid.x; mov.u32 %r2, %ntid.x;
  setp.ne.u32 %p1, %r1, 0;
  @%p1 bra INIT_DONE;
  mbarrier.init.shared::cta.b64 [bar], %r2;
INIT_DONE:
  bar.sync 0;
  mov.u32 %r3, 0; mov.u32 %r4, 0;
  @%p1 bra PLAIN;
  mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 %rd1, [bar], 512;
  bra.uni ARRIVED;
PLAIN:
  mbarrier.arrive.shared::cta.b64 %rd1, [bar];
ARRIVED:
  sub.u32 %r5, %r2, 1;
  setp.ne.u32 %p2, %r1, %r5;
  @%p2 bra WAIT;
  mbarrier.test_wait.shared::cta.b64 %p3, [bar], %rd1;
  selp.u32 %r3, 1, 0, %p3;
  ld.param.u64 %rd2, [src];
  mov.u32 %r6, tile; mov.u32 %r7, bar;
  cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r6], [%rd2], 256, [%r7];
  mbarrier.test_wait.shared::cta.b64 %p4, [bar], %rd1;
  selp.u32 %r4, 1, 0, %p4;
  add.u32 %r8, %r6, 256; add.s64 %rd3, %rd2, 256;
  cp.async.ca.shared.global [%r8], [%rd3], 16; cp.async.ca.shared.global [%r8+16], [%rd3+16], 16;
  mov.u32 %r9, 32;
COPY:
  add.u32 %r10, %r8, %r9; cvt.u64.u32 %rd4, %r9; add.s64 %rd5, %rd3, %rd4;
  ld.global.u32 %r11, [%rd5]; st.shared.u32 [%r10], %r11;
  add.u32 %r9, %r9, 4; setp.lt.u32 %p5, %r9, 256; @%p5 bra COPY;
  mbarrier.complete_tx.relaxed.cta.shared::cta.b64 [bar], 256;
WAIT:
  mbarrier.try_wait.shared::cta.b64 %p3, [bar], %rd1;
  @!%p3 bra WAIT;
  add.u32 %r12, %r1, 1; rem.u32 %r12, %r12, 128; shl.b32 %r12, %r12, 2;
  mov.u32 %r13, tile; add.u32 %r13, %r13, %r12; ld.shared.u32 %r14, [%r13];
  ld.param.u64 %rd6, [out]; mul.wide.u32 %rd7, %r1, 12; add.s64 %rd8, %rd6, %rd7;
  st.global.u32 [%rd8], %r14; st.global.u32 [%rd8+4], %r3; st.global.u32 [%rd8+8], %r4;
  ret;
}
"""
)


@pytest.mark.parametrize("n", [128, 32, 1])
def test_transaction_counts(n: int) -> None:
    src = np.arange(128, dtype=np.uint32) * 5 + 3
    out = np.zeros((n, 3), np.uint32)
    launch(TX, "k", (2,), (n,), src, out)  # hangs if the phase never completes
    assert (out[:, 0] == np.roll(src, -1)[:n]).all()
    # the last thread's polls: before the copies (expect_tx still owed) and between them, the phase is open
    assert out[n - 1, 1] == 0 and out[n - 1, 2] == 0


def test_tensor_map_and_multicast_copies_are_not_supported() -> None:
    for form in (
        "cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd1, {%r1}], [%r1];",
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%r1], [%rd1], 16, [%r1], %rs1;",
    ):
        ptx = (
            HEADER
            + """
.visible .entry k(.param .u64 p)
{
  .reg .b64 %rd<2>; .reg .b32 %r<2>; .reg .b16 %rs<2>;
  ld.param.u64 %rd1, [p]; mov.u32 %r1, 0; mov.u16 %rs1, 1;
  """
            + form
            + """
  ret;
}
"""
        )
        with pytest.raises(JitError) as ei:
            launch(ptx, "k", (1,), (1,), np.zeros(4, np.uint32))
        assert ei.value.code == 801 and "cp.async.bulk" in ei.value.message, form
