"""Process lifetimes: dead clients are reclaimed, a dead daemon fails clients fast, the CLI works."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from proto import messages as m
from proto.errors import CudaError
from tests.conftest import ROOT, connect, start

CLIENT = textwrap.dedent(
    """
    import sys, time
    from tests.conftest import connect
    d = connect(sys.argv[1])
    p = d.mem_alloc(256 << 20)
    d.memset(p, 1, 1, 256 << 20)
    d.ctx_synchronize()
    print("READY", flush=True)
    time.sleep(600)
    """
)


def _sessions(endpoint: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "woolyhv", "ps", "--server", endpoint, "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_sigkilled_client_is_reclaimed_and_others_untouched(gpud_tcp):
    survivor = connect(gpud_tcp.endpoint)
    keep = survivor.mem_alloc(1 << 20)
    survivor.memcpy_htod(keep, bytes(range(256)) * 4096)
    proc = subprocess.Popen(
        [sys.executable, "-c", CLIENT, gpud_tcp.endpoint], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    assert proc.stdout.readline().strip() == "READY"
    info = _sessions(gpud_tcp.endpoint)
    assert any(s["pid"] == proc.pid and s["memory_used"] >= 256 << 20 for s in info["sessions"])
    used_before = info["devices"][0]["used"]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        info = _sessions(gpud_tcp.endpoint)
        if not any(s["pid"] == proc.pid for s in info["sessions"]):
            break
        time.sleep(0.2)
    assert not any(s["pid"] == proc.pid for s in info["sessions"]), "killed client's session still alive after 5 s"
    assert info["devices"][0]["used"] <= used_before - (256 << 20)
    assert bytes(survivor.memcpy_dtoh(keep, 1 << 20)) == bytes(range(256)) * 4096
    survivor.conn.close()


def test_killed_daemon_fails_client_fast():
    g = start("tcp")
    d = connect(g.endpoint, timeout_s=3.0)
    p = d.mem_alloc(1024)
    g.stop(signal.SIGKILL)
    t = time.monotonic()
    with pytest.raises(CudaError) as e:
        d.memcpy_dtoh(p, 1024)
    assert time.monotonic() - t < 6
    assert e.value.name == "CUDA_ERROR_DEVICE_UNAVAILABLE" and "stopped answering" in e.value.message
    t = time.monotonic()
    with pytest.raises(CudaError):  # later calls fail at once
        d.mem_get_info()
    assert time.monotonic() - t < 0.5


def test_a_torch_program_whose_daemon_dies_gets_one_clean_error(tmp_path) -> None:
    pytest.importorskip("torch")
    g = start("tcp")
    script = tmp_path / "die.py"
    script.write_text(
        textwrap.dedent("""
        import os, signal, time, torch
        x = torch.randn(64, 64, device="cuda")
        float(x.sum())
        os.kill(int(os.environ["GPUD_PID"]), signal.SIGKILL)
        t = time.monotonic()
        try:
            float((x @ x).sum())
        finally:
            print(f"failed after {time.monotonic() - t:.2f} s", flush=True)
    """)
    )
    env = dict(os.environ, WOOLY_SERVER=g.endpoint, GPUD_PID=str(g.proc.pid), WOOLY_TIMEOUT_S="2")
    p = subprocess.run(
        [sys.executable, "-m", "woolyhv", "run", str(script)], env=env, capture_output=True, text=True, timeout=120
    )
    g.stop()
    # `wooly run` reports the lost session in one line (exit 75, EX_TEMPFAIL) instead of a traceback through the shim
    assert p.returncode == 75, p.stderr[-2000:]
    assert len(p.stderr.strip().splitlines()) == 1 and "CUDA_ERROR_DEVICE_UNAVAILABLE" in p.stderr, p.stderr
    took = float(p.stdout.split("failed after ")[1].split()[0])
    assert took < 2 + 1.5, p.stdout
    assert "stopped answering (no reply in 2.0 s): the daemon or its host went away" in p.stderr
    assert "Exception ignored" not in p.stderr and "__del__" not in p.stderr, p.stderr[-2000:]


def test_sigterm_shuts_down_cleanly():
    g = start("ipc")
    d = connect(g.endpoint)
    d.mem_alloc(1 << 20)
    assert g.stop(signal.SIGTERM) == 0
    assert not os.path.exists(g.endpoint[len("ipc://") :])


def test_connect_to_nothing_fails_clearly():
    t = time.monotonic()
    with pytest.raises(CudaError) as e:
        connect("tcp://127.0.0.1:1", connect_timeout_s=1.5)
    assert e.value.name == "CUDA_ERROR_DEVICE_UNAVAILABLE"
    assert time.monotonic() - t < 4


def _wooly(
    *args: str, env: dict | None = None, input: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    full_env.pop("WOOLY_SERVER", None) if env is None or "WOOLY_SERVER" not in env else None
    return subprocess.run(
        [sys.executable, "-m", "woolyhv", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=full_env,
        input=input,
        timeout=timeout,
    )


def test_wooly_run_embedded_passes_exit_code_args_and_stdin(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(
        textwrap.dedent(
            """
            import os, sys
            from shim.runtime import driver
            d = driver()
            p = d.mem_alloc(16)
            d.memcpy_htod(p, sys.stdin.read().encode()[:16].ljust(16, b"."))
            print(bytes(d.memcpy_dtoh(p, 16)).decode(), sys.argv[1:], os.environ["WOOLY_EMBEDDED"], __name__)
            sys.exit(7)
            """
        )
    )
    out = _wooly("run", str(script), "--flag", "x", input="hello")
    assert out.returncode == 7, out.stderr
    assert "hello..........." in out.stdout and "['--flag', 'x']" in out.stdout and "__main__" in out.stdout


def test_wooly_run_uses_wooly_server_when_set(gpud_tcp, tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(
        "from shim.runtime import driver\nimport os\nd = driver()\nprint(d.conn.endpoint, 'WOOLY_EMBEDDED' in os.environ)\n"
    )
    out = _wooly("run", str(script), env={"WOOLY_SERVER": gpud_tcp.endpoint})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [gpud_tcp.endpoint, "False"]


def test_embedded_gpud_exits_with_the_program(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text("import os\nprint(os.environ['WOOLY_SERVER'])\n")
    out = _wooly("run", str(script))
    assert out.returncode == 0, out.stderr
    path = out.stdout.strip()[len("ipc://") :]
    deadline = time.monotonic() + 5
    while os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not os.path.exists(path), "embedded gpud outlived its program"


def test_wooly_devices_and_version(gpud_tcp):
    out = _wooly("devices", "--json")
    assert out.returncode == 0, out.stderr
    devs = json.loads(out.stdout)["devices"]
    assert any(d["backend"] == "cpu" for d in devs)
    out = _wooly("devices", "--server", gpud_tcp.endpoint)
    assert out.returncode == 0 and "cpu" in out.stdout
    out = _wooly("version")
    assert out.returncode == 0 and "protocol 1" in out.stdout


def test_nested_call_keeps_the_outer_calls_reply(gpud_tcp):
    """NOTE [nested calls] in shim/client.py: a call made while another waits on the same thread (a finaliser
    run by the garbage collector) may read the outer call's reply; it must keep it for its owner."""
    d = connect(gpud_tcp.endpoint)
    c = d.conn
    with c._lock:
        c._rid += 1
        outer = c._rid
        c._pending.add(outer)
        c._send(m.MemGetInfo(rid=outer))  # the outer call, sent; its reply arrives first
        inner = d.mem_get_info()
        value, _ = c._wait(outer, 5.0)
        c._pending.discard(outer)
    assert tuple(value) == inner and not c._stash
    c.close()


def test_explicit_timeout_is_a_deadline_even_while_gpud_answers_pings(gpud_tcp):
    d = connect(gpud_tcp.endpoint)
    c = d.conn
    c._rid += 1
    t = time.monotonic()
    with pytest.raises(CudaError) as e:  # a request nobody answers (its rid is never replied to)
        c._wait(c._rid, 30.0, deadline=time.monotonic() + 1.0)
    assert time.monotonic() - t < 4 and e.value.name == "CUDA_ERROR_DEVICE_UNAVAILABLE"  # 1 s + one receive wait


def test_a_ping_call_is_answered_by_its_pong(gpud_tcp):
    """The staged-copy wait proves gpud alive with a ping call; its answer is a pong carrying the call's rid
    (from c554f96 to this test the client took that pong for 'not an answer' and waited out its timeout)."""
    d = connect(gpud_tcp.endpoint)
    t = time.monotonic()
    assert d.conn.call(m.Ping(), timeout_s=5.0)[0] is None
    assert time.monotonic() - t < 2.0
    d.conn.close()


# Waits `ns` nanoseconds of %globaltimer, then stores 7: a kernel that takes as long as asked, on every backend.
SLOW = b"""
.version 7.0
.target sm_80
.address_size 64
.visible .entry slow(.param .u64 out, .param .u64 ns)
{
    .reg .b64 %rd<6>; .reg .pred %p; .reg .b32 %r;
    ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [ns];
    mov.u64 %rd3, %globaltimer;
$L: mov.u64 %rd4, %globaltimer; sub.u64 %rd5, %rd4, %rd3; setp.lt.u64 %p, %rd5, %rd2; @%p bra $L;
    mov.u32 %r, 7; st.global.u32 [%rd1], %r;
    ret;
}
"""


def test_a_staged_copy_behind_a_long_kernel_completes(gpud):
    """A device-to-host copy through the shared-memory ring queued behind a 2.5 s kernel: the client's wait pings
    gpud after a second and goes on waiting for the flag word (it used to hang there until its timeout)."""
    import struct

    import numpy as np

    d = connect(gpud.endpoint)
    n = 4 << 20
    p = d.mem_alloc(n)
    d.memcpy_htod(p, np.zeros(n, dtype=np.uint8))
    fn = d.module_get_function(d.module_load_data(SLOW), "slow")
    t = time.monotonic()
    d.launch_kernel(fn, (1, 1, 1), (1, 1, 1), fn.pack_params([struct.pack("<Q", p), struct.pack("<Q", 2_500_000_000)]))
    out = bytes(d.memcpy_dtoh(p, n))
    took = time.monotonic() - t
    assert d._staging() is not None  # the copy went through the ring
    assert out[:4] == (7).to_bytes(4, "little") and not any(out[4:])
    assert 2.4 < took < 12.0
    d.conn.close()
