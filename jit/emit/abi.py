"""The CPU target's binary interface: the slot layouts of the launch context, the worker context, the thread
context of .func code and the per-thread scheduler record, shared by the code generator (jit/emit/cpu/) and the
loader (jit/runtime.py, jit/loader.py, jit/watchdog.py).

Kept free of heavy imports: the loader (a disk cache hit in a restarted daemon) imports these, not the lowering.
"""

from __future__ import annotations

# launch context (i64 slots)
L_PARAMS, L_GRID, L_BLOCK, L_NBLOCKS, L_ERROR, L_PRINTF, L_DYN, L_NTHREADS, L_ASSERT = 0, 1, 4, 7, 9, 10, 11, 12, 13
L_GLOBALS, L_RANGES, L_NRANGES, L_BADADDR = 14, 15, 16, 17  # data block; bounds-check table (jit/emit/bounds.py)
L_CHUNK = 18  # blocks a worker claims at once
L_HEAP_ALLOC, L_HEAP_FREE, L_HEAP = 19, 20, 21  # device malloc/free of bounds-checked modules (NOTE [device heap])
L_ROOTS = 22  # [lo, hi) per rooted pointer parameter of a bounds-checked kernel (NOTE [rooted bounds checks])
L_OS_YIELD, L_GRID_WS = (
    23,
    24,
)  # cooperative launches: sched_yield's address; the grid-sync workspace (NOTE [grid sync])
L_ALLOWED = 25  # workers of this launch that may run now (NOTE [spatial sharing], jit/cores.py)
# A block's shared memory is allocated in units of this many bytes, as on NVIDIA GPUs (the occupancy calculator's
# "shared memory allocation unit"): an access past the bytes a launch asked for but inside the unit is legal there.
# numba's LLVM reads `dynsmem[0:7]` of a 28-byte window as two 16-byte vectors (the extern array is 16-aligned).
SHARED_UNIT = 128


def shared_window_bytes(n: int) -> int:
    """The bytes of a block's shared window for ``n`` bytes of static plus dynamic shared memory."""
    return (n + SHARED_UNIT - 1) // SHARED_UNIT * SHARED_UNIT


WINDOW_GUARD = (
    4096  # bytes of a launch's own before and after each shared window and .local area (NOTE [confined windows])
)
L_NEXT = 32  # the shared block counter: >= 64 bytes from every other slot, so claims do not evict them
L_SLOTS = 40
# worker context
W_SHARED, W_LOCAL, W_SCRATCH, W_RED = 0, 1, 2, 3  # W_RED: NOTE [combined global reductions]
W_INDEX = 4  # the worker's index in its launch: it runs while W_INDEX < L[L_ALLOWED] (NOTE [spatial sharing])
W_SLOTS = 5
# per-worker combining buffer of relaxed reductions (bytes; NOTE [combined global reductions], jit/emit/cpu/red.py):
# count, lo, hi, the dense region's base, shift, count (0: none) and is64, pad, tags[RED_SLOTS], deltas[RED_SLOTS],
# dense[DENSE_SLOTS] (NOTE [dense reduction slots])
RED_SLOTS = 256
DENSE_SLOTS = 1024
RB_COUNT, RB_LO, RB_HI, RB_DBASE, RB_DSHIFT, RB_DCOUNT, RB_DIS64, RB_TAGS = 0, 8, 16, 24, 32, 40, 48, 64
RB_DELTAS = RB_TAGS + 8 * RED_SLOTS
RB_DENSE = RB_DELTAS + 8 * RED_SLOTS
RED_BYTES = RB_DENSE + 8 * DENSE_SLOTS
# thread context passed to .func code (i64 slots)
T_TID, T_NTID, T_CTAID, T_NCTAID, T_SHARED, T_LCTX, T_LINEAR, T_EXITED = 0, 3, 6, 9, 12, 13, 14, 15
T_LSP, T_LEND = (
    16,
    17,
)  # .func frame stack of a bounds-checked kernel (NOTE [checked .func stack], jit/emit/cpu/func.py)
T_LLO, T_LHI = 18, 19  # the worker's .local area of a bounds-checked kernel (NOTE [state space checks], bounds.py)
T_STACK_FLOOR = 20  # the lowest native stack address a .func call may reach (NOTE [bounded recursion], cpu/func.py)
T_HINTS = 21  # the worker's bounds-check hints of .func access sites (NOTE [.func hints], jit/emit/bounds.py)
T_SLOTS = 22
FUNC_HINTS = 256  # .func access sites of a module that get a worker-lifetime hint; later ones get a per-call one
# per-thread scheduler record (bytes)
R_PC, R_PARK, R_XA, R_XB, R_XC, R_XMASK, R_XPRED, R_RVAL, R_RPRED, R_DONE, R_SLOTS = (
    0,
    4,
    8,
    16,
    20,
    24,
    28,
    32,
    40,
    44,
    48,
)


# NOTE [device launches] (jit/devlaunch.py): the value of a kernel's name in PTX (`mov.u64 %rd, kernel`), which a
# kernel passes to the device runtime to launch that kernel. A tag no heap or stack address has, and the entry's
# name hashed: the runtime finds the entry of that handle in the launching kernel's own module.
KERNEL_HANDLE_TAG = 0x7C0D << 48


def kernel_handle(name: str) -> int:
    import zlib

    return KERNEL_HANDLE_TAG | zlib.crc32(name.encode())
