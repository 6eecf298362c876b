"""Per-tenant executor processes (NOTE [executors] in gpud/executors.py), against a real gpud: ops that read out
of bounds reach only their own tenant's process, an executor that dies (segfault, SIGKILL, a runaway op past
max_kernel_s) fails only its tenant's sessions with a clear sticky error, its memory is given back, and gpud and
the other tenant go on. The gpud here lets executors run unsafe ops, so the reads really happen."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import ROOT, _env, check, run_wooly

SCRIPTS = ROOT / "tests" / "integration" / "torch" / "scripts"


@pytest.fixture(scope="module")
def unsafe_gpud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    from woolyhv.launcher import start_gpud

    cfg = tmp_path_factory.mktemp("executors") / "gpud.toml"
    cfg.write_text("[aten]\npermit_unsafe = true\n\n[tenants.slow]\nmax_kernel_s = 0.5\n")
    endpoint, proc = start_gpud(log_level="warning", extra_args=["--config", str(cfg)])
    yield endpoint, proc
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


def _tenants(endpoint: str) -> dict[str, dict[str, object]]:
    from woolyhv.top import admin_call

    return {t["tenant"]: t for t in admin_call(endpoint)["hypervisor"]["tenants"]}


def _victim(endpoint: str) -> subprocess.Popen[str]:
    victim = subprocess.Popen(
        [sys.executable, "-m", "woolyhv", "run", str(SCRIPTS / "tenant_victim.py")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env({"WOOLY_SERVER": endpoint, "WOOLY_TENANT": "victim"}),
        cwd=str(ROOT),
    )
    assert victim.stdout.readline().strip() == "ready"
    return victim


def _intact(victim: subprocess.Popen[str]) -> None:
    stdout, stderr = victim.communicate("go\n", timeout=120)
    assert victim.returncode == 0 and stdout.strip() == "intact", stderr[-2000:]


def _lines(out: str) -> dict[str, str]:
    return dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)


def _alive(proc: subprocess.Popen[bytes]) -> None:
    assert proc.poll() is None, "gpud died"


def test_unsafe_ops_read_only_their_own_tenants_process(unsafe_gpud: tuple[str, subprocess.Popen[bytes]]) -> None:
    endpoint, proc = unsafe_gpud
    victim = _victim(endpoint)
    try:
        out = check(run_wooly(endpoint, SCRIPTS / "tenant_unsafe.py", env={"WOOLY_TENANT": "mallory"}, timeout=240))
        lines = _lines(out)
        assert "attacker done" in out, out
        # the unsafe ops ran (gpud refuses them without executors), and saw none of the victim's data
        assert lines["segment_reduce_unsafe"].startswith("ran, no leak"), lines
        _alive(proc)
        _intact(victim)
    finally:
        if victim.poll() is None:
            victim.kill()


def _wait_gone(endpoint: str, tenant: str, timeout: float = 10.0) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while True:
        t = _tenants(endpoint).get(tenant, {"memory_used": 0, "executor_pid": None})
        if (t["memory_used"] == 0 and not t["executor_pid"]) or time.monotonic() > deadline:
            return t
        time.sleep(0.1)


def test_a_segfaulting_op_fails_its_tenant_only(unsafe_gpud: tuple[str, subprocess.Popen[bytes]]) -> None:
    endpoint, proc = unsafe_gpud
    victim = _victim(endpoint)
    try:
        out = check(
            run_wooly(endpoint, SCRIPTS / "tenant_crash.py", "segv", env={"WOOLY_TENANT": "crasher"}, timeout=120)
        )
        lines = _lines(out)
        assert "CUDA_ERROR_LAUNCH_FAILED" in lines["op"] and "SIGSEGV" in lines["op"], lines
        assert "executor of tenant 'crasher'" in lines["op"], lines
        assert "CUDA_ERROR_LAUNCH_FAILED" in lines["next"], lines  # sticky, as a crashed context is
        _alive(proc)
        _intact(victim)
        gone = _wait_gone(endpoint, "crasher")
        assert gone["memory_used"] == 0 and not gone["executor_pid"], gone
    finally:
        if victim.poll() is None:
            victim.kill()


def test_an_executor_killed_from_outside(unsafe_gpud: tuple[str, subprocess.Popen[bytes]]) -> None:
    endpoint, proc = unsafe_gpud
    victim = _victim(endpoint)
    target = subprocess.Popen(
        [sys.executable, "-m", "woolyhv", "run", str(SCRIPTS / "tenant_crash.py"), "wait"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env({"WOOLY_SERVER": endpoint, "WOOLY_TENANT": "oomkilled"}),
        cwd=str(ROOT),
    )
    try:
        assert target.stdout.readline().strip() == "ready"
        info = _tenants(endpoint)
        pid = info["oomkilled"]["executor_pid"]
        assert isinstance(pid, int) and pid != info["victim"]["executor_pid"], info
        assert info["oomkilled"]["memory_used"] >= 4 << 20
        with open(f"/proc/{pid}/comm") as f:
            assert f.read().strip().startswith("wooly-x:")
        os.kill(pid, signal.SIGKILL)  # what the kernel's OOM killer does
        stdout, stderr = target.communicate("go\n", timeout=60)
        lines = _lines(stdout)
        assert "SIGKILL" in lines["op"] and "CUDA_ERROR_LAUNCH_FAILED" in lines["op"], (lines, stderr[-2000:])
        assert "CUDA_ERROR_LAUNCH_FAILED" in lines["next"], lines
        _alive(proc)
        _intact(victim)
        assert _wait_gone(endpoint, "oomkilled")["memory_used"] == 0
    finally:
        for p in (victim, target):
            if p.poll() is None:
                p.kill()


def test_executors_are_confined(unsafe_gpud: tuple[str, subprocess.Popen[bytes]]) -> None:
    """NOTE [executor sandbox]: the process holding a tenant's tensors runs with no capabilities, no new
    privileges and a seccomp filter (the unit tests probe what that refuses), and gpud reports its layers."""
    from gpud.sandbox import landlock_abi

    endpoint, proc = unsafe_gpud
    victim = _victim(endpoint)
    try:
        info = _tenants(endpoint)["victim"]
        with open(f"/proc/{info['executor_pid']}/status") as f:
            status = {k: v.strip() for k, v in (line.split(":", 1) for line in f)}
        assert (status["NoNewPrivs"], status["Seccomp"], int(status["CapEff"], 16)) == ("1", "2", 0), status
        layers = " ".join(info["executor_sandbox"])  # type: ignore[arg-type]
        assert "seccomp" in layers and "no capabilities" in layers, info
        if landlock_abi() >= 6:
            assert "landlock files" in layers and "landlock scopes" in layers, info
        _alive(proc)
        _intact(victim)  # its ops ran confined
    finally:
        if victim.poll() is None:
            victim.kill()


def test_a_runaway_op_is_stopped_at_max_kernel_s(unsafe_gpud: tuple[str, subprocess.Popen[bytes]]) -> None:
    endpoint, proc = unsafe_gpud
    t0 = time.monotonic()
    out = check(run_wooly(endpoint, SCRIPTS / "tenant_crash.py", "slow", env={"WOOLY_TENANT": "slow"}, timeout=120))
    lines = _lines(out)
    assert "CUDA_ERROR_LAUNCH_TIMEOUT" in lines["op"] and "max_kernel_s" in lines["op"], lines
    assert "CUDA_ERROR_LAUNCH_TIMEOUT" in lines["next"], lines
    assert time.monotonic() - t0 < 60
    _alive(proc)


def test_executors_end_with_their_sessions(unsafe_gpud: tuple[str, subprocess.Popen[bytes]]) -> None:
    endpoint, _ = unsafe_gpud
    check(run_wooly(endpoint, SCRIPTS / "tenant_crash.py", "none", env={"WOOLY_TENANT": "brief"}, timeout=120))
    gone = _wait_gone(endpoint, "brief")
    assert not gone["executor_pid"], gone
    comms = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                comms.append((p / "comm").read_text().strip())
            except OSError:
                pass
    assert "wooly-x:brief" not in comms
