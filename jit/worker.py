"""Compile worker process: PTX in, x86 object out. Runs `python -m jit.worker`, fed over stdin/stdout.

LLVM fatal errors abort the process they happen in, so translation, optimisation and emission happen here,
never in the daemon. Frames: 4-byte little-endian length + payload. Request: JSON header, PTX bytes.
Reply: JSON header ({"ok": true, "meta": ...} or {"ok": false, "code": int, "message": str}), object bytes.
"""

from __future__ import annotations

import json
import struct
import sys
import traceback
from dataclasses import asdict
from typing import Any, BinaryIO


def read_frame(f: BinaryIO) -> bytes | None:
    h = f.read(4)
    if len(h) < 4:
        return None
    (n,) = struct.unpack("<I", h)
    data = f.read(n)
    if len(data) < n:
        return None
    return data


def write_frame(f: BinaryIO, data: bytes) -> None:
    f.write(struct.pack("<I", len(data)))
    f.write(data)


_TMS: dict[int, Any] = {}


def compile_ptx(ptx: bytes, target: str, opt: int = 2, bounds_check: bool = False) -> tuple[bytes, dict]:
    from jit.emit import ARCHS
    from jit.errors import JitError, not_supported
    from jit.passes import optimize
    from jit.pipeline import translate

    if target in ARCHS:
        from jit.emit.amdgpu import compile_amdgpu
        from jit.pipeline import front_end

        if bounds_check:
            raise not_supported("bounds checking on AMDGPU")
        return compile_amdgpu(front_end(ptx), target, opt)
    if target != "cpu":
        raise not_supported(f"JIT target '{target}'")
    import hashlib

    raw = ptx if isinstance(ptx, bytes) else ptx.encode()
    tag = hashlib.sha256(raw + f"|{target}|{int(bounds_check)}".encode()).hexdigest()[:16]
    if opt == 0:  # the quick tier's symbols must not clash with the optimised tier's in the shared engine
        tag += "q"
    try:
        low = translate(ptx, target, bounds_check, tag, quick=opt == 0)
    except RecursionError as e:
        raise JitError(218, "PTX too deeply nested") from e
    tm = _TMS.get(opt)
    if tm is None:  # one per worker process and level (creating one costs ~1 ms: host CPU name and features)
        tm = _TMS[opt] = optimize.host_target_machine(opt)
    mod = optimize.run_quick(str(low.ir_module), tm) if opt == 0 else optimize.run(str(low.ir_module), tm, opt)
    obj = tm.emit_object(mod)
    meta = {
        "kernels": [asdict(k) for k in low.kernels],
        "globals": low.globals,
        "dyn_offset": low.dyn_offset,
        "bounds_check": bounds_check,
        "gdata": low.gdata.rstrip(b"\0").hex(),
        "gsize": len(low.gdata),  # the zero tail is not sent
        "grelocs": low.grelocs,
        "frelocs": low.frelocs,
        "ftab": low.ftab,
    }
    return obj, meta


# NOTE [worker garbage collection]
# A compile allocates a few hundred thousand Python objects (the PTX AST, llvmlite's IR objects, which point at
# their parents: cycles), so the cyclic collector runs several times during one, and each full collection also
# walks the ~200k objects the worker imported (llvmlite, numpy...). The worker therefore freezes what it imported
# (gc.freeze: never scanned again), keeps the collector off while it compiles, and collects after the reply is
# written, when the client already has its object: the garbage of one compile is reclaimed before the next starts.
def serve(inp: BinaryIO, out: BinaryIO) -> None:
    import gc

    from jit.errors import JitError

    gc.freeze()
    while True:
        hdr = read_frame(inp)
        if hdr is None:
            return
        ptx = read_frame(inp) or b""
        req = json.loads(hdr)
        gc.disable()
        _cpu_budget()
        try:
            obj, meta = compile_ptx(
                ptx, req.get("target", "cpu"), int(req.get("opt", 2)), bool(req.get("bounds_check", False))
            )
            reply, payload = {"ok": True, "meta": meta}, obj
        except JitError as e:
            reply, payload = {"ok": False, "code": e.code, "message": e.message}, b""
        except MemoryError:  # NOTE [bounded compiler]: past RLIMIT_AS
            reply, payload = (
                {
                    "ok": False,
                    "code": 218,
                    "message": "compiling this module needs more memory than a "
                    "compile may use (WOOLY_JIT_WORKER_MEMORY)",
                },
                b"",
            )
        except Exception as e:  # a bug in the translator: report it, keep serving
            msg = f"internal JIT error: {type(e).__name__}: {e}\n{traceback.format_exc(limit=6)}"
            reply, payload = {"ok": False, "code": 218, "message": msg}, b""
        try:
            write_frame(out, json.dumps(reply).encode())
            write_frame(out, payload)
            out.flush()
        except (BrokenPipeError, ValueError):  # the client went away while we compiled (it exited): so do we
            return
        del reply, payload
        gc.enable()
        gc.collect()


# NOTE [bounded compiler]
# A PTX module is a tenant's input, and compiling it must end, in bounded memory, whatever it declares. Absurd
# declarations are refused by the parser (NOTE [declaration limits]); what is left is bounded here, by the kernel:
# - memory: RLIMIT_AS (WOOLY_JIT_WORKER_MEMORY bytes of address space, 4 GiB by default; the idle worker maps
#   ~0.2 GiB). Python's allocations past it are a MemoryError, answered as an error; LLVM's abort the worker, which
#   the parent reports (jit/compiler.py);
# - CPU: before each compile the soft RLIMIT_CPU is set to the CPU time used so far plus WOOLY_JIT_COMPILE_CPU_S
#   (60 s by default); past it the kernel sends SIGXCPU, whose default action ends the worker wherever it is (in
#   LLVM's C++ too, where a Python handler would never run), and the parent reports the bound. The parent also
#   kills a worker that has not answered within WOOLY_JIT_COMPILE_WALL_S (a stopped or starved one);
# - lifetime: a worker dies with its parent. PR_SET_PDEATHSIG fires when the parent *thread* exits (gpud starts
#   workers from pool threads), so a watcher thread compares getppid() with the parent it started with instead,
#   twice a second, and exits the worker when it changed (it runs while the main thread is inside LLVM: llvmlite
#   releases the GIL). An idle worker also exits at EOF on stdin.
def _bound_process() -> None:
    import os
    import resource
    import threading
    import time

    mem = _ARGS["memory"]
    if mem > 0:
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    parent = _ARGS["parent"] or os.getppid()

    def watch() -> None:
        while True:
            if os.getppid() != parent:
                os._exit(3)
            time.sleep(0.5)

    threading.Thread(target=watch, name="wooly-jit-parent-watch", daemon=True).start()


def _cpu_budget() -> None:
    """Allow this compile WOOLY_JIT_COMPILE_CPU_S more seconds of CPU (see NOTE [bounded compiler])."""
    import resource

    limit = _ARGS["cpu_s"]
    if limit <= 0:
        return
    ru = resource.getrusage(resource.RUSAGE_SELF)
    soft = int(ru.ru_utime + ru.ru_stime + limit) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (soft, resource.getrlimit(resource.RLIMIT_CPU)[1]))


def main() -> None:
    sys.setrecursionlimit(20000)
    import os

    _bound_process()
    nice = int(_ARGS["nice"])
    if nice and hasattr(os, "nice"):
        os.nice(nice)  # the background tier-up worker (NOTE [compile tiers])
    # import the translator and initialise LLVM before the first request: a worker is started ahead of need
    # (jit.warm_up), so its first compile should not pay ~0.3 s of imports
    import jit.pipeline  # noqa: F401
    from jit.passes import optimize

    optimize.init_llvm()
    warm_compile(2 if nice > 0 else 0)
    serve(sys.stdin.buffer, sys.stdout.buffer)


# A grid-stride reduction, a barrier and a shuffle: compiling it once imports the modules the translator loads on
# demand (the emitters: 75-120 ms here) and runs LLVM's passes and code generator for the first time, before the
# worker's first real request (a fresh worker's first saxpy compile took 130-360 ms, later ones ~25 ms). The
# foreground worker warms up in the quick tier (~60 ms), the niced background worker in the optimised one.
_WARM_PTX = b"""
.version 7.0
.target sm_80
.address_size 64
.visible .entry warm(.param .u64 p, .param .u32 n)
{
  .reg .pred %p<3>; .reg .b32 %r<10>; .reg .f32 %f<4>; .reg .b64 %rd<6>;
  .shared .align 4 .f32 s[256];
  ld.param.u64 %rd1, [p]; ld.param.u32 %r1, [n];
  mov.u32 %r2, %tid.x; mov.u32 %r3, %ctaid.x; mov.u32 %r4, %ntid.x; mov.u32 %r5, %nctaid.x;
  mad.lo.s32 %r6, %r3, %r4, %r2; mul.lo.s32 %r7, %r4, %r5; mov.f32 %f1, 0f00000000;
  setp.ge.u32 %p1, %r6, %r1; @%p1 bra DONE;
LOOP:
  mul.wide.u32 %rd2, %r6, 4; add.s64 %rd3, %rd1, %rd2; ld.global.f32 %f2, [%rd3]; add.f32 %f1, %f1, %f2;
  add.u32 %r6, %r6, %r7; setp.lt.u32 %p2, %r6, %r1; @%p2 bra LOOP;
DONE:
  shl.b32 %r8, %r2, 2; mov.u32 %r9, s; add.u32 %r9, %r9, %r8; st.shared.f32 [%r9], %f1;
  bar.sync 0;
  shfl.sync.down.b32 %f3, %f1, 1, 31, -1;
  mul.wide.u32 %rd4, %r3, 4; add.s64 %rd5, %rd1, %rd4; st.global.f32 [%rd5], %f3;
  ret;
}
"""


def warm_compile(opt: int) -> None:
    try:
        compile_ptx(_WARM_PTX, "cpu", opt)
    except Exception:  # noqa: BLE001 - a warm-up only; a real request reports its own errors
        pass


# The limits the parent gives this worker (jit/compiler.py ``Worker._start``, from its JitSettings): address
# space in bytes (0: none), CPU seconds per compile (0: none), niceness, the parent's pid (0: our parent).
_ARGS: dict[str, Any] = {"memory": 0, "cpu_s": 0.0, "nice": 0, "parent": 0}

if __name__ == "__main__":
    if len(sys.argv) > 1:
        _ARGS.update(json.loads(sys.argv[1]))
    main()
