"""The device runtime functions a PTX module may call but not define, supplied by the JIT as PTX.

numba-cuda's grid groups (`cuda.cg.this_grid().sync()`) call `cudaCGGetIntrinsicHandle` and `cudaCGSynchronize`,
which on NVIDIA come from the machine-code library cudadevrt linked in after PTX compilation. A wooly device loads
PTX only, so the client's link step leaves cudadevrt out (shim/native/numba_ptx.py) and the JIT appends these
definitions to any module that declares them. They are `.weak`: a module that defines one itself keeps its own.
NOTE [grid sync] (jit/emit/cpu/grid.py) describes the workspace and the cooperative launch they rely on.
"""

from __future__ import annotations

import re

from jit.devlaunch import (
    DEVICE_ATTRIBUTE,
    ERRORS,
    FUNC_ATTRIBUTE,
    FUNC_ATTRIBUTES_SIZE,
    FUNC_FIELDS,
    LIMIT,
    OCCUPANCY,
    UNKNOWN,
)
from proto.constants import CUDA_VERSION

# handle = the grid-sync workspace (0 outside a cooperative launch); the scope argument (grid, multi-grid) does not
# matter on one device
_HANDLE = """
.weak .func (.param .b64 func_retval0) cudaCGGetIntrinsicHandle(.param .b32 cudaCGGetIntrinsicHandle_scope)
{
  .reg .b32 %r<3>; .reg .b64 %rd<4>;
  mov.u32 %r1, %envreg1; mov.u32 %r2, %envreg2;
  cvt.u64.u32 %rd1, %r1; cvt.u64.u32 %rd2, %r2; shl.b64 %rd1, %rd1, 32; or.b64 %rd3, %rd1, %rd2;
  st.param.b64 [func_retval0], %rd3;
  ret;
}
"""

# A sense-reversing grid barrier in the workspace: u32 arrivals at +8, u32 generation at +12. Thread 0 of each
# block reads the generation, then arrives; the last block to arrive resets the count and publishes the next
# generation, the others wait for it. A block cannot read a generation that has already moved on, because the
# generation moves only after every block, its own included, has arrived. A NULL handle (no cooperative launch)
# traps, as on a GPU.
_SYNC = """
.weak .func (.param .b32 func_retval0) cudaCGSynchronize(.param .b64 cudaCGSynchronize_handle,
                                                         .param .b32 cudaCGSynchronize_flags)
{
  .reg .pred %p<4>; .reg .b32 %r<10>; .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [cudaCGSynchronize_handle];
  setp.eq.u64 %p1, %rd1, 0;
  @%p1 trap;
  barrier.sync 0;
  mov.u32 %r1, %tid.x; mov.u32 %r2, %tid.y; or.b32 %r1, %r1, %r2; mov.u32 %r2, %tid.z; or.b32 %r1, %r1, %r2;
  setp.ne.u32 %p2, %r1, 0;
  @%p2 bra $wooly_cg_done;
  mov.u32 %r3, %nctaid.x; mov.u32 %r4, %nctaid.y; mul.lo.u32 %r3, %r3, %r4; mov.u32 %r4, %nctaid.z;
  mul.lo.u32 %r3, %r3, %r4; sub.u32 %r3, %r3, 1;
  ld.acquire.gpu.u32 %r5, [%rd1+12];
  atom.acq_rel.gpu.add.u32 %r6, [%rd1+8], 1;
  setp.ne.u32 %p3, %r6, %r3;
  @%p3 bra $wooly_cg_wait;
  st.relaxed.gpu.u32 [%rd1+8], 0;
  add.u32 %r7, %r5, 1;
  st.release.gpu.u32 [%rd1+12], %r7;
  bra.uni $wooly_cg_done;
$wooly_cg_wait:
  nanosleep.u32 0;
  ld.acquire.gpu.u32 %r8, [%rd1+12];
  setp.eq.u32 %p3, %r8, %r5;
  @%p3 bra $wooly_cg_wait;
$wooly_cg_done:
  barrier.sync 0;
  st.param.b32 [func_retval0], 0;
  ret;
}
"""

FUNCS = {"cudaCGGetIntrinsicHandle": _HANDLE, "cudaCGSynchronize": _SYNC}

# The device runtime API a kernel that launches kernels may call (NOTE [device launches] in jit/devlaunch.py). The
# buffer, launch and last-error calls are served by the host (jit/lower/ops_ctrl.py DEVICE_LAUNCH_CALLS); these are
# PTX. Queued grids run in launch order, so streams and events need no state: a stream or event is a token.
_RET0 = "st.param.b32 [func_retval0], 0; ret;"
_COPY_DECL = (
    ".extern .func (.param .b32 r) __wooly_cdp_copy(.param .b64 dst, .param .b64 src, .param .b64 w, .param .b64 h, "
    ".param .b64 d, .param .b64 dp, .param .b64 sp, .param .b64 ds, .param .b64 ss, .param .b32 is_set);\n"
)


def _store(value: int, bits: int = 32, p: str = "p") -> str:
    """The body of a call that writes one constant to its pointer argument ``p`` (NULL: cudaErrorInvalidValue)."""
    return f"""
  .reg .b64 %rd1; .reg .pred %p1;
  ld.param.u64 %rd1, [{p}]; setp.eq.u64 %p1, %rd1, 0; @%p1 bra $wooly_null;
  st.u{bits} [%rd1], {value}; {_RET0}
$wooly_null: st.param.b32 [func_retval0], 1; ret;"""


_CDP = {
    "StreamCreateWithFlags": ("(.param .b64 s, .param .b32 flags)", _store(16, 64, "s")),
    "StreamDestroy": ("(.param .b64 s)", _RET0),
    "StreamWaitEvent": ("(.param .b64 s, .param .b64 e, .param .b32 flags)", _RET0),
    "EventCreateWithFlags": ("(.param .b64 e, .param .b32 flags)", _store(32, 64, "e")),
    "EventRecord": ("(.param .b64 e, .param .b64 s)", _RET0),
    "EventRecordWithFlags": ("(.param .b64 e, .param .b64 s, .param .b32 flags)", _RET0),
    "EventDestroy": ("(.param .b64 e)", _RET0),
    # the device the kernel runs on is its context's device: 0 in that context's numbering
    "GetDevice": ("(.param .b64 p)", _store(0)),
    "Malloc": (
        "(.param .b64 p, .param .b64 n)",
        """
  .reg .b64 %rd<4>; .reg .pred %p<3>; .reg .b32 %r1;
  ld.param.u64 %rd1, [p]; setp.eq.u64 %p1, %rd1, 0; @%p1 bra $wooly_null;
  ld.param.u64 %rd2, [n];
  { .param .b64 a0; .param .b64 r0; st.param.b64 [a0], %rd2;
    call.uni (r0), malloc, (a0); ld.param.b64 %rd3, [r0]; }
  st.u64 [%rd1], %rd3; setp.eq.u64 %p2, %rd3, 0; selp.b32 %r1, 2, 0, %p2;
  st.param.b32 [func_retval0], %r1; ret;
$wooly_null: st.param.b32 [func_retval0], 1; ret;""",
    ),
    "Free": (
        "(.param .b64 p)",
        """
  .reg .b64 %rd1;
  ld.param.u64 %rd1, [p];
  { .param .b64 a0; st.param.b64 [a0], %rd1; call.uni free, (a0); }
  """
        + _RET0,
    ),
}
# The queries (cudaDeviceGetAttribute, cudaFuncGetAttributes, the occupancy calls, cudaDeviceGetLimit) and the 3D
# copies: PTX around the host's halves (jit/lower/ops_ctrl.py DEVICE_LAUNCH_CALLS), which take scalars; the pointers
# a kernel passes are read and written here, under its own bounds checks. __wooly_cdp_query(what, a, b, c) answers a
# value, or 1 << 32 with the cudaError_t (jit.devlaunch.DeviceLaunches.query).
_QUERY_DECL = (
    ".extern .func (.param .b64 r) __wooly_cdp_query(.param .b32 w, .param .b64 a, .param .b64 b, .param .b64 c);\n"
)


def _query(what: int, a: str, b: str, c: str) -> str:
    """PTX asking the host: the answer in %rd2, an error returned from the function ($wooly_err)."""
    return f"""
  mov.u32 %r9, {what};
  {{ .param .b64 r0; .param .b32 q0; .param .b64 q1; .param .b64 q2; .param .b64 q3;
    st.param.b32 [q0], %r9; st.param.b64 [q1], {a}; st.param.b64 [q2], {b}; st.param.b64 [q3], {c};
    call.uni (r0), __wooly_cdp_query, (q0, q1, q2, q3); ld.param.b64 %rd2, [r0]; }}
  shr.u64 %rd9, %rd2, 32; setp.ne.u64 %p2, %rd9, 0; @%p2 bra $wooly_err; cvt.u32.u64 %r3, %rd2;"""


# the registers every query function declares; the output pointer in %rd1, NULL: cudaErrorInvalidValue
_QUERY_HEAD = """
  .reg .b64 %rd<12>; .reg .b32 %r<10>; .reg .pred %p<3>;
  ld.param.u64 %rd1, [{out}]; setp.eq.u64 %p1, %rd1, 0; @%p1 bra $wooly_null; mov.u64 %rd8, 0;"""
_QUERY_TAIL = (
    _RET0
    + """
$wooly_err: cvt.u32.u64 %r3, %rd2; st.param.b32 [func_retval0], %r3; ret;
$wooly_null: st.param.b32 [func_retval0], 1; ret;"""
)


def _asking(out: str, loads: str, what: int, args: tuple[str, str, str], store: str) -> str:
    """The body of a query function: its output pointer ``out``, the arguments loaded, one question, one store."""
    return _QUERY_HEAD.format(out=out) + "\n  " + loads + _query(what, *args) + "\n  " + store + " " + _QUERY_TAIL


_ATTRIBUTE = _asking(
    "v",
    "ld.param.u32 %r1, [a]; ld.param.u32 %r2, [d]; cvt.u64.u32 %rd3, %r1; cvt.u64.u32 %rd4, %r2;",
    DEVICE_ATTRIBUTE,
    ("%rd3", "%rd4", "%rd8"),
    "st.u32 [%rd1], %r3;",
)
# cudaFuncAttributes: field by field, each stored once answered (the first answer tells whether the function is a
# kernel, before anything is written), then the cluster fields and the reserved words zeroed
_FUNC_ATTRIBUTES = (
    _QUERY_HEAD.format(out="p")
    + "\n  ld.param.u64 %rd3, [f];"
    + "".join(
        f"\n  mov.u64 %rd4, {i};"
        + _query(FUNC_ATTRIBUTE, "%rd3", "%rd4", "%rd8")
        + (f" st.u64 [%rd1+{off}], %rd2;" if size == 8 else f" st.u32 [%rd1+{off}], %r3;")
        for i, (off, size, _) in enumerate(FUNC_FIELDS)
    )
    + "\n  mov.u32 %r3, 0;"
    + "".join(f" st.u32 [%rd1+{off}], %r3;" for off in range(FUNC_FIELDS[-1][0] + 4, FUNC_ATTRIBUTES_SIZE, 4))
    + "\n  "
    + _QUERY_TAIL
)
# cudaOccupancyMaxActiveBlocksPerMultiprocessor[WithFlags](&n, kernel, block size, dynamic shared bytes[, flags])
_OCCUPANCY = _asking(
    "n",
    "ld.param.u64 %rd3, [f]; ld.param.u32 %r1, [b]; cvt.u64.u32 %rd4, %r1; ld.param.u64 %rd5, [m];\n"
    "  {flags} cvt.u64.u32 %rd6, %r2; shl.b64 %rd6, %rd6, 32; or.b64 %rd4, %rd4, %rd6;",
    OCCUPANCY,
    ("%rd3", "%rd4", "%rd5"),
    "st.u32 [%rd1], %r3;",
)
_LIMIT = _asking(
    "v", "ld.param.u32 %r1, [l]; cvt.u64.u32 %rd3, %r1;", LIMIT, ("%rd3", "%rd8", "%rd8"), "st.u64 [%rd1], %rd2;"
)


# dst, src (or the byte), width, height, depth, dst pitch, src pitch, dst slice, src slice in %rd1..%rd9
_COPY_CALL = """
  { .param .b32 r0; .param .b64 a0; .param .b64 a1; .param .b64 a2; .param .b64 a3; .param .b64 a4;
    .param .b64 a5; .param .b64 a6; .param .b64 a7; .param .b64 a8; .param .b32 a9;
    st.param.b64 [a0], %rd1; st.param.b64 [a1], %rd2; st.param.b64 [a2], %rd3; st.param.b64 [a3], %rd4;
    st.param.b64 [a4], %rd5; st.param.b64 [a5], %rd6; st.param.b64 [a6], %rd7; st.param.b64 [a7], %rd8;
    st.param.b64 [a8], %rd9; st.param.b32 [a9], {is_set};
    call.uni (r0), __wooly_cdp_copy, (a0, a1, a2, a3, a4, a5, a6, a7, a8, a9); ld.param.b32 %r1, [r0]; }
  st.param.b32 [func_retval0], %r1; ret;"""

# cudaMemset3DAsync(cudaPitchedPtr {ptr, pitch, xsize, ysize}, int value, cudaExtent {width, height, depth}, stream)
_MEMSET3D = """
  .reg .b64 %rd<12>; .reg .b32 %r<3>;
  ld.param.u64 %rd1, [p]; ld.param.u64 %rd6, [p+8]; ld.param.u64 %rd10, [p+24];
  ld.param.u32 %r2, [v]; cvt.u64.u32 %rd2, %r2;
  ld.param.u64 %rd3, [e]; ld.param.u64 %rd4, [e+8]; ld.param.u64 %rd5, [e+16];
  mov.u64 %rd7, %rd6; mul.lo.u64 %rd8, %rd6, %rd10; mov.u64 %rd9, %rd8;""" + _COPY_CALL.replace("{is_set}", "1")

# cudaMemcpy3DAsync(const cudaMemcpy3DParms *p, stream): srcArray +0, srcPos {x, y, z} +8, srcPtr {ptr, pitch, xsize,
# ysize} +32, dstArray +64, dstPos +72, dstPtr +96, extent {width, height, depth} +128, kind +152. A position's x is
# in bytes (linear memory); an element is at ptr + (z * ysize + y) * pitch + x. CUDA arrays are not device memory
# here: a copy naming one is cudaErrorNotSupported.
_MEMCPY3D = (
    """
  .reg .b64 %rd<20>; .reg .b32 %r<3>; .reg .pred %p<3>;
  ld.param.u64 %rd10, [p]; setp.eq.u64 %p1, %rd10, 0; @%p1 bra $wooly_null;
  ld.u64 %rd11, [%rd10]; ld.u64 %rd12, [%rd10+64]; or.b64 %rd11, %rd11, %rd12;
  setp.ne.u64 %p2, %rd11, 0; @%p2 bra $wooly_array;
  ld.u64 %rd3, [%rd10+128]; ld.u64 %rd4, [%rd10+136]; ld.u64 %rd5, [%rd10+144];
  ld.u64 %rd7, [%rd10+40]; ld.u64 %rd13, [%rd10+56]; mul.lo.u64 %rd9, %rd7, %rd13;
  ld.u64 %rd14, [%rd10+24]; mul.lo.u64 %rd14, %rd14, %rd13; ld.u64 %rd15, [%rd10+16]; add.u64 %rd14, %rd14, %rd15;
  mul.lo.u64 %rd14, %rd14, %rd7; ld.u64 %rd15, [%rd10+8]; add.u64 %rd14, %rd14, %rd15;
  ld.u64 %rd2, [%rd10+32]; add.u64 %rd2, %rd2, %rd14;
  ld.u64 %rd6, [%rd10+104]; ld.u64 %rd13, [%rd10+120]; mul.lo.u64 %rd8, %rd6, %rd13;
  ld.u64 %rd14, [%rd10+88]; mul.lo.u64 %rd14, %rd14, %rd13; ld.u64 %rd15, [%rd10+80]; add.u64 %rd14, %rd14, %rd15;
  mul.lo.u64 %rd14, %rd14, %rd6; ld.u64 %rd15, [%rd10+72]; add.u64 %rd14, %rd14, %rd15;
  ld.u64 %rd1, [%rd10+96]; add.u64 %rd1, %rd1, %rd14;"""
    + _COPY_CALL.replace("{is_set}", "0")
    + """
$wooly_array: st.param.b32 [func_retval0], 801; ret;
$wooly_null: st.param.b32 [func_retval0], 1; ret;"""
)
_CDP.update(
    {
        "DeviceGetAttribute": ("(.param .b64 v, .param .b32 a, .param .b32 d)", _ATTRIBUTE),
        "FuncGetAttributes": ("(.param .b64 p, .param .b64 f)", _FUNC_ATTRIBUTES),
        "OccupancyMaxActiveBlocksPerMultiprocessor": (
            "(.param .b64 n, .param .b64 f, .param .b32 b, .param .b64 m)",
            _OCCUPANCY.replace("{flags}", "mov.u32 %r2, 0;"),
        ),
        "OccupancyMaxActiveBlocksPerMultiprocessorWithFlags": (
            "(.param .b64 n, .param .b64 f, .param .b32 b, .param .b64 m, .param .b32 g)",
            _OCCUPANCY.replace("{flags}", "ld.param.u32 %r2, [g];"),
        ),
        "DeviceGetLimit": ("(.param .b64 v, .param .b32 l)", _LIMIT),
        "RuntimeGetVersion": ("(.param .b64 p)", _store(CUDA_VERSION)),
        # device code sees its own device alone: cudaGetDevice answers 0, another device is cudaErrorInvalidDevice
        "GetDeviceCount": ("(.param .b64 p)", _store(1)),
        "DeviceGetCacheConfig": ("(.param .b64 p)", _store(0)),  # cudaFuncCachePreferNone
        "DeviceGetSharedMemConfig": ("(.param .b64 p)", _store(1)),  # cudaSharedMemBankSizeFourByte
        "Memset3DAsync": (
            "(.param .align 8 .b8 p[32], .param .b32 v, .param .align 8 .b8 e[24], .param .b64 s)",
            _MEMSET3D,
        ),
        "Memcpy3DAsync": ("(.param .b64 p, .param .b64 s)", _MEMCPY3D),
    }
)
# the host halves they call (declared once, before the first definition that calls them)
_HOST_DECLS = {
    **dict.fromkeys(
        (
            "DeviceGetAttribute",
            "FuncGetAttributes",
            "OccupancyMaxActiveBlocksPerMultiprocessor",
            "OccupancyMaxActiveBlocksPerMultiprocessorWithFlags",
            "DeviceGetLimit",
        ),
        _QUERY_DECL,
    ),
    "Memset3DAsync": _COPY_DECL,
    "Memcpy3DAsync": _COPY_DECL,
}
_HEAP_DECLS = {
    "malloc": ".extern .func (.param .b64 func_retval0) malloc(.param .b64 malloc_n);\n",
    "free": ".extern .func free(.param .b64 free_p);\n",
}


def _error_text(which: int) -> tuple[str, str]:
    """The strings (module globals) and the body of cudaGetErrorName (0) or cudaGetErrorString (1)."""
    tag = ("name", "string")[which]
    strings, body = [], ["  .reg .b32 %r1; .reg .pred %p1; .reg .b64 %rd1;", "  ld.param.u32 %r1, [code];"]
    for code, texts in ERRORS.items():
        raw = texts[which].encode() + b"\0"
        sym = f"$wooly_cdp_{tag}_{code}"
        strings.append(f".global .align 1 .b8 {sym}[{len(raw)}] = {{{', '.join(str(b) for b in raw)}}};\n")
        if code != UNKNOWN:
            body.append(f"  setp.eq.u32 %p1, %r1, {code}; @%p1 bra $wooly_e{code};")
    body.append(f"  mov.u64 %rd1, $wooly_cdp_{tag}_{UNKNOWN}; bra.uni $wooly_done;")
    for code in ERRORS:
        if code != UNKNOWN:
            body.append(f"$wooly_e{code}: mov.u64 %rd1, $wooly_cdp_{tag}_{code}; bra.uni $wooly_done;")
    body.append("$wooly_done: cvta.global.u64 %rd1, %rd1; st.param.b64 [func_retval0], %rd1; ret;")
    return "".join(strings), "\n".join(body)


def _cdp_functions(raw: bytes) -> str:
    declared = {m.group(1).decode() for m in _DECLARED.finditer(raw)}
    out: list[str] = []
    for name in sorted(declared):
        what = name.removeprefix("__cudaCDP2").removeprefix("cuda")
        if what in _CDP:
            params, body = _CDP[what]
            out.append(f"\n.weak .func (.param .b32 func_retval0) {name}{params}\n{{{body}\n}}\n")
            decl = _HOST_DECLS.get(what)
            if decl is not None:
                out.insert(0, decl)
            if what in ("Malloc", "Free"):  # they call the device heap's malloc and free
                for f, decl in _HEAP_DECLS.items():
                    if not re.search(rb"\.func\s*(?:\([^)]*\))?\s*" + f.encode() + rb"\s*\(", raw):
                        out.insert(0, decl)
        elif what in ("GetErrorName", "GetErrorString"):
            strings, body = _error_text(0 if what == "GetErrorName" else 1)
            out.append(f"\n{strings}.weak .func (.param .b64 func_retval0) {name}(.param .b32 code)\n{{\n{body}\n}}\n")
    return "".join(dict.fromkeys(out))  # a declaration once


_DECLARED = re.compile(rb"\.extern\s+\.func\s*(?:\([^)]*\))?\s*((?:__cudaCDP2|cuda)[A-Za-z0-9]+)")


def supply(ptx: str | bytes) -> str | bytes:
    """``ptx`` with the definitions of the device runtime functions it names appended (cheap when it names none)."""
    raw = ptx if isinstance(ptx, bytes) else ptx.encode()
    if b"cudaCG" not in raw and b"cudaCDP2" not in raw and b"LaunchDevice" not in raw:
        return ptx  # substring searches: cheap on a library's 20 MB module
    extra = "".join(text for name, text in FUNCS.items() if name.encode() in raw)
    extra += _cdp_functions(raw)
    if not extra:
        return ptx
    return ptx + (extra.encode() if isinstance(ptx, bytes) else extra)
