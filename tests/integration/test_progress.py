"""Progress on the client's stderr: a bar for a big upload on a terminal (a pty), nothing on a pipe; a spinner for
work that takes longer than a second."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import textwrap
import time

from tests.conftest import ROOT, start

CHILD = textwrap.dedent("""
    import sys
    from shim.client import Connection
    from shim.driver import Driver
    d = Driver(Connection(sys.argv[1]))
    n = 300 << 20
    p = d.mem_alloc(n)
    d.memcpy_htod(p, bytes(range(256)) * (n // 256))
    d.ctx_synchronize()
    print("done", flush=True)
""")


def _run_on_pty(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    master, slave = pty.openpty()
    p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave, env=env, cwd=ROOT)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        r, _, _ = select.select([master], [], [], 0.2)
        if r:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        elif p.poll() is not None:
            break
    p.wait(30)
    os.close(master)
    return p.returncode, out.decode(errors="replace")


def test_big_upload_shows_a_bar_on_a_terminal_and_nothing_on_a_pipe() -> None:
    g = start("ipc")
    try:
        env = {k: v for k, v in os.environ.items() if k != "WOOLY_PROGRESS"}
        args = [sys.executable, "-c", CHILD, g.endpoint]
        rc, screen = _run_on_pty(args, env)
        assert rc == 0, screen[-2000:]
        assert "wooly: uploading 300 MiB" in screen and "MiB" in screen, screen[-2000:]
        piped = subprocess.run(args, capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
        assert piped.returncode == 0 and "done" in piped.stdout
        assert "uploading" not in piped.stderr and piped.stderr.strip() == "", piped.stderr[-2000:]
        forced = subprocess.run(
            args, capture_output=True, text=True, env=dict(env, WOOLY_PROGRESS="1"), timeout=120, cwd=ROOT
        )
        assert "uploading 300 MiB" in forced.stderr  # WOOLY_PROGRESS=1: even on a pipe
    finally:
        g.stop()


def test_spinner_appears_only_after_a_second(monkeypatch, capfd) -> None:
    from shim import progress

    monkeypatch.setenv("WOOLY_PROGRESS", "1")
    with progress.waiting("compiling a big module", after_s=0.05):
        time.sleep(0.4)
    assert "compiling a big module" in capfd.readouterr().err
    with progress.waiting("quick work", after_s=5.0):
        time.sleep(0.05)
    assert "quick work" not in capfd.readouterr().err


MODEL = textwrap.dedent("""
    import torch
    model = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096) for _ in range(5)])  # 320 MiB in 10 tensors
    model.to("cuda")
    torch.cuda.synchronize()
    print("done", flush=True)
""")


def test_moving_a_model_shows_one_bar_for_all_its_weights(tmp_path) -> None:
    pytest = __import__("pytest")
    pytest.importorskip("torch")
    script = tmp_path / "move.py"
    script.write_text(MODEL)
    g = start("ipc")
    try:
        env = {k: v for k, v in os.environ.items() if k != "WOOLY_PROGRESS"}
        env.update(WOOLY_SERVER=g.endpoint, PYTHONPATH=str(ROOT))
        args = [sys.executable, "-m", "woolyhv", "run", str(script)]
        rc, screen = _run_on_pty(args, env)
        assert rc == 0, screen[-2000:]
        assert "wooly: moving Sequential to cuda" in screen and "MiB" in screen, screen[-2000:]
        piped = subprocess.run(args, capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
        assert piped.returncode == 0 and "done" in piped.stdout and "moving" not in piped.stderr, piped.stderr[-2000:]
    finally:
        g.stop()
