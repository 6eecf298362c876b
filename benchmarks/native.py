"""Native programs: what a CUDA runtime launch costs on the client, against the Python driver face.

    python -m benchmarks.native [--quick]

Both programs launch an empty kernel N times and synchronise, under ``wooly run`` against one CPU
gpud: benchmarks/native_progs/launch_loop.cu built with nvcc (NVIDIA's static cudart on the shim's
libcuda, the client in the interpreter the shim embeds) and launch_loop.py through cuda.bindings
(the Python driver face). The ratio is cudart's seconds per launch over the Python face's: the
export tables and cudart's own bookkeeping should add little on top of the trampoline and the
queue. Second line: sgemm N x N x N (2048) from an nvcc-built program through the cuBLAS stand-in
(NOTE [vendor libraries]: the call travels to gpud, which runs it with NumPy's BLAS on the tenant's
memory) against NumPy's matmul of the same matrices in this process, on the same host; target 1.2x.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

from benchmarks.common import emit

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _run(args: list[str], server: str) -> float:
    env = dict(os.environ, WOOLY_SERVER=server)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.run(
        [sys.executable, "-m", "woolyhv", "run", *args], capture_output=True, text=True, timeout=900, env=env
    )
    if proc.returncode != 0:
        raise SystemExit(f"{args[0]} failed: {proc.stdout[-500:]}{proc.stderr[-1500:]}")
    return float(proc.stdout.strip().splitlines()[-1])


def _numpy_sgemm(n: int, rounds: int) -> float:
    import time

    import numpy as np

    a = (np.arange(n * n, dtype=np.float32) % 17 * 0.01).reshape(n, n)
    best = float("inf")
    for r in range(rounds + 1):
        t0 = time.perf_counter()
        np.matmul(a, a)
        if r:
            best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not os.path.exists(nvcc):
        raise SystemExit("benchmarks.native needs nvcc")
    n, rounds = ("500", "3") if args.quick else ("3000", "5")
    from woolyhv.launcher import start_gpud

    server, gpud = start_gpud(log_level="error", owner_pid=os.getpid())  # gone with us, even if we are killed
    try:
        with tempfile.TemporaryDirectory() as tmp:
            exe = os.path.join(tmp, "launch_loop")
            subprocess.run(
                [nvcc, "-o", exe, os.path.join(HERE, "native_progs", "launch_loop.cu")],
                check=True,
                capture_output=True,
                timeout=600,
            )
            native = _run([exe, n, rounds], server)
            python = _run([os.path.join(HERE, "native_progs", "launch_loop.py"), n, rounds], server)
            emit(
                "native",
                "cudart_launch_vs_python_face",
                native * 1e6,
                python * 1e6,
                1.0,
                "us/launch",
                launches=int(n),
                rounds=int(rounds),
            )
            from shim.native import build as native_build

            sgemm = os.path.join(tmp, "sgemm")
            subprocess.run(
                [
                    nvcc,
                    "-o",
                    sgemm,
                    os.path.join(HERE, "native_progs", "sgemm.cu"),
                    f"-L{native_build.ensure_built()}",
                    "-lcublas",
                ],
                check=True,
                capture_output=True,
                timeout=600,
            )
            size = 1024 if args.quick else 2048
            remote = _run([sgemm, str(size), "3"], server)
            emit("native", "sgemm_remoted_cublas_vs_numpy", remote, _numpy_sgemm(size, 3), 1.2, "s", n=size)
    finally:
        gpud.terminate()
        gpud.wait(15)


if __name__ == "__main__":
    main()
