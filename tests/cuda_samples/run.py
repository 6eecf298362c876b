"""Build NVIDIA's cuda-samples with nvcc and run them, unmodified, under ``wooly run``.

    python -m tests.cuda_samples.run --samples /path/to/cuda-samples            # every eligible sample, 3 ways
    python -m tests.cuda_samples.run --samples DIR --only vectorAdd matrixMul --ways static
    python -m tests.cuda_samples.run --summarise-only                           # re-print the last results

The checkout is github:NVIDIA/cuda-samples (fetch it; nothing here downloads). The samples taken are
those of ``0_Introduction``, ``2_Concepts_and_Techniques``, ``3_CUDA_Features`` and ``4_CUDA_Libraries``
that need no graphics, no MPI/NvSci and no peer access between GPUs (EXCLUDED says why each other one is left
out), against a CPU gpud with two devices (``--devices``) for the multi-GPU ones.
Each is built four ways: nvcc's default (static cudart), ``-cudart shared``, PTX only
(``-gencode arch=compute_80,code=compute_80``), and ``cmake``: the architectures the sample's own CMakeLists.txt
lists (``CMAKE_CUDA_ARCHITECTURES``, machine code and PTX for each, as CMake builds them) up to the virtual
device's compute capability 8.0, the ones a driver would choose from for it (nvcc's default is sm_75 alone, and a
sample may take another code path below sm_80: reduction's default kernel sums with ``__reduce_add_sync`` from
sm_80 on and with shuffles from lanes outside its mask below, which is undefined), then run with its own folder as the working directory
against one CPU gpud. A sample passes when it exits 0 and prints its own pass line (for the few whose
sources print none, exit status 0 alone: ``judged_by`` in each record says which). A sample that
cannot be built here (a CUDA library that is not installed) is recorded as ``unbuilt`` with the
compiler's first error; a failing one with its first error line. Results: one JSON line per run in
``results/runs.jsonl``, the summary in ``results/summary.json``. Not part of the default pytest run.
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
RESULTS = os.path.join(HERE, "results")
CATEGORIES = ("0_Introduction", "2_Concepts_and_Techniques", "3_CUDA_Features", "4_CUDA_Libraries")
WAYS = {
    "static": [],
    "shared": ["-cudart", "shared"],
    "ptx": ["-gencode", "arch=compute_80,code=compute_80"],
    "cmake": [],  # the sample's own architectures: cmake_arch_flags
}
DEVICE_CC = 80  # what the CPU gpud reports


def cmake_arch_flags(cmake: str) -> list[str]:
    """``--generate-code`` for each architecture of ``set(CMAKE_CUDA_ARCHITECTURES ...)`` up to DEVICE_CC (both
    machine code and PTX, as CMake does for a bare number); nvcc's default where the file names none."""
    found = re.search(r"set\(CMAKE_CUDA_ARCHITECTURES\s+([^)]*)\)", cmake)
    archs = [int(a) for a in re.findall(r"\b(\d+)\b", found.group(1))] if found else []
    flags = []
    for a in sorted(x for x in archs if x <= DEVICE_CC):
        flags += ["-gencode", f"arch=compute_{a},code=[sm_{a},compute_{a}]"]
    return flags


EXCLUDED = {
    **dict.fromkeys(
        [
            "simpleCUDA2GL",
            "simpleTexture3D",
            "EGLStream_CUDA_CrossGPU",
            "EGLStream_CUDA_Interop",
            "FunctionPointers",
            "boxFilter",
            "imageDenoising",
            "particles",
            "bindlessTexture",
            "oceanFFT",
            "randomFog",
        ],
        "graphics (OpenGL/EGL)",
    ),
    **dict.fromkeys(
        ["simpleCUFFT_MGPU", "simpleCUFFT_2d_MGPU"], "cuFFT's multi-GPU plans (cufftXt descriptors) are not offered"
    ),
    **dict.fromkeys(
        ["simpleP2P", "conjugateGradientMultiDeviceCG", "streamOrderedAllocationP2P"],
        "needs peer access between GPUs (a program's devices are separate sessions: NOTE [devices of a program])",
    ),
    "simpleMPI": "MPI",
    "cudaNvSci": "NvSci",
    **dict.fromkeys(
        [
            "FilterBorderControlNPP",
            "boxFilterNPP",
            "cannyEdgeDetectorNPP",
            "freeImageInteropNPP",
            "histEqualizationNPP",
        ],
        "FreeImage (an image library, not CUDA)",
    ),
}
MULTI_GPU = ("simpleMultiGPU",)  # run on a gpud with two devices
LIBS = {  # CMake's CUDA:: targets -> linker flags
    "cuda_driver": ["-lcuda"],
    "cublas": ["-lcublas"],
    "cublasLt": ["-lcublasLt"],
    "cufft": ["-lcufft"],
    "cufft_static": ["-lcufft_static"],
    "curand": ["-lcurand"],
    "cusparse": ["-lcusparse"],
    "cusolver": ["-lcusolver"],
    "nvjpeg": ["-lnvjpeg"],
    "nvrtc": [],
    "cudart": [],
}
# "passed" alone is not one: cuSOLVER samples say "Incorrect argument passed to -R option"
PASS_LINE = re.compile(
    r"(\bPASS|PASSED|Result\s*=\s*PASS|[Tt]ests? passed|[Tt]est [Pp]assed|Test Successful|^\s*[Pp]assed\b)", re.M
)
FAIL_LINE = re.compile(r"(FAIL|[Ff]ailed|[Ee]rror|[Ww]aived|WAIVED|not supported|wooly:)")


def _nvcc() -> str:
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not os.path.exists(nvcc):
        raise SystemExit("nvcc is not installed")
    return nvcc


def _nvrtc() -> list[str]:
    """Compile and link flags for NVRTC (the pip wheel nvidia-cuda-nvrtc-cu12 when the toolkit has none)."""
    if os.path.exists("/usr/local/cuda/include/nvrtc.h"):
        return ["-lnvrtc"]
    spec = importlib.util.find_spec("nvidia.cuda_nvrtc")
    if spec is None or not spec.submodule_search_locations:
        return ["-lnvrtc"]
    base = list(spec.submodule_search_locations)[0]
    lib = os.path.join(base, "lib")
    return [f"-I{os.path.join(base, 'include')}", f"-L{lib}", "-l:libnvrtc.so.12", f"-Xlinker=-rpath={lib}"]


def samples(checkout: str, only: list[str] | None) -> list[tuple[str, str]]:
    out = []
    for cat in CATEGORIES:
        for path in sorted(glob.glob(os.path.join(checkout, "Samples", cat, "*", ""))):
            name = os.path.basename(os.path.dirname(path))
            if only and name not in only:
                continue
            out.append((cat, name))
    return out


# --include: headers of CUDA libraries the toolkit here lacks, from PyPI wheels (pip download --no-deps, unzip their
# nvidia/*/include): nvidia-cublas-cu12, nvidia-curand-cu12, nvidia-cusolver-cu12, nvidia-cusparse-cu12, and
# nvidia-cufft (CUDA 13's cuFFT 12.5: Common/helper_cuda.h names CUFFT_MISSING_DEPENDENCY, which cu12's lacks)
EXTRA_INCLUDES: list[str] = []


def build(checkout: str, cat: str, name: str, way: str, outdir: str) -> tuple[str | None, str]:
    """(executable, '') or (None, the compiler's first error)."""
    src = os.path.join(checkout, "Samples", cat, name)
    cmake = (
        open(os.path.join(src, "CMakeLists.txt")).read() if os.path.exists(os.path.join(src, "CMakeLists.txt")) else ""
    )
    files = sorted(
        glob.glob(os.path.join(src, "**", "*.cu"), recursive=True)
        + glob.glob(os.path.join(src, "**", "*.cpp"), recursive=True)
    )
    listed = re.search(r"add_executable\(\s*\S+\s+([^)]*)\)", cmake)
    if listed:  # the sources CMake builds (files compiled at run time by NVRTC are not among them), C files and
        # shared helpers in Common/ (../../../Common/helper_multiprocess.cpp) included
        named = [
            os.path.normpath(os.path.join(src, t.replace("${CMAKE_CURRENT_SOURCE_DIR}/", "")))
            for t in listed.group(1).split()
        ]
        named = [f for f in named if os.path.isfile(f) and f.endswith((".cu", ".cpp", ".c"))]
        names = {os.path.basename(t) for t in listed.group(1).split()}
        files = named or [f for f in files if os.path.basename(f) in names] or files
    files = [f for f in files if not re.search(r"(_win|_mac|_gl)\.", os.path.basename(f))]
    way_flags = cmake_arch_flags(cmake) if way == "cmake" else WAYS[way]
    flags = ["-std=c++17", "--extended-lambda", "-I", os.path.join(checkout, "Common"), "-I", src, *way_flags]
    for inc in ("inc", "include"):
        if os.path.isdir(os.path.join(src, inc)):
            flags += ["-I", os.path.join(src, inc)]
    if "OpenMP" in cmake:
        flags += ["-Xcompiler", "-fopenmp"]
    if name.startswith("cdp") or "cudadevrt" in cmake:
        flags += ["-rdc=true", "-lcudadevrt"]
    for lib in sorted(set(re.findall(r"CUDA::(\w+)", cmake))):
        flags += _nvrtc() if lib == "nvrtc" else LIBS.get(lib, [f"-l{lib}"])
    for inc in EXTRA_INCLUDES:
        flags += ["-I", inc]
    if re.search(r"CUDA::(cuda_driver|cublas|cufft|curand|cusparse|cusolver)\b", cmake):
        # link against the shim's libcuda.so / libcublas.so (a toolkit without a driver has no libcuda; the
        # stand-in libraries are what runs under wooly run anyway)
        from shim.native import build as native

        flags.append(f"-L{native.ensure_built()}")
    # each build gets its own folder, which is also the run's working directory: the sample's files
    # (its data/ folder, inputs) are linked in, so sdkFindFilePath finds them in "./" and "./data/"
    waydir = os.path.join(outdir, way, name)
    os.makedirs(waydir, exist_ok=True)
    for entry in os.listdir(src):
        link = os.path.join(waydir, entry)
        if not os.path.lexists(link):
            os.symlink(os.path.join(src, entry), link)
    if "requiresCGheaders" in open(os.path.join(checkout, "Common", "nvrtc_helper.h")).read() and "nvrtc" in cmake:
        for inc in (
            "cooperative_groups.h",
            "cooperative_groups",
            "cccl/nv",
            "cccl/cuda",
        ):  # "install it in the sample dir"
            path = os.path.join("/usr/local/cuda/include", inc)
            inc = os.path.basename(inc)
            if os.path.exists(path) and not os.path.lexists(os.path.join(waydir, inc)):
                os.symlink(path, os.path.join(waydir, inc))
    exe = os.path.join(waydir, name)
    kernels = {os.path.basename(k) for k in re.findall(r'set\(CUDA_KERNEL_SOURCE\s+"[^"]*/([\w.]+)"', cmake)}
    steps = []
    # driver-API samples load a kernel file beside the executable (CMake builds it with -fatbin or -ptx):
    # built here with this way's architecture flags, so "static"/"shared" carry nvcc's default PTX too
    for kind, out_name in re.findall(r'set\(CUDA_(FATBIN|PTX)_FILE\s+"[^"]*/([\w.]+)"', cmake):
        for kernel in sorted(kernels):
            arch = [] if way == "shared" else way_flags
            if kind == "PTX" and way == "cmake" and arch:  # -ptx takes one virtual architecture: the highest
                arch = ["-arch", arch[-1].split(",")[0].replace("arch=", "")]
            steps.append(
                [
                    _nvcc(),
                    "-I",
                    os.path.join(checkout, "Common"),
                    *arch,
                    f"-{kind.lower()}",
                    "-o",
                    os.path.join(waydir, out_name),
                    os.path.join(src, kernel),
                ]
            )
    files = [f for f in files if os.path.basename(f) not in kernels]
    steps.append([_nvcc(), *flags, "-o", exe, *files])
    for cmd in steps:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            lines = (
                [ln for ln in proc.stderr.splitlines() if "error" in ln.lower()] or proc.stderr.splitlines() or ["?"]
            )
            return None, lines[0].replace(checkout, "")[:300]
    return exe, ""


def has_pass_line(src: str) -> bool:
    """Whether the sample's sources print a pass line at all (some signal success by exit status only):
    a string literal that reads as one."""
    for ext in ("cu", "cpp", "h", "cuh"):
        for path in glob.glob(os.path.join(src, "**", f"*.{ext}"), recursive=True):
            with open(path, errors="replace") as f:
                if any(PASS_LINE.search(lit) for lit in re.findall(r'"((?:[^"\\\n]|\\.)*)"', f.read())):
                    return True
    return False


def run_one(exe: str, cwd: str, server: str, timeout: float, src: str) -> dict:
    """Run ``exe`` in ``cwd`` under wooly run; judged by ``src`` (the sample's own sources: the build folder
    also holds links to CUDA's headers, whose string literals are not the sample's)."""
    env = dict(os.environ)
    env["WOOLY_SERVER"] = server
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    start = time.monotonic()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "woolyhv", "run", exe],
            cwd=cwd,
            capture_output=True,
            text=True,
            errors="replace",  # a sample may print bytes that are not UTF-8
            timeout=timeout,
            env=env,
            stdin=subprocess.DEVNULL,
        )
        out, err, rc = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        rc = "timeout"
    seconds = round(time.monotonic() - start, 1)
    by_line = has_pass_line(src)
    passed = rc == 0 and (bool(PASS_LINE.search(out + err)) or not by_line)
    first = ""
    if not passed:
        lines = [ln for ln in (err + "\n" + out).splitlines() if FAIL_LINE.search(ln)]
        first = (lines[0] if lines else f"exit status {rc}; last line: {(out.strip().splitlines() or [''])[-1]}")[:300]
    return {
        "passed": passed,
        "rc": rc,
        "seconds": seconds,
        "first_error": first,
        "judged_by": "pass line" if by_line else "exit status",
    }


def summarise(records: list[dict], excluded: dict[str, str] | None = None) -> dict:
    summary: dict = {"ways": {}}
    for way in WAYS:
        rs = [r for r in records if r["way"] == way]
        built = [r for r in rs if r["status"] != "unbuilt"]
        passed = [r for r in rs if r["status"] == "passed"]
        summary["ways"][way] = {
            "eligible": len(rs),
            "built": len(built),
            "passed": len(passed),
            "pass_rate_of_eligible": round(len(passed) / len(rs), 3) if rs else None,
            "pass_rate_of_built": round(len(passed) / len(built), 3) if built else None,
        }
    all_eligible = len(records)
    summary["total"] = {
        "runs": all_eligible,
        "passed": sum(r["status"] == "passed" for r in records),
        "built": sum(r["status"] != "unbuilt" for r in records),
    }
    summary["total"]["pass_rate_of_eligible"] = (
        round(summary["total"]["passed"] / all_eligible, 3) if all_eligible else None
    )
    built = summary["total"]["built"]
    summary["total"]["pass_rate_of_built"] = round(summary["total"]["passed"] / built, 3) if built else None
    summary["excluded"] = EXCLUDED if excluded is None else excluded
    return summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", default=os.environ.get("WOOLY_CUDA_SAMPLES"), help="a cuda-samples checkout")
    ap.add_argument("--only", nargs="*", help="sample names")
    ap.add_argument("--ways", nargs="*", default=list(WAYS), choices=list(WAYS))
    ap.add_argument("--timeout", type=float, default=300, help="seconds per run")
    ap.add_argument("--jobs", type=int, default=2, help="parallel nvcc builds")
    ap.add_argument("--devices", type=int, default=2, help="devices of the CPU gpud (multi-GPU samples need 2)")
    ap.add_argument("--summarise-only", action="store_true")
    ap.add_argument("--include", action="append", default=[], help="extra include folder (e.g. cuBLAS headers)")
    args = ap.parse_args()
    EXTRA_INCLUDES.extend(os.path.abspath(p) for p in args.include)
    os.makedirs(RESULTS, exist_ok=True)
    runs_path = os.path.join(RESULTS, "runs.jsonl")
    if args.summarise_only:
        records = [json.loads(ln) for ln in open(runs_path)]
        print(json.dumps(summarise(records), indent=1))
        return
    if not args.samples or not os.path.isdir(os.path.join(args.samples, "Samples")):
        raise SystemExit("--samples must name a cuda-samples checkout (github:NVIDIA/cuda-samples)")
    checkout = os.path.abspath(args.samples)
    excluded = EXCLUDED if args.devices >= 2 else {**EXCLUDED, **dict.fromkeys(MULTI_GPU, "needs two GPUs")}
    todo = [(c, n) for c, n in samples(checkout, args.only) if n not in excluded]
    outdir = os.path.join(RESULTS, "bin")
    os.makedirs(outdir, exist_ok=True)
    from woolyhv.launcher import start_gpud

    server, gpud = start_gpud(  # gone with us, even if we are killed
        log_level="error", owner_pid=os.getpid(), extra_args=["--cpu-devices", str(args.devices)]
    )
    records: list[dict] = []
    try:
        jobs = [(c, n, w) for c, n in todo for w in args.ways]
        with ThreadPoolExecutor(args.jobs) as pool, open(runs_path, "w") as out:
            builds = pool.map(lambda j: build(checkout, j[0], j[1], j[2], outdir), jobs)
            for (cat, name, way), (exe, why) in zip(jobs, builds, strict=True):
                rec = {"sample": name, "category": cat, "way": way}
                if exe is None:
                    rec.update(status="unbuilt", first_error=why)
                else:
                    src = os.path.join(checkout, "Samples", cat, name)
                    res = run_one(exe, os.path.dirname(exe), server, args.timeout, src)
                    rec.update(status="passed" if res["passed"] else "failed", **res)
                records.append(rec)
                out.write(json.dumps(rec) + "\n")
                out.flush()
                print(
                    f"{rec['status']:>8}  {way:<6} {name:<32} {rec.get('seconds', '')!s:>6}  {rec.get('first_error', '')}",
                    flush=True,
                )
    finally:
        gpud.terminate()
        gpud.wait(15)
    summary = summarise(records, excluded)
    with open(os.path.join(RESULTS, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary["ways"]), json.dumps(summary["total"]))


if __name__ == "__main__":
    main()
