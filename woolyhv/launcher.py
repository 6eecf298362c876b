"""``wooly run``: put the shim in place, then become the user's program.

NOTE [launch]: the launcher starts (when WOOLY_SERVER is unset) an embedded gpud that watches our
pid, sets the environment the faces need (WOOLY_SERVER; LD_LIBRARY_PATH so that the shim's
libcuda.so.1 is the one the dynamic loader finds), and then exec()s Python on the bootstrap, which
activates the faces and runs the script as ``__main__``. exec keeps the pid, so the program's
exit code, stdin/stdout and signals are the program's own, and the embedded gpud exits when the
program does.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import uuid

from proto import curve
from woolyhv.config import Settings


def _runtime_dir() -> str:
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    d = os.path.join(base, f"wooly-{os.getuid()}")
    os.makedirs(d, mode=0o700, exist_ok=True)
    return d


def start_gpud(
    endpoint: str | None = None,
    *,
    owner_pid: int | None = None,
    backend: str = "cpu",
    log_level: str = "warning",
    extra_args: list[str] | None = None,
    env: dict[str, str] | None = None,
    wait_s: float = 30.0,
) -> tuple[str, subprocess.Popen[bytes]]:
    """Start gpud in a child process and wait until it answers. Returns (endpoint, process)."""
    endpoint = endpoint or f"ipc://{_runtime_dir()}/gpud-{os.getpid()}-{uuid.uuid4().hex[:8]}.sock"
    cmd = [sys.executable, "-m", "gpud", "--listen", endpoint, "--backend", backend, "--log-level", log_level]
    if owner_pid is not None:
        cmd += ["--owner-pid", str(owner_pid)]
    cmd += extra_args or []
    insecure = "--insecure" in cmd
    if curve.is_tcp(endpoint) and not insecure:
        curve.server_keys()  # made now, so that this process can check the daemon's key (NOTE [curve])
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=env, start_new_session=True)
    wait_ready(endpoint, proc, wait_s, insecure)
    return endpoint, proc


def wait_ready(endpoint: str, proc: subprocess.Popen[bytes] | None, wait_s: float, insecure: bool = False) -> None:
    import zmq

    from proto.codec import encode_body, unpack_body

    deadline = time.monotonic() + wait_s
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        if endpoint.startswith("ipc://"):
            path = endpoint[len("ipc://"):]
            while not os.path.exists(path):
                if proc is not None and proc.poll() is not None:
                    raise RuntimeError(f"gpud exited with status {proc.returncode} before it was ready")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"gpud did not create {path} within {wait_s:.0f} s")
                time.sleep(0.02)
        if not insecure:
            curve.secure_client(sock, endpoint)
        sock.connect(endpoint)
        while True:
            sock.send_multipart(encode_body({"kind": "ping", "rid": 0}))
            if sock.poll(200, zmq.POLLIN):
                unpack_body(sock.recv_multipart())
                return
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"gpud exited with status {proc.returncode} before it was ready")
            if time.monotonic() > deadline:
                raise RuntimeError(f"gpud at {endpoint} did not answer within {wait_s:.0f} s")
    finally:
        sock.close(0)


def native_lib_dir() -> str | None:
    """Folder holding the shim's libcuda.so.1, if the native face is built."""
    try:
        from shim.native import build
    except ImportError:
        return None
    try:
        return build.ensure_built()
    except Exception as exc:  # noqa: BLE001 - the native face is optional: warn, carry on
        print(f"wooly: native libcuda face unavailable: {exc}", file=sys.stderr)
        return None


def run(argv: list[str], settings: Settings) -> None:
    """Replace this process with the user's program under the shim. Does not return."""
    env = dict(os.environ)
    if not settings.server:
        endpoint, _proc = start_gpud(
            owner_pid=os.getpid(), backend=settings.backend if settings.backend != "auto" else "cpu",
            log_level=os.environ.get("WOOLY_LOG_LEVEL", "warning"),
        )
        env["WOOLY_SERVER"] = endpoint
        env["WOOLY_EMBEDDED"] = "1"
    libdir = native_lib_dir()
    if libdir:
        env["LD_LIBRARY_PATH"] = libdir + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
        env["WOOLY_NATIVE_LIBDIR"] = libdir
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "woolyhv.bootstrap", *argv], env)
