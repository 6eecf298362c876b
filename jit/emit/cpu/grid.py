"""Grid-wide synchronisation on the CPU: what a cooperative launch gives a kernel (NOTE [grid sync]).

NOTE [grid sync]
`cg::this_grid().sync()` needs every block of the grid resident at once: a block that arrives waits until all the
others have. On a GPU a cooperative launch (cuLaunchCooperativeKernel, or cuLaunchKernelEx with the cooperative
attribute) guarantees that, for grids no larger than the device's occupancy (blocks per SM x SMs), and hands the
kernel a zeroed workspace through the environment registers %envreg1:%envreg2 (high:low 32 bits of its address).
The barrier itself is device code: nvcc inlines it (a block barrier, one thread of the block adds to a counter in
the workspace and spins until the counter's top bit flips, a block barrier); numba calls cudaCGSynchronize from
the cudadevrt library, which the JIT supplies in PTX (jit/devrt.py) with the same protocol. An ordinary launch
leaves the workspace NULL, and both kinds of code trap on it, as on a GPU.

Here a cooperative launch (jit.runtime CpuKernel.launch(cooperative=True)) runs each block on its own OS thread,
so every block of the grid is resident, and puts the workspace's address in L[L_GRID_WS]. A thread that spins in a
wait loop (NOTE [waiting threads yield]) or backs off with `nanosleep` gives its core away there (sched_yield,
whose address a cooperative launch puts in L[L_OS_YIELD]): a grid has more blocks than the host has cores, and a
spinning block would otherwise keep the block it waits for off the CPU for a whole time slice. Ordinary launches
leave the slot 0 and pay a load and a branch per wait.
"""

from __future__ import annotations

from llvmlite import ir

from jit.emit.abi import L_GRID_WS, L_OS_YIELD
from jit.lower.core import FuncLowering
from jit.lower.types import I32, I64


def _slot(fl: FuncLowering, slot: int) -> ir.Value:
    L = fl.env.launch_ctx(fl)  # type: ignore[attr-defined]
    return fl.b.load(fl.b.gep(L, [ir.Constant(I64, slot)], source_etype=I64), typ=I64)


def envreg(fl: FuncLowering, name: str) -> ir.Value:
    """%envreg1 / %envreg2: the high / low half of the grid-sync workspace's address (0 outside cooperative launches)."""
    ws = _slot(fl, L_GRID_WS)
    return fl.b.trunc(fl.b.lshr(ws, ir.Constant(I64, 32)) if name == "envreg1" else ws, I32)


def os_yield(fl: FuncLowering) -> None:
    """Give the core away if this is a cooperative launch (L[L_OS_YIELD] = sched_yield), else nothing."""
    b = fl.b
    f = _slot(fl, L_OS_YIELD)
    with b.if_then(b.icmp_unsigned("!=", f, ir.Constant(I64, 0)), likely=False):
        b.call(b.inttoptr(f, ir.FunctionType(I32, []).as_pointer()), [])
