"""The PTX mutation fuzzer (tests/fuzz_ptx.py) against a real gpud, bounded in time (WOOLY_FUZZ_SECONDS) and seeded
(WOOLY_FUZZ_SEED): no crash, no hang, and enough modules tried that the run means something."""

from __future__ import annotations

import os

from tests.conftest import start
from tests.fuzz_ptx import KERNEL_S, run

FUZZ_SECONDS = float(os.environ.get("WOOLY_FUZZ_SECONDS", "45"))
SEED = int(os.environ.get("WOOLY_FUZZ_SEED", "20261203"))


def test_mutated_ptx_never_crashes_or_hangs_gpud() -> None:
    g = start("ipc", extra_args=["--tenant", f"fuzz:max_kernel_s={KERNEL_S}"])
    try:
        stats = run(g.endpoint, FUZZ_SECONDS, SEED, alive=lambda: g.proc.poll() is None)
    finally:
        g.stop()
    assert stats["crashes"] == 0, stats.get("crash_text")
    assert stats["hangs"] == 0, stats.get("hang_texts", [""])[0]
    assert stats["modules"] >= 20 and stats["launches"] >= 5, stats
    outcomes = stats["outcomes"]
    assert outcomes.get("ok", 0) > 0 and len(outcomes) > 1, outcomes  # some run, some are refused
