"""Bad configuration is one line naming the variable or flag and what it expects, exit status 2, no traceback;
a gpud that was never reached is reported as such."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import ROOT, free_port, start

SCRIPT = "import torch; print(torch.zeros(2, device='cuda').sum().item())\n"


def _run(args: list[str], env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "woolyhv", *args], capture_output=True, text=True, env=e, timeout=timeout, cwd=ROOT
    )


def _one_line(p: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert "Traceback" not in p.stderr
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.mark.parametrize(
    ("var", "value", "expect"),
    [
        ("WOOLY_TIMEOUT_S", "abc", "seconds"),
        ("WOOLY_TIMEOUT_S", "-5", "> 0"),
        ("WOOLY_CONNECT_TIMEOUT_S", "0", "> 0"),
        ("WOOLY_SERVER", "garbage", "tcp://"),
        ("WOOLY_SERVER", "http://gpu-node:5555", "tcp://"),
        ("WOOLY_SHM", "maybe", "true/false"),
        ("WOOLY_BACKEND", "tpu", "auto, cpu"),
        ("WOOLY_BACKEND", "amd", "no ROCm execution backend"),
        ("WOOLY_REPLAY_LOG_MB", "0", "MiB from 1"),
        ("WOOLY_REPLAY_LOG_MB", "lots", "MiB from 1"),
        ("WOOLY_SERVER", "pool://", "pool://HOST:PORT"),
        ("WOOLY_SERVER", "pool://ctl", "not HOST:PORT"),
        ("WOOLY_MEM", "lots", "4GiB"),
        ("WOOLY_VENDOR", "intel", "nvidia, amd, cpu"),
        ("WOOLY_ARCH", "sm 90", "sm_80+"),
        ("WOOLY_PRIORITY", "9999", "-1000 to 1000"),
        ("WOOLY_PLACE_TIMEOUT_S", "0", "> 0"),
    ],
)
def test_bad_environment_is_one_line(tmp_path, var: str, value: str, expect: str) -> None:
    script = tmp_path / "s.py"
    script.write_text(SCRIPT)
    _one_line(_run(["run", str(script)], {var: value}), var, expect)


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (["--listen", "garbage"], "--listen"),
        (["--listen", "tcp://127.0.0.1:99999"], "--listen"),
        (["--backend", "tpu"], "--backend"),
        (["--log-level", "loud"], "--log-level"),
        (["--tenant", "bad:quota"], "--tenant"),
        (["--tenant", "a:max_kernel_s=-1"], "--tenant"),
        (["--metrics-addr", "everywhere"], "--metrics-addr"),
        (["--join", "ftp://etcd"], "--join"),
        (["--join", "etcd://etcd:99999"], "--join"),
        (["--join", "etcd://127.0.0.1:2379", "--node-name", "a/b"], "--node-name"),
        (["--join", "etcd://127.0.0.1:2379", "--pool-ttl", "0"], "--pool-ttl"),
        (["--join", "etcd://127.0.0.1:2379", "--label", "novalue"], "--label"),
    ],
)
def test_bad_gpud_flags_are_one_line(args: list[str], expect: str) -> None:
    _one_line(_run(["gpud", *args], timeout=30), expect)


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (["--etcd", "etcd://"], "--etcd"),
        (["--listen", "nowhere"], "--listen"),
        (["--ttl", "0"], "--ttl"),
        (["--log-level", "loud"], "--log-level"),
    ],
)
def test_bad_controller_flags_are_one_line(args: list[str], expect: str) -> None:
    _one_line(_run(["controller", *args], timeout=30), expect)


def test_port_in_use_is_one_line() -> None:
    g = start("tcp")
    try:
        _one_line(_run(["gpud", "--listen", g.endpoint, "--backend", "cpu"], timeout=30), "--listen", "in use")
    finally:
        g.stop()


def test_nothing_listening_is_no_cuda_within_the_probe(tmp_path) -> None:
    """torch.cuda.is_available() and numba.cuda.is_available() answer False within WOOLY_PROBE_S (1 s) when nothing
    listens at WOOLY_SERVER, as CUDA without a driver does, saying once which endpoint did not answer."""
    pytest.importorskip("torch")
    script = tmp_path / "avail.py"
    script.write_text(
        textwrap.dedent("""
        import time
        import torch
        t = time.monotonic()
        print("torch", torch.cuda.is_available(), torch.cuda.is_available(), round(time.monotonic() - t, 2))
        from numba import cuda
        t = time.monotonic()
        print("numba", cuda.is_available(), round(time.monotonic() - t, 2))
    """)
    )
    ep = f"tcp://127.0.0.1:{free_port()}"
    p = _run(["run", str(script)], {"WOOLY_SERVER": ep, "WOOLY_INSECURE": "1"})
    assert p.returncode == 0, p.stderr[-2000:]
    lines = dict((line.split()[0], line.split()[1:]) for line in p.stdout.splitlines())
    assert lines["torch"][:2] == ["False", "False"] and float(lines["torch"][2]) < 2.0, p.stdout
    assert lines["numba"][0] == "False" and float(lines["numba"][1]) < 2.0, p.stdout
    said = [line for line in p.stderr.splitlines() if line.startswith("wooly:")]
    assert len(said) == 1 and ep in said[0] and "CUDA_ERROR_NO_DEVICE" in said[0], p.stderr[-2000:]


def test_a_gpud_never_reached_did_not_answer(tmp_path) -> None:
    script = tmp_path / "s.py"
    script.write_text(SCRIPT)
    p = _run(
        ["run", str(script)],
        {"WOOLY_SERVER": f"tcp://127.0.0.1:{free_port()}", "WOOLY_CONNECT_TIMEOUT_S": "2", "WOOLY_INSECURE": "1"},
    )
    assert p.returncode != 0
    assert "did not answer" in p.stderr and "stopped answering" not in p.stderr, p.stderr[-2000:]


def test_unsafe_ops_without_executors_is_one_line(tmp_path) -> None:
    cfg = tmp_path / "g.toml"
    cfg.write_text("[aten]\npermit_unsafe = true\n")
    _one_line(
        _run(["gpud", "--listen", f"ipc://{tmp_path}/g.sock", "--config", str(cfg), "--no-executors"], timeout=30),
        "--no-executors",
        "permit_unsafe",
    )
    cfg.write_text("[aten]\nexecutors = false\npermit_unsafe = true\n")
    _one_line(
        _run(["gpud", "--listen", f"ipc://{tmp_path}/g.sock", "--config", str(cfg)], timeout=30),
        "--config",
        "permit_unsafe",
    )
