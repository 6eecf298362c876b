"""Find, for each 64-bit register of a kernel, the kernel pointer parameter its value is derived from.

NOTE [pointer roots]
PTX addresses are plain integers: `ld.param.u64 %rd1, [p]; cvta.to.global.u64 %rd2, %rd1; add.s64 %rd3, %rd2, %rd9;
ld.global.f32 %f1, [%rd3]`. Lowered literally, every access is `inttoptr(i64)`, which LLVM's scalar evolution cannot
analyse: no runtime alias checks, no vectorisation of the thread loop, no hoisting. This pass computes, for every
register, a *root*: the kernel parameter (name, byte offset) whose value the register equals plus some integer.
The lowering then forms an address from a rooted register as `getelementptr i8, ptr P, (r - P)` where `P` is the
parameter loaded once in the kernel's entry block and cast to a pointer there; after mem2reg/instcombine `r - P`
folds to the integer offset, an affine function of the thread index in the usual kernel.

Soundness: the address is numerically the same (gep without `inbounds` wraps like integer addition). The root only
tells LLVM which `inttoptr` value an access is based on; all roots are `inttoptr`s of parameter loads, which alias
analysis never treats as distinct identified objects, so a wrong attribution (p + (q - p)) cannot license a bad
transformation. Registers with more than one possible root, or that are sometimes a pointer and sometimes not, get
no root and are lowered as before.

Lattice per register: unseen < INT (an integer, no parameter in it) | ROOT(p, off) < MIXED. A flow-insensitive
fixed point over all definitions (PTX from the predication pass, so every definition is unconditional text).
"""

from __future__ import annotations

from jit.ptx import ast as A

INT = ("int",)
MIXED = ("mixed",)
Root = tuple


def _join(a: Root | None, b: Root | None) -> Root | None:
    if a is None:
        return b
    if b is None or a == b:
        return a
    return MIXED


def _is_64(ins: A.Instr) -> bool:
    return any(m in ("u64", "s64", "b64") for m in ins.mods)


def run(module: A.Module) -> A.Module:
    for fn in module.functions:
        if fn.body is not None and fn.is_entry:
            fn.ptr_roots = roots(fn)
    return module


def roots(fn: A.Function) -> dict[str, tuple[str, int]]:
    params = {p.name for p in fn.params}
    defs = [st for st in fn.body or [] if isinstance(st, A.Instr) and st.operands and isinstance(st.operands[0], A.Reg)]
    state: dict[str, Root] = {}

    def val(o: A.Operand) -> Root | None:
        if isinstance(o, A.Reg):
            return state.get(o.name)
        if isinstance(o, A.Imm):
            return INT
        return MIXED  # symbols, specials as 64-bit values: not tracked

    def transfer(ins: A.Instr) -> Root | None:
        op, ops = ins.opcode, ins.operands
        if not _is_64(ins):
            return INT
        if op in ("ld", "ldu") and ins.has("param") and len(ops) == 2 and isinstance(ops[1], A.Addr):
            base = ops[1].base
            if isinstance(base, A.Sym) and base.name in params:
                return ("param", base.name, ops[1].offset)
            return MIXED
        if op == "mov" and len(ops) == 2 or op == "cvta" and not ins.has("shared", "local", "const", "param"):
            return val(ops[1]) if len(ops) == 2 else MIXED
        if op in ("add", "sub") and len(ops) == 3 and not ins.has("cc"):
            a, b = val(ops[1]), val(ops[2])
            if a is None or b is None:
                return None  # not known yet: optimistic
            if MIXED in (a, b):
                return MIXED
            if b == INT:
                return a
            if op == "add" and a == INT:
                return b
            return INT if op == "sub" else MIXED  # p - q is an integer; p + q is not a pointer into p
        if op == "selp" and len(ops) == 4:
            return _join(val(ops[1]), val(ops[2]))
        return INT

    changed = True
    while changed:
        changed = False
        new: dict[str, Root | None] = {}
        for ins in defs:
            d = ins.operands[0].name  # type: ignore[union-attr]
            new[d] = _join(new.get(d), transfer(ins))
        for d, v in new.items():
            v = _join(state.get(d), v)  # never lower a register's value: the iteration is monotone, so it ends
            if v is not None and state.get(d) != v:
                state[d] = v
                changed = True
    return {r: (v[1], v[2]) for r, v in state.items() if v[0] == "param"}
