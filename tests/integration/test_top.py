"""``wooly top``: the screen of a real gpud with two tenants (rendered by rich, captured with its own recording
console), the embedded gpud of a running ``wooly run`` found without being named, and a pool's nodes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

from rich.console import Console

from tests.conftest import connect, start
from woolyhv.top import admin_call, frame


def test_screen_shows_both_tenants_devices_and_rates() -> None:
    g = start("tcp")
    try:
        a = connect(g.endpoint, tenant="alice")
        b = connect(g.endpoint, tenant="bob")
        a.mem_alloc(64 << 20)
        b.mem_alloc(8 << 20)
        before, t0 = admin_call(g.endpoint), time.monotonic()
        for _ in range(50):
            a.mem_get_info()
        time.sleep(0.2)
        info = admin_call(g.endpoint)
        console = Console(record=True, width=160, color_system=None)
        console.print(frame(g.endpoint, info, before, time.monotonic() - t0))
        screen = console.export_text()
        assert f"at {g.endpoint}" in screen and "2 session(s)" in screen
        rows = {
            line.split()[1]: line
            for line in screen.splitlines()
            if line.strip().startswith("│ alice") or line.strip().startswith("│ bob")
        }
        assert "64.0 MiB" in rows["alice"] and "8.0 MiB" in rows["bob"], screen
        dev = next(line for line in screen.splitlines() if "wooly CPU" in line)  # the device row, with its busy %
        assert dev.rstrip(" │").endswith("%"), dev
        # the CLI prints the same screen once
        p = subprocess.run(
            [sys.executable, "-m", "woolyhv", "top", "--once", "--server", g.endpoint],
            capture_output=True,
            text=True,
            timeout=60,
            env=dict(os.environ, COLUMNS="160"),
        )
        assert p.returncode == 0 and "alice" in p.stdout and "bob" in p.stdout, p.stderr
        a.conn.close()
        b.conn.close()
    finally:
        g.stop()


def test_finds_the_embedded_gpud_of_a_running_program(tmp_path) -> None:
    script = tmp_path / "hold.py"
    script.write_text(
        textwrap.dedent("""
        import sys, time
        from shim.runtime import driver
        d = driver()
        d.mem_alloc(32 << 20)
        print("ready", flush=True)
        time.sleep(30)
    """)
    )
    env = {k: v for k, v in os.environ.items() if k != "WOOLY_SERVER"}
    prog = subprocess.Popen(
        [sys.executable, "-m", "woolyhv", "run", str(script)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert prog.stdout.readline().strip() == "ready"
        p = subprocess.run(
            [sys.executable, "-m", "woolyhv", "top", "--once"],
            capture_output=True,
            text=True,
            timeout=60,
            env=dict(env, COLUMNS="160"),
        )
        assert p.returncode == 0, p.stderr
        assert "hold.py" in p.stdout and "32.0 MiB" in p.stdout, p.stdout
    finally:
        prog.kill()
        prog.wait()
    # nothing running: one line saying what to set
    p = subprocess.run(
        [sys.executable, "-m", "woolyhv", "top", "--once"], capture_output=True, text=True, timeout=60, env=env
    )
    if p.returncode == 2:  # (another test's `wooly run` may be alive meanwhile)
        assert "WOOLY_SERVER" in p.stderr and p.stderr.count("\n") == 1


def test_live_mode_redraws_on_a_terminal_and_ends_on_ctrl_c() -> None:
    import pty
    import select
    import signal

    g = start("tcp")
    try:
        a = connect(g.endpoint, tenant="alice")
        a.mem_alloc(16 << 20)
        master, slave = pty.openpty()
        p = subprocess.Popen(
            [sys.executable, "-m", "woolyhv", "top", "--server", g.endpoint, "--interval", "0.2"],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=dict(os.environ, COLUMNS="160", LINES="40"),
            start_new_session=True,
        )
        os.close(slave)
        out, frames, deadline = b"", 0, time.monotonic() + 60
        while time.monotonic() < deadline and frames < 3:
            a.mem_get_info()  # keeps the tenant's rates moving between frames
            if select.select([master], [], [], 0.1)[0]:
                out += os.read(master, 65536)
                frames = out.count(b"alice")
        os.killpg(p.pid, signal.SIGINT)  # ^C
        assert p.wait(30) == 0
        os.close(master)
        screen = out.decode(errors="replace")
        assert frames >= 3, screen[-3000:]  # the screen was drawn, then redrawn in place
        assert "\x1b[" in screen and "16.0 MiB" in screen and "Traceback" not in screen, screen[-3000:]
        a.conn.close()
    finally:
        g.stop()
