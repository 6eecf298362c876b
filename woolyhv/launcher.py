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
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import uuid

from proto import curve
from proto.settings import ClientSettings as Settings


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

    from proto import messages as m
    from proto.codec import decode_reply, encode

    deadline = time.monotonic() + wait_s
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        if endpoint.startswith("ipc://"):
            path = endpoint[len("ipc://") :]
            while not os.path.exists(path):
                if proc is not None and proc.poll() is not None:
                    raise RuntimeError(f"gpud exited with status {proc.returncode} before it was ready")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"gpud did not create {path} within {wait_s:.0f} s")
                time.sleep(0.02)
        while not insecure:
            try:
                curve.secure_client(sock, endpoint)
                break
            except ValueError:
                # a gpud started on a fresh host writes this user's key pair before it binds: until then there is
                # no key to expect (WOOLY_SERVER_KEY unset), which is not yet an error
                if proc is None or proc.poll() is not None or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        sock.connect(endpoint)
        while True:
            sock.send_multipart(encode(m.Ping()))
            if sock.poll(200, zmq.POLLIN):
                decode_reply(sock.recv_multipart())
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


def native_program(argv: list[str]) -> str | None:
    """The path of ``argv[0]`` when it is a program that is not Python (an ELF binary, or a script
    whose ``#!`` names another interpreter); None for a Python file or ``-m module``."""
    if not argv or argv[0] == "-m":
        return None
    path = argv[0]
    if not os.path.exists(path) and os.sep not in path:
        path = shutil.which(path) or path
    try:
        with open(path, "rb") as f:
            head = f.read(128)
    except OSError:
        return None
    if head.startswith(b"\x7fELF"):
        return path
    if not head.startswith(b"#!") or not os.access(path, os.X_OK):
        return None
    line = head.split(b"\n", 1)[0]
    if b"python" not in line:
        return path
    interpreter = _shebang_python(line.decode(errors="replace"))
    if interpreter and os.path.dirname(interpreter) != os.path.dirname(os.path.abspath(sys.executable)):
        # a Python program of another environment (its console script names that environment's interpreter): it runs
        # there, as it would without wooly; its interpreter gets the faces as any Python child does (NOTE [child
        # interpreters] in shim/autostart/sitecustomize.py)
        return path
    return None


def _shebang_python(line: str) -> str | None:
    """The interpreter a ``#!`` line names, as a path (``/usr/bin/env python3`` looked up on PATH)."""
    words = line[2:].split()
    if not words:
        return None
    if os.path.basename(words[0]) == "env":
        names = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        return shutil.which(names[0]) if names else None
    return os.path.abspath(words[0])


def libpython() -> str | None:
    """This interpreter's shared libpython, which a native program loads to run the client side
    (NOTE [embedded interpreter] in shim/native/src/wooly_native.c); None for a static build."""
    if not sysconfig.get_config_var("Py_ENABLE_SHARED"):
        return None
    for name in (sysconfig.get_config_var("INSTSONAME"), sysconfig.get_config_var("LDLIBRARY")):
        for folder in (sysconfig.get_config_var("LIBDIR"), os.path.join(sys.base_prefix, "lib")):
            if name and folder and os.path.exists(os.path.join(folder, name)):
                return os.path.join(folder, name)
    return None


def native_env(env: dict[str, str]) -> None:
    """What the embedded interpreter of a native program needs: this Python's runtime, home and path."""
    lib = libpython()
    if lib is None:
        print(
            f"wooly: native programs need a Python with a shared libpython; {sys.executable} was built "
            "without --enable-shared, so CUDA calls of this program will fail",
            file=sys.stderr,
        )
        return
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = [here] + [p for p in sys.path if p and os.path.isdir(p) and p != here]
    env["WOOLY_LIBPYTHON"] = lib
    env["WOOLY_PYTHONHOME"] = sys.base_prefix
    env["WOOLY_PYTHONPATH"] = os.pathsep.join(paths)


def same_host(endpoint: str) -> bool:
    """Whether ``endpoint`` is a gpud on this machine (an ipc socket or a loopback address)."""
    if endpoint.startswith("ipc://"):
        return True
    host = endpoint.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]")
    return host in ("localhost", "::1") or host.startswith("127.")


def run(argv: list[str], settings: Settings) -> None:
    """Replace this process with the user's program under the shim. Does not return."""
    env = dict(os.environ)
    if not settings.server:
        endpoint, _proc = start_gpud(
            owner_pid=os.getpid(),
            backend=settings.backend if settings.backend != "auto" else "cpu",
            log_level=settings.log_level,
            extra_args=["--cpu-memory", str(settings.cpu_memory)] if settings.cpu_memory else None,
        )
        env["WOOLY_SERVER"] = endpoint
        env["WOOLY_EMBEDDED"] = "1"
    # CuPy compiles its kernels with NVRTC to machine code for the device's architecture unless told to
    # keep PTX; wooly devices run PTX (a user's own setting wins).
    env.setdefault("CUPY_COMPILE_WITH_PTX", "1")
    # CuPy's CUB-accelerated reductions are one precompiled 22 MB PTX module (383 kernels) that would be
    # translated whole at first use; CuPy's own reduction kernels (compiled per use) do the same work.
    env.setdefault("CUPY_ACCELERATORS", "")
    if not settings.server or same_host(settings.server):
        # The program's OpenMP threads (host-side torch ops) spin for a while after each parallel region by default,
        # on the cores the gpud of this machine computes on: measured on 2 cores, a spinning thread took 9.7 ms of
        # CPU per MLP training step (a 17 ms step; 14.7 ms with it asleep). gpud sleeps its own the same way
        # (gpud/aten.py). A program's own setting wins.
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    libdir = native_lib_dir()
    if libdir:
        from shim.native.build import real_nvrtc

        real = real_nvrtc()
        if real and "WOOLY_NVRTC_REAL" not in env:
            env["WOOLY_NVRTC_REAL"] = real  # NOTE [nvrtc stand-in]
        env["LD_LIBRARY_PATH"] = libdir + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
        env["WOOLY_NATIVE_LIBDIR"] = libdir
    # NOTE [child interpreters] (shim/autostart/sitecustomize.py): the program's Python children get the faces too
    autostart = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "shim", "autostart")
    env["PYTHONPATH"] = autostart + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    sys.stdout.flush()
    sys.stderr.flush()
    native = native_program(argv)
    if native is not None:
        native_env(env)
        try:
            os.execve(native, argv, env)
        except OSError as exc:
            print(f"wooly run: {argv[0]}: {exc.strerror}", file=sys.stderr)
            raise SystemExit(126) from None
    os.execve(sys.executable, [sys.executable, "-m", "woolyhv.bootstrap", *argv], env)
