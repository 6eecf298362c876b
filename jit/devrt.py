"""The device runtime functions a PTX module may call but not define, supplied by the JIT as PTX.

numba-cuda's grid groups (`cuda.cg.this_grid().sync()`) call `cudaCGGetIntrinsicHandle` and `cudaCGSynchronize`,
which on NVIDIA come from the machine-code library cudadevrt linked in after PTX compilation. A wooly device loads
PTX only, so the client's link step leaves cudadevrt out (shim/native/numba_ptx.py) and the JIT appends these
definitions to any module that declares them. They are `.weak`: a module that defines one itself keeps its own.
NOTE [grid sync] (jit/emit/cpu/grid.py) describes the workspace and the cooperative launch they rely on.
"""

from __future__ import annotations

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


def supply(ptx: str | bytes) -> str | bytes:
    """``ptx`` with the definitions of the device runtime functions it names appended (cheap when it names none)."""
    raw = ptx if isinstance(ptx, bytes) else ptx.encode()
    if b"cudaCG" not in raw:
        return ptx
    extra = "".join(text for name, text in FUNCS.items() if name.encode() in raw)
    return ptx + (extra.encode() if isinstance(ptx, bytes) else extra)
