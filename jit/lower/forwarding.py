"""Register values reused within a basic block, and register allocas nobody reads dropped.

NOTE [register forwarding]
Registers are allocas (LLVM's SROA makes them SSA values), so every use is a load and every definition a store:
a third of the reduction's quick-tier IR was loads of a register stored one instruction earlier. Every one of
them costs Python (llvmlite's builder, then its IR text), LLVM's parser and SROA. Within one basic block, a
register's value is known after a store to it, or after a first load: Forwarding.value reuses it. It learns those
values by scanning the instructions appended to the block since its last call, so stores made by any code (the
thread-record restores write register allocas directly) are seen. A call with a register alloca among its
operands forgets that register (register allocas never escape otherwise). Only while the builder appends at the
end of its block; anywhere else it loads as before.

Once a function is lowered, drop_unread_allocas deletes the allocas that are only ever stored to, with their
stores: with forwarding, that is most registers living within one basic block. (SROA would delete them too, but
each costs IR text, parsing and analysis first.) The reduction's quick-tier IR went from 2295 to 1521 lines.
"""

from __future__ import annotations

from llvmlite import ir

_ESCAPES = (ir.CallInstr, ir.CmpXchg, ir.AtomicRMW)


def _base(p: ir.Value) -> ir.Value:
    """The value a chain of GEPs and casts starts from."""
    while isinstance(p, (ir.GEPInstr, ir.CastInstr)) and p.operands:
        p = p.operands[0]
    return p


class Forwarding:
    """What one builder's current block is known to hold in its register allocas (see the NOTE)."""

    def __init__(self) -> None:
        self.block: ir.Block | None = None
        self.pos = 0  # instructions of self.block scanned so far
        self.known: dict[int, ir.Value] = {}  # id(alloca) -> its value at the end of the block

    def value(self, b: ir.IRBuilder, a: ir.AllocaInstr) -> ir.Value:
        """The current value of register alloca ``a`` at ``b``'s position."""
        blk = b.block
        ins = blk.instructions if blk is not None else None
        if ins is None or b._anchor != len(ins):  # noqa: SLF001 - llvmlite keeps the insert position private
            return b.load(a)
        if blk is not self.block:
            self.block, self.pos, self.known = blk, 0, {}
        known = self.known
        for x in ins[self.pos :]:
            if isinstance(x, ir.StoreInstr):
                v, p = x.operands
                if isinstance(p, ir.AllocaInstr):
                    if v.type == p.allocated_type:
                        known[id(p)] = v
                    else:
                        known.pop(id(p), None)
                elif isinstance(p, (ir.GEPInstr, ir.CastInstr)):  # into an aggregate alloca
                    known.pop(id(_base(p)), None)
            elif isinstance(x, ir.LoadInstr):
                p = x.operands[0]
                if isinstance(p, ir.AllocaInstr) and x.type == p.allocated_type:
                    known.setdefault(id(p), x)
            elif isinstance(x, _ESCAPES):
                for o in x.operands:
                    if isinstance(o, (ir.AllocaInstr, ir.GEPInstr, ir.CastInstr)):
                        known.pop(id(_base(o)), None)
        self.pos = len(ins)
        v = known.get(id(a))
        return b.load(a) if v is None else v


def drop_unread_allocas(fn: ir.Function) -> None:
    """Delete the allocas of ``fn`` that are only ever stored to, with their stores (see the NOTE)."""
    if not fn.blocks:
        return
    allocas = {id(x): x for x in fn.blocks[0].instructions if isinstance(x, ir.AllocaInstr)}
    if not allocas:
        return
    stores: dict[int, list[ir.Instruction]] = {}
    read: set[int] = set()
    for blk in fn.blocks:
        for x in blk.instructions:
            ops = getattr(x, "operands", ())
            if isinstance(x, ir.StoreInstr):
                if id(ops[1]) in allocas:
                    stores.setdefault(id(ops[1]), []).append(x)
                if id(ops[0]) in allocas:  # the address itself is stored
                    read.add(id(ops[0]))
                continue
            read.update(id(o) for o in ops if id(o) in allocas)
            if isinstance(x, ir.PhiInstr):
                read.update(id(v) for v, _ in x.incomings if id(v) in allocas)
    gone: set[int] = set()
    for k in allocas:
        if k not in read:
            gone.add(k)
            gone.update(id(x) for x in stores.get(k, ()))
    if not gone:
        return
    for blk in fn.blocks:
        if any(id(x) in gone for x in blk.instructions):
            blk.instructions[:] = [x for x in blk.instructions if id(x) not in gone]


__all__ = ["Forwarding", "drop_unread_allocas"]
