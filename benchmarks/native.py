"""Native programs: what a CUDA runtime launch costs on the client, against the Python driver face.

    python -m benchmarks.native [--quick]

Both programs launch an empty kernel N times and synchronise, under ``wooly run`` against one CPU
gpud: benchmarks/native_progs/launch_loop.cu built with nvcc (NVIDIA's static cudart on the shim's
libcuda, the client in the interpreter the shim embeds) and launch_loop.py through cuda.bindings
(the Python driver face). The ratio is cudart's seconds per launch over the Python face's: the
export tables and cudart's own bookkeeping should add little on top of the trampoline and the
queue. (The issue's second line, sgemm through a remoted cuBLAS against numpy, waits for the vendor
library stand-ins, which do not exist yet.)
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
    proc = subprocess.run([sys.executable, "-m", "woolyhv", "run", *args], capture_output=True, text=True,
                          timeout=900, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{args[0]} failed: {proc.stdout[-500:]}{proc.stderr[-1500:]}")
    return float(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not os.path.exists(nvcc):
        raise SystemExit("benchmarks.native needs nvcc")
    n, rounds = ("500", "3") if args.quick else ("3000", "5")
    from woolyhv.launcher import start_gpud

    server, gpud = start_gpud(log_level="error")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            exe = os.path.join(tmp, "launch_loop")
            subprocess.run([nvcc, "-o", exe, os.path.join(HERE, "native_progs", "launch_loop.cu")], check=True,
                           capture_output=True, timeout=600)
            native = _run([exe, n, rounds], server)
            python = _run([os.path.join(HERE, "native_progs", "launch_loop.py"), n, rounds], server)
        emit("native", "cudart_launch_vs_python_face", native * 1e6, python * 1e6, 1.0, "us/launch",
             launches=int(n), rounds=int(rounds))
    finally:
        gpud.terminate()
        gpud.wait(15)


if __name__ == "__main__":
    main()
