"""Hostile kernels against a real gpud (issue: hostile kernels and hostile clients): wild .shared/.local accesses
through another tenant's address, a store to address 0x40, endless recursion, absurd declarations, a kernel that
never ends. Each is a CUDA error for the offending tenant only: gpud keeps serving, and the other tenant's memory
and results are bit-exact."""

from __future__ import annotations

import os
import struct
import threading
import time

import numpy as np
import pytest

from proto.errors import CudaError
from tests.conftest import connect, start
from tests.integration.test_kernels import SAXPY

HEADER = b".version 7.0\n.target sm_80\n.address_size 64\n"
SIG = b".visible .entry k(.param .u64 p, .param .u64 o)\n{ .reg .b64 %rd<4>; .reg .b32 %r<3>; .shared .align 4 .b32 s[4];\n"
WILD = {
    "ld.shared through the victim's address": b"ld.param.u64 %rd1, [p]; ld.param.u64 %rd2, [o]; ld.shared.u32 %r1, [%rd1]; st.global.u32 [%rd2], %r1;",
    "st.shared through the victim's address": b"ld.param.u64 %rd1, [p]; mov.u32 %r1, 7; st.shared.u32 [%rd1], %r1;",
    "ld.local through the victim's address": b"ld.param.u64 %rd1, [p]; ld.param.u64 %rd2, [o]; ld.local.u32 %r1, [%rd1]; st.global.u32 [%rd2], %r1;",
    "st.local through the victim's address": b"ld.param.u64 %rd1, [p]; mov.u32 %r1, 7; st.local.u32 [%rd1], %r1;",
    "st.local to 0x40": b"mov.u64 %rd1, 64; mov.u32 %r1, 7; st.local.u32 [%rd1], %r1;",
    "ld.const through the victim's address": b"ld.param.u64 %rd1, [p]; ld.param.u64 %rd2, [o]; ld.const.u32 %r1, [%rd1]; st.global.u32 [%rd2], %r1;",
}
RECURSE = (
    b".func f(.param .u32 a)\n{ .reg .b32 %r<3>; ld.param.u32 %r1, [a]; add.u32 %r1, %r1, 1;\n"
    b"{ .param .u32 b; st.param.u32 [b], %r1; call f, (b); }\nret; }\n"
)
SPIN = HEADER + b".visible .entry spin(.param .u64 o)\n{\n$L: bra.uni $L;\nret;\n}\n"


@pytest.fixture(scope="module")
def gpud():
    g = start("tcp", extra_args=["--tenant", "mallory:max_kernel_s=1"])
    yield g
    g.stop()


def _saxpy(d, n: int = 4096) -> np.ndarray:
    x = np.arange(n, dtype=np.float32)
    px, py = d.mem_alloc(4 * n), d.mem_alloc(4 * n)
    d.memcpy_htod(px, x)
    d.memcpy_htod(py, np.ones(n, dtype=np.float32))
    fn = d.module_get_function(d.module_load_data(SAXPY), "saxpy")
    d.launch_kernel(
        fn,
        ((n + 255) // 256, 1, 1),
        (256, 1, 1),
        fn.pack_params([struct.pack("<Q", px), struct.pack("<Q", py), struct.pack("<f", 2.0), struct.pack("<I", n)]),
    )
    return np.frombuffer(bytes(d.memcpy_dtoh(py, 4 * n)), dtype=np.float32)


def _expect_error(d, name: str, call) -> CudaError:  # noqa: ANN001
    with pytest.raises(CudaError) as e:
        call()
        d.ctx_synchronize()
    assert e.value.name == name, e.value
    return e.value


@pytest.mark.parametrize("case", sorted(WILD))
def test_wild_state_space_access_is_the_attackers_error_only(gpud, case: str) -> None:
    victim, attacker = connect(gpud.endpoint, tenant="victim"), connect(gpud.endpoint, tenant="mallory")
    try:
        secret = victim.mem_alloc(4096)
        victim.memcpy_htod(secret, b"\x11" * 4096)
        victim.ctx_synchronize()
        out = attacker.mem_alloc(64)
        attacker.memcpy_htod(out, bytes(64))
        fn = attacker.module_get_function(attacker.module_load_data(HEADER + SIG + WILD[case] + b"\nret; }\n"), "k")
        params = struct.pack("<QQ", secret, out)
        _expect_error(
            attacker, "CUDA_ERROR_ILLEGAL_ADDRESS", lambda: attacker.launch_kernel(fn, (1, 1, 1), (1, 1, 1), params)
        )
        assert bytes(victim.memcpy_dtoh(secret, 4096)) == b"\x11" * 4096  # not written
        assert np.array_equal(_saxpy(victim), 2 * np.arange(4096, dtype=np.float32) + 1)  # the victim still works
    finally:
        victim.conn.close()
        attacker.conn.close()
    assert gpud.proc.poll() is None


def test_endless_recursion_fails_the_launch(gpud) -> None:
    d = connect(gpud.endpoint)
    try:
        ptx = (
            HEADER + RECURSE + SIG + b"mov.u32 %r1, 0; { .param .u32 b; st.param.u32 [b], %r1; call f, (b); }\nret; }\n"
        )
        fn = d.module_get_function(d.module_load_data(ptx), "k")
        err = _expect_error(
            d, "CUDA_ERROR_LAUNCH_FAILED", lambda: d.launch_kernel(fn, (2, 1, 1), (32, 1, 1), struct.pack("<QQ", 0, 0))
        )
        assert "recursion" in err.message
    finally:
        d.conn.close()
    assert gpud.proc.poll() is None


@pytest.mark.parametrize(
    "decl",
    [
        b".reg .b64 %r<4294967295>;",
        b".shared .b8 x[18446744073709551615];",
        b".local .b8 x[4000000000];",
        b".shared .align 3 .b8 y[4];",
    ],
)
def test_absurd_declarations_are_refused_at_once(gpud, decl: bytes) -> None:
    d = connect(gpud.endpoint)
    try:
        t = time.monotonic()
        with pytest.raises(CudaError) as e:
            d.module_get_function(d.module_load_data(HEADER + b".visible .entry k()\n{\n" + decl + b"\nret;\n}\n"), "k")
        assert e.value.name == "CUDA_ERROR_INVALID_PTX" and e.value.message.startswith("6:")  # line 6, and column
        assert time.monotonic() - t < 10
        assert np.array_equal(_saxpy(d), 2 * np.arange(4096, dtype=np.float32) + 1)  # the session goes on
    finally:
        d.conn.close()


def test_runaway_kernel_is_stopped_and_others_run(gpud) -> None:
    """mallory's max_kernel_s (1 s) ends a kernel that never ends; another tenant's saxpy runs meanwhile and after,
    bit-exact."""
    other, mallory = connect(gpud.endpoint, tenant="other"), connect(gpud.endpoint, tenant="mallory", timeout_s=20)
    try:
        fn = mallory.module_get_function(mallory.module_load_data(SPIN), "spin")
        t = time.monotonic()
        mallory.launch_kernel(fn, (1, 1, 1), (1, 1, 1), struct.pack("<Q", 0))
        results = []
        th = threading.Thread(target=lambda: results.append(_saxpy(other)))
        th.start()
        with pytest.raises(CudaError) as e:
            mallory.ctx_synchronize()
        took = time.monotonic() - t
        assert e.value.name == "CUDA_ERROR_LAUNCH_TIMEOUT" and "1 s" in e.value.message
        assert 0.9 < took < 6
        th.join(30)
        assert results and np.array_equal(results[0], 2 * np.arange(4096, dtype=np.float32) + 1)
    finally:
        other.conn.close()
        mallory.conn.close()


def test_kernel_of_a_dead_client_stops(gpud) -> None:
    """A client that closes while its kernel spins (no max_kernel_s for its tenant): the kernel stops with the
    session, and the cores are free again (a saxpy of another session does not wait for it)."""
    d = connect(gpud.endpoint, tenant="nolimit")
    _spin(d, 2)
    assert _cpu_s(gpud.proc.pid, 0.5) > 0.5  # two spinning blocks: about two cores busy
    d.conn.close()  # bye: the session closes with its kernel running
    time.sleep(0.3)
    assert _cpu_s(gpud.proc.pid, 1.0) < 0.5  # stopped: gpud is idle again
    other = connect(gpud.endpoint, tenant="other")
    try:
        t = time.monotonic()
        assert np.array_equal(_saxpy(other), 2 * np.arange(4096, dtype=np.float32) + 1)
        assert time.monotonic() - t < 10
    finally:
        other.conn.close()


def _spin(d, blocks: int) -> None:  # noqa: ANN001
    """Start SPIN in ``blocks`` blocks and let it run a moment (launches are batched: sent by the sync)."""
    fn = d.module_get_function(d.module_load_data(SPIN), "spin")
    d.launch_kernel(fn, (blocks, 1, 1), (1, 1, 1), struct.pack("<Q", 0))
    d.synchronize_errors()
    time.sleep(0.3)


def _cpu_s(pid: int, over: float) -> float:
    """CPU seconds process ``pid`` used during the next ``over`` seconds."""

    def used() -> float:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    a = used()
    time.sleep(over)
    return used() - a


def test_sigterm_stops_gpud_with_a_kernel_running() -> None:
    g = start("tcp")
    d = connect(g.endpoint)
    try:
        _spin(d, 2)
        t = time.monotonic()
        g.proc.terminate()
        g.proc.wait(10)
        assert time.monotonic() - t < 2.0
    finally:
        g.stop()
        try:
            d.conn.close()
        except Exception:  # noqa: BLE001 - gpud is gone
            pass


def test_a_spinning_block_does_not_hold_other_tenants(gpud) -> None:
    """A tenant with no max_kernel_s spinning in one block holds one core: another tenant's work runs on the other
    (NOTE [spatial sharing] in jit/cores.py), where time slicing kept it waiting until the spinner ended."""
    spinner = connect(gpud.endpoint, tenant="spinner")
    other = connect(gpud.endpoint, tenant="other")
    try:
        _spin(spinner, 1)
        t = time.monotonic()
        for _ in range(3):
            assert np.array_equal(_saxpy(other), 2 * np.arange(4096, dtype=np.float32) + 1)
        assert time.monotonic() - t < 10
    finally:
        other.conn.close()
        spinner.conn.close()  # its session ends: the spinning kernel stops
