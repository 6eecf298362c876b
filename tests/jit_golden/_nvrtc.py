"""NVRTC / nvcc front ends for the generators (no GPU needed)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from cuda.bindings import nvrtc


def cuda_include_dir() -> str:
    """CUDA 12.x headers matching the NVRTC wheel (nvidia-cuda-runtime-cu12), else /usr/local/cuda/include."""
    try:
        import nvidia.cuda_runtime as rt

        d = Path(list(rt.__path__)[0]) / "include"
        if (d / "cuda_fp16.h").exists():
            return str(d)
    except ImportError:
        pass
    return "/usr/local/cuda/include"


def include_dirs() -> list[str]:
    dirs = [cuda_include_dir()]
    try:  # libcu++ / <nv/target>, needed by cooperative_groups
        import nvidia.cuda_cccl as cccl

        d = Path(list(cccl.__path__)[0]) / "include"
        if d.exists():
            dirs.append(str(d))
    except ImportError:
        pass
    return dirs


def _check(res, prog=None):
    err = res[0] if isinstance(res, tuple) else res
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        log = ""
        if prog is not None:
            _, n = nvrtc.nvrtcGetProgramLogSize(prog)
            buf = b" " * n
            nvrtc.nvrtcGetProgramLog(prog, buf)
            log = buf.decode(errors="replace")
        raise RuntimeError(f"NVRTC error {err}: {log}")
    return res[1:] if isinstance(res, tuple) else None


def nvrtc_version() -> str:
    _, major, minor = nvrtc.nvrtcVersion()
    return f"{major}.{minor}"


def compile_nvrtc(
    src: str, name: str = "k.cu", opts: tuple[str, ...] = (), name_exprs: tuple[str, ...] = ()
) -> tuple[str, dict[str, str]]:
    """Return (ptx, {name_expression: lowered_name})."""
    (prog,) = _check(nvrtc.nvrtcCreateProgram(src.encode(), name.encode(), 0, [], []))
    for e in name_exprs:
        _check(nvrtc.nvrtcAddNameExpression(prog, e.encode()))
    options = [
        "--gpu-architecture=compute_80",
        "-default-device",
        "--std=c++17",
        *("-I" + d for d in include_dirs()),
        *opts,
    ]
    _check(nvrtc.nvrtcCompileProgram(prog, len(options), [o.encode() for o in options]), prog)
    (n,) = _check(nvrtc.nvrtcGetPTXSize(prog))
    buf = b" " * n
    _check(nvrtc.nvrtcGetPTX(prog, buf))
    lowered = {}
    for e in name_exprs:
        (ln,) = _check(nvrtc.nvrtcGetLoweredName(prog, e.encode()))
        lowered[e] = ln.decode() if isinstance(ln, bytes) else ln
    nvrtc.nvrtcDestroyProgram(prog)
    return buf.rstrip(b"\x00").decode(), lowered


def compile_nvcc(src: str, opts: tuple[str, ...] = (), arch: str = "sm_80") -> tuple[str, str]:
    """nvcc -ptx -arch=<arch> (the CUDA 13 toolkit on PATH). Returns (ptx, version line)."""
    with tempfile.TemporaryDirectory() as td:
        cu = os.path.join(td, "k.cu")
        Path(cu).write_text(src)
        out = os.path.join(td, "k.ptx")
        subprocess.run(["nvcc", "-ptx", f"-arch={arch}", *opts, cu, "-o", out], check=True)
        ver = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
        return Path(out).read_text(), ver
