"""NOTE [executor sandbox] (gpud/sandbox.py): what a confined executor can no longer do, probed as a tenant with
code execution inside one would. A daemon process (gpud's stand-in, marked not dumpable as gpud marks itself)
forks two executors that confine themselves; one probes the daemon, its sibling, the file system, the network
and the process table. The daemon's environment holds a token, as gpud's may."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpud import sandbox

ROOT = Path(__file__).resolve().parents[2]

PROBE = textwrap.dedent(
    """
    import json, os, socket, sys, time
    import torch
    from gpud import sandbox

    secret, out = sys.argv[1], sys.argv[2]
    sandbox.protect_daemon()
    r, w = os.pipe()
    sibling = os.fork()
    if sibling == 0:  # another tenant's executor: confined, holding its data
        sandbox.enter("cpu")
        os.write(w, b"x")
        time.sleep(60)
        os._exit(0)
    os.read(r, 1)
    prober_r, prober_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        applied = sandbox.enter("cpu")
        daemon = os.getppid()
        res = {"layers": applied.layers, "missing": applied.missing}

        def probe(name, fn):
            try:
                res[name] = "ok: " + repr(fn())[:40]
            except OSError as exc:
                res[name] = "refused: " + (exc.strerror or str(exc))

        probe("read_secret_file", lambda: open(secret).read())
        probe("write_file", lambda: open(os.path.join(os.path.dirname(out), "written"), "w"))
        probe("daemon_environ", lambda: open(f"/proc/{daemon}/environ", "rb").read())
        probe("daemon_mem", lambda: open(f"/proc/{daemon}/mem", "rb"))
        probe("sibling_mem", lambda: open(f"/proc/{sibling}/mem", "rb"))
        probe("sibling_maps", lambda: open(f"/proc/{sibling}/maps").read(20))
        probe("signal_daemon", lambda: os.kill(daemon, 0))
        probe("signal_sibling", lambda: os.kill(sibling, 0))
        probe("new_socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM))
        probe("exec", lambda: os.execv("/bin/true", ["true"]))
        # what an executor does need still works
        probe("own_status", lambda: open("/proc/self/status").read(5))
        probe("cpuinfo", lambda: open("/proc/cpuinfo").read(5))
        probe("torch_op", lambda: (torch.arange(6.0).reshape(2, 3) @ torch.ones(3)).tolist())
        probe("lazy_import", lambda: __import__("torch.distributions", fromlist=["x"]).Normal(0.0, 1.0).mean.item())
        probe("memfd", lambda: os.ftruncate(os.memfd_create("t"), 4096))
        import tempfile
        probe("scratch", lambda: tempfile.NamedTemporaryFile().name.startswith(sandbox.scratch_dir(os.getpid())))
        with open(f"/proc/self/status") as f:
            res["status"] = {k: v.strip() for k, v in (l.split(":", 1) for l in f) if k in ("NoNewPrivs", "Seccomp", "CapEff")}
        os.write(prober_w, json.dumps(res).encode())
        os._exit(0)
    os.waitpid(pid, 0)
    data = os.read(prober_r, 1 << 16)
    os.kill(sibling, 9)
    os.waitpid(sibling, 0)
    import shutil
    for p in (pid, sibling):
        shutil.rmtree(sandbox.scratch_dir(p))
    open(out, "wb").write(data)
    """
)


def _landlock() -> int:
    return sandbox.landlock_abi()


@pytest.fixture(scope="module")
def probed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    tmp = tmp_path_factory.mktemp("sandbox")
    secret = tmp / "gpud.toml"
    secret.write_text('admin_token = "hunter2"\n')
    out = tmp / "probe.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WOOLY_ADMIN_TOKEN": "hunter2"}
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(secret), str(out)],
        cwd=str(ROOT),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


def test_every_layer_is_applied_on_this_kernel(probed: dict[str, object]) -> None:
    assert probed["status"] == {"NoNewPrivs": "1", "Seccomp": "2", "CapEff": "0000000000000000"}, probed
    layers = " ".join(probed["layers"])  # type: ignore[arg-type]
    assert "seccomp" in layers and "no capabilities" in layers and "not dumpable" in layers, probed
    if _landlock() >= 6:
        assert "landlock files" in layers and "landlock scopes" in layers, probed
        assert probed["missing"] == [], probed


@pytest.mark.parametrize(
    "probe",
    ["daemon_environ", "daemon_mem", "sibling_mem", "sibling_maps", "new_socket", "exec"],
)
def test_what_a_confined_executor_cannot_reach(probed: dict[str, object], probe: str) -> None:
    assert str(probed[probe]).startswith("refused"), probed


@pytest.mark.skipif(_landlock() < 1, reason="the kernel has no Landlock")
@pytest.mark.parametrize("probe", ["read_secret_file", "write_file"])
def test_files_outside_its_code_are_out_of_reach(probed: dict[str, object], probe: str) -> None:
    assert str(probed[probe]).startswith("refused"), probed


@pytest.mark.skipif(_landlock() < 6, reason="Landlock scopes need kernel ABI 6")
@pytest.mark.parametrize("probe", ["signal_daemon", "signal_sibling"])
def test_it_cannot_signal_gpud_or_another_executor(probed: dict[str, object], probe: str) -> None:
    assert str(probed[probe]).startswith("refused"), probed


@pytest.mark.parametrize("probe", ["own_status", "cpuinfo", "torch_op", "lazy_import", "memfd", "scratch"])
def test_what_an_executor_needs_still_works(probed: dict[str, object], probe: str) -> None:
    assert str(probed[probe]).startswith("ok"), probed
    if probe == "torch_op":
        assert probed[probe] == "ok: [3.0, 12.0]", probed
    if probe == "scratch":  # its temporary files go to its own directory, the one place it may write
        assert probed[probe] == "ok: True", probed


@pytest.mark.parametrize("gpu", [False, True])
@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_filter_is_well_formed_for_each_architecture(machine: str, gpu: bool) -> None:
    prog = sandbox.seccomp_program(machine, gpu)
    assert len(prog) % 8 == 0 and len(prog) // 8 < 256  # every jump fits a byte
    arch, table, _ = sandbox._ARCHES[machine]
    assert set(sandbox._DENIED) <= set(table), set(sandbox._DENIED) - set(table)
    # every denied number appears once as a comparison in the program
    import struct

    ks = [struct.unpack("=HBBI", prog[i : i + 8]) for i in range(0, len(prog), 8)]
    compared = {k for code, _, _, k in ks if code == 0x15 and k != arch}
    want = {table[n] for n in sandbox._DENIED if not (gpu and n in ("socket", "connect"))}
    assert compared == want and (table["socket"] in compared) != gpu
