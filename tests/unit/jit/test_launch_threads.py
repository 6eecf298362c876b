"""NOTE [the launching thread works too] (jit/runtime.py): a multi-block launch runs one worker context on the
launching thread and the others on the pool; pool workers that have not started when every block is done are
cancelled, not waited for."""

from __future__ import annotations

import threading

import numpy as np

from jit import compile_module
from jit.runtime import _pool
from tests.unit.jit.helpers import HEADER, pack

FILL = (
    HEADER
    + """
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<6>; .reg .b64 %rd<4>;
  mov.u32 %r1, %ctaid.x; mov.u32 %r2, %ntid.x; mov.u32 %r3, %tid.x; mad.lo.s32 %r4, %r1, %r2, %r3;
  ld.param.u64 %rd1, [out]; mul.wide.u32 %rd2, %r4, 4; add.s64 %rd3, %rd1, %rd2;
  add.u32 %r5, %r4, 1; st.global.u32 [%rd3], %r5;
  ret;
}
"""
)


def test_a_launch_completes_while_the_pool_is_busy() -> None:
    """Every pool thread is held by someone else: the launching thread runs all blocks itself, the queued workers
    are cancelled, and the launch returns without waiting for the pool."""
    k = compile_module(FILL, tier="quick").get_kernel("k")
    pool = _pool()
    release = threading.Event()
    held = [pool.submit(release.wait) for _ in range(pool._max_workers)]  # noqa: SLF001
    try:
        out = np.zeros(64 * 32, np.uint32)
        run = threading.Thread(target=k.launch, args=(64, 32, 0, pack(k, out)), kwargs={"workers": pool._max_workers})  # noqa: SLF001
        run.start()
        run.join(10.0)
        assert not run.is_alive(), "the launch waited for the busy pool"
        assert (out == np.arange(1, out.size + 1)).all()
    finally:
        release.set()
        for f in held:
            f.result()


def test_many_blocks_spread_and_all_run() -> None:
    k = compile_module(FILL, tier="quick").get_kernel("k")
    for grid in (2, 3, 97, 5000):
        out = np.zeros(grid * 64, np.uint32)
        k.launch(grid, 64, 0, pack(k, out))
        assert (out == np.arange(1, out.size + 1)).all(), grid
