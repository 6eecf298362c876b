"""Control flow: branches, calls, returns, exit/trap, and hand-off of sync points to the target runtime."""

from __future__ import annotations

from llvmlite import ir

from jit.errors import CUDA_ERROR_LAUNCH_FAILED, invalid_ptx, not_supported
from jit.lower.core import FuncLowering, op
from jit.lower.types import I8, I32, I64, PTR, compute_type, opaque_alloca
from jit.ptx import ast as A
from jit.ptx.ast import type_bytes


@op("bra")
def bra(fl: FuncLowering, ins: A.Instr) -> None:
    tgt = ins.operands[0]
    if not isinstance(tgt, A.Sym) or tgt.name not in fl.labels:
        raise invalid_ptx(f"branch to unknown label {tgt}", ins.line, ins.col)
    dest = fl.labels[tgt.name]
    b = fl.b
    if fl.cg.bounds_check and hasattr(fl.env, "poll") and fl.branches_back(tgt.name):
        fl.env.poll(fl)  # NOTE [watchdog] (jit/watchdog.py): a loop can be stopped from outside
    if ins.pred:
        p = fl.get(A.Reg(ins.pred), "pred")
        nxt = fl.block("fall")
        if ins.pred_neg:
            b.cbranch(p, nxt, dest)
        else:
            b.cbranch(p, dest, nxt)
        b.position_at_end(nxt)
    else:
        b.branch(dest)


@op("ret")
def ret(fl: FuncLowering, ins: A.Instr) -> None:
    if fl.fn.is_entry:
        fl.env.exit_thread(fl)
    else:
        fl.b.ret_void()


@op("exit")
def exit_(fl: FuncLowering, ins: A.Instr) -> None:
    fl.env.exit_thread(fl)


@op("trap", "brkpt")
def trap(fl: FuncLowering, ins: A.Instr) -> None:
    fl.env.trap(fl, CUDA_ERROR_LAUNCH_FAILED)


@op("bar", "barrier", "shfl", "vote", "match", "redux", "activemask")
def sync(fl: FuncLowering, ins: A.Instr) -> None:
    if ins.opcode in ("bar", "barrier") and ins.has("arrive"):
        return
    fl.env.sync(fl, ins)


@op("wooly_yield")
def yield_point(fl: FuncLowering, ins: A.Instr) -> None:
    """NOTE [interleaved strided loops] (jit/passes/yield_points.py): the CPU scheduler may switch threads here;
    targets whose threads run concurrently ignore it."""
    fl.env.yield_point(fl, ins)


def _param_ptr(fl: FuncLowering, o: A.Operand) -> ir.Value:
    if isinstance(o, A.Sym):
        return fl.resolve_ptr(fl.storage(o.name))
    # register/immediate argument: spill into a temporary 8-byte slot
    tmp = opaque_alloca(fl.ab, ir.ArrayType(I8, 16))
    v = fl.get(o, "b64") if not isinstance(o, A.Reg) else fl.b.load(fl.regs[o.name])
    fl.b.store(v, tmp)
    return tmp


def _elements(o: A.Operand) -> list[A.Operand]:
    return list(o.items) if isinstance(o, A.Vec) else [o]


def _buffer(fl: FuncLowering, o: A.Operand, p: A.Param, value: A.Operand | None) -> ir.Value:
    """The buffer a call passes for formal p: a .param variable as it is, else a temporary holding ``value``'s
    elements as p's type (registers, immediates, vectors: hand-written PTX, jit/passes/reg_params.py)."""
    if isinstance(o, A.Sym):
        return fl.resolve_ptr(fl.storage(o.name))
    size = type_bytes(p.type)
    buf = opaque_alloca(fl.ab, ir.ArrayType(I8, max(16, size * p.vec * max(1, len(_elements(o))))))
    if value is not None:
        for k, e in enumerate(_elements(value)):
            v = fl.get(e, p.type)
            fl.b.store(v, fl.b.gep(buf, [ir.Constant(I64, k * size)], source_etype=I8))
    return buf


def _copy_back(fl: FuncLowering, o: A.Operand, p: A.Param, buf: ir.Value) -> None:
    """A call's register results, read from the buffer the callee wrote (a .pred one travels as 0/1)."""
    size = type_bytes(p.type)
    for k, e in enumerate(_elements(o)):
        v = fl.b.load(fl.b.gep(buf, [ir.Constant(I64, k * size)], source_etype=I8), typ=compute_type(p.type))
        if isinstance(e, A.Reg) and fl.fn.regs.get(e.name) == "pred":
            fl.put(e, fl.b.icmp_unsigned("!=", v, ir.Constant(v.type, 0)), "pred")
        else:
            fl.put(e, v, p.type)


def _load_u64(fl: FuncLowering, o: A.Operand) -> ir.Value:
    return fl.b.load(_param_ptr(fl, o), typ=I64, align=8)


@op("call")
def call(fl: FuncLowering, ins: A.Instr) -> None:
    ops = list(ins.operands)
    k = next((i for i, o in enumerate(ops) if not isinstance(o, A.Group)), None)
    if k is not None and isinstance(ops[k], A.Reg):
        _indirect_call(fl, ins, ops, k)
        return
    k = next((i for i, o in enumerate(ops) if isinstance(o, A.Sym)), None)
    if k is None:
        raise not_supported("indirect call through a register", ins.line)
    name = ops[k].name  # type: ignore[union-attr]
    rets = [x for g in ops[:k] if isinstance(g, A.Group) for x in g.items]
    args = [x for g in ops[k + 1 :] if isinstance(g, A.Group) for x in g.items]
    env = fl.env
    if name == "vprintf":
        r = env.printf(fl, _load_u64(fl, args[0]), _load_u64(fl, args[1]))  # type: ignore[attr-defined]
        if rets:
            fl.b.store(fl.b.trunc(r, ir.IntType(32)), _param_ptr(fl, rets[0]))
        return
    if name == "__assertfail":
        vals = [_load_u64(fl, a) for a in args[:2]]
        env.assert_fail(fl, vals[0], vals[1], fl.b.load(_param_ptr(fl, args[2]), typ=ir.IntType(32)))  # type: ignore[attr-defined]
        return
    served = DEVICE_LAUNCH_CALLS.get(name)
    if served is not None:
        _device_launch_call(fl, name, served, rets, args)
        return
    if name in ("malloc", "free") and getattr(fl.cg, "bounds_check", False):  # NOTE [device heap]
        from jit.emit.bounds import emit_free, emit_malloc

        if name == "malloc":
            fl.b.store(emit_malloc(fl, _load_u64(fl, args[0])), _param_ptr(fl, rets[0]))
        else:
            emit_free(fl, _load_u64(fl, args[0]))
        return
    if name in ("malloc", "free"):
        libc = fl.cg.libc(name)
        if name == "malloc":
            p = fl.b.call(libc, [_load_u64(fl, args[0])])
            fl.b.store(fl.b.ptrtoint(p, I64), _param_ptr(fl, rets[0]))
        else:
            fl.b.call(libc, [fl.b.inttoptr(_load_u64(fl, args[0]), PTR)])
        return
    callee = fl.cg.funcs.get(name)
    if callee is None:
        raise not_supported(f"call to undefined function '{name}'", ins.line)
    fdef = next(f for f in fl.cg.ast.functions if f.name == name and f.body is not None)
    if len(rets) != len(fdef.rets) or len(args) != len(fdef.params):
        raise invalid_ptx(
            f"call to '{name}' with {len(rets)} results and {len(args)} arguments, expected "
            f"{len(fdef.rets)} and {len(fdef.params)}",
            ins.line,
            ins.col,
        )
    bufs = [_buffer(fl, o, p, None) for o, p in zip(rets, fdef.rets, strict=True)]
    bufs += [_buffer(fl, o, p, o) for o, p in zip(args, fdef.params, strict=True)]
    fl.b.call(callee, [env.tctx(fl)] + bufs)
    for o, p, buf in zip(rets, fdef.rets, bufs, strict=False):
        if not isinstance(o, A.Sym):
            _copy_back(fl, o, p, buf)
    env.after_call(fl)


# NOTE [device launches] (jit/devlaunch.py): the device runtime calls a launch is made of, served by the host.
# CUDA 12+ names them __cudaCDP2*, CUDA 11's device runtime without the prefix.
DEVICE_LAUNCH_CALLS = {
    pre + what: host
    for pre in ("__cudaCDP2", "cuda")
    for what, host in (
        ("GetParameterBufferV2", "wooly_rt_cdp_buffer"),
        ("LaunchDeviceV2", "wooly_rt_cdp_launch"),
        ("GetLastError", "wooly_rt_cdp_error"),
        ("PeekAtLastError", "wooly_rt_cdp_error"),
        ("MemcpyAsync", "wooly_rt_cdp_copy"),
        ("MemsetAsync", "wooly_rt_cdp_copy"),
        ("Memcpy2DAsync", "wooly_rt_cdp_copy"),
        ("Memset2DAsync", "wooly_rt_cdp_copy"),
    )
}
# what jit/devrt.py's PTX of the 3D copies and of the queries (attributes, occupancy, limits) calls; the struct
# arguments are read and the results written in PTX, under the kernel's own bounds checks
DEVICE_LAUNCH_CALLS["__wooly_cdp_copy"] = "wooly_rt_cdp_copy"
DEVICE_LAUNCH_CALLS["__wooly_cdp_query"] = "wooly_rt_cdp_query"
# the copy calls' arguments, by name: the positions of (dst, src or byte, width, height, dst pitch, src pitch), a
# memset's byte being 32-bit; __wooly_cdp_copy passes all ten of the host function's arguments
_COPY_ARGS = {
    "MemcpyAsync": (5, (0, 1, 2, None, None, None)),
    "MemsetAsync": (4, (0, 1, 2, None, None, None)),
    "Memcpy2DAsync": (8, (0, 2, 4, 5, 1, 3)),
    "Memset2DAsync": (6, (0, 2, 3, 4, 1, None)),
}


def _device_launch_call(fl: FuncLowering, name: str, host: str, rets: list[A.Operand], args: list[A.Operand]) -> None:
    L = fl.env.launch_ctx(fl)  # raises not_supported on targets without host services
    if host == "wooly_rt_cdp_buffer":  # (kernel, dim3 grid, dim3 block, shared bytes) -> parameter buffer or NULL
        if len(args) != 4:
            raise invalid_ptx(f"a parameter-buffer call with {len(args)} arguments, expected 4")
        dims = []
        for a in args[1:3]:
            p = _param_ptr(fl, a)
            dims += [fl.b.load(fl.b.gep(p, [ir.Constant(I64, 4 * k)], source_etype=I8), typ=I32) for k in range(3)]
        smem = fl.b.load(_param_ptr(fl, args[3]), typ=I32)
        sig, vals = ir.FunctionType(I64, [PTR, I64] + [I32] * 7), [L, _load_u64(fl, args[0]), *dims, smem]
    elif host == "wooly_rt_cdp_launch":  # (parameter buffer, stream) -> cudaError_t
        if len(args) != 2:
            raise invalid_ptx(f"a device launch call with {len(args)} arguments, expected 2")
        sig, vals = ir.FunctionType(I32, [PTR, I64, I64]), [L, _load_u64(fl, args[0]), _load_u64(fl, args[1])]
    elif host == "wooly_rt_cdp_copy":  # queued in stream order (jit.devlaunch.Copy)
        sig = ir.FunctionType(I32, [PTR] + [I64] * 9 + [I32])
        vals = [L, *_copy_args(fl, name, args)]
    elif host == "wooly_rt_cdp_query":  # (what, a, b, c) -> the value, or 1 << 32 | cudaError_t (jit.devlaunch)
        if len(args) != 4:
            raise invalid_ptx(f"a call to {name} with {len(args)} arguments, expected 4")
        sig = ir.FunctionType(I64, [PTR, I32, I64, I64, I64])
        vals = [L, fl.b.load(_param_ptr(fl, args[0]), typ=I32), *(_load_u64(fl, a) for a in args[1:])]
    else:  # cudaGetLastError (clears) / cudaPeekAtLastError
        clear = 0 if name.endswith("PeekAtLastError") else 1
        sig, vals = ir.FunctionType(I32, [PTR, I32]), [L, ir.Constant(I32, clear)]
    fn = fl.cg.module.globals.get(host) or ir.Function(fl.cg.module, sig, host)
    r = fl.b.call(fn, vals)
    if rets:
        fl.b.store(r, _param_ptr(fl, rets[0]))


def _copy_args(fl: FuncLowering, name: str, args: list[A.Operand]) -> list[ir.Value]:
    """The host copy's ten arguments (dst, src, width, height, depth, dst/src pitch, dst/src slice, is a memset)
    from a device-side cudaMemcpy/Memset[2D]Async call's, or from __wooly_cdp_copy's (jit/devrt.py)."""
    if name == "__wooly_cdp_copy":
        if len(args) != 10:
            raise invalid_ptx(f"a call to {name} with {len(args)} arguments, expected 10")
        return [_load_u64(fl, a) for a in args[:9]] + [fl.b.load(_param_ptr(fl, args[9]), typ=I32)]
    what = name.removeprefix("__cudaCDP2").removeprefix("cuda")
    count, (dst, src, width, height, dpitch, spitch) = _COPY_ARGS[what]
    if len(args) != count:
        raise invalid_ptx(f"a call to {name} with {len(args)} arguments, expected {count}")
    is_set = what.startswith("Memset")
    one = ir.Constant(I64, 1)
    w = _load_u64(fl, args[width])
    h = _load_u64(fl, args[height]) if height is not None else one
    dp = _load_u64(fl, args[dpitch]) if dpitch is not None else w
    sp = _load_u64(fl, args[spitch]) if spitch is not None else (dp if is_set else w)
    byte = fl.b.zext(fl.b.load(_param_ptr(fl, args[src]), typ=I32), I64) if is_set else _load_u64(fl, args[src])
    # one slice: its size is its rows'
    return [_load_u64(fl, args[dst]), byte, w, h, one, dp, sp, fl.b.mul(dp, h), fl.b.mul(sp, h)] + [
        ir.Constant(I32, int(is_set))
    ]


def _indirect_call(fl: FuncLowering, ins: A.Instr, ops: list[A.Operand], k: int) -> None:
    """call (rets), %rd, (args), proto; -- %rd holds a .func address taken with mov (see FuncLowering.sym_value).
    Every lowered .func has the same shape (thread context, then one pointer per return/argument), so the call
    goes through a pointer of that type; the prototype's own parameter list only fixes the count."""
    rets = [x for g in ops[:k] if isinstance(g, A.Group) for x in g.items]
    args = [x for g in ops[k + 1 :] if isinstance(g, A.Group) for x in g.items]
    env = fl.env
    ret_bufs = [_param_ptr(fl, r) for r in rets]
    actual = [env.tctx(fl)] + ret_bufs + [_param_ptr(fl, a) for a in args]
    # a pointer typed with the function type: llvmlite's call() reads it (the IR text says plain 'ptr')
    fty = ir.FunctionType(ir.VoidType(), [PTR] * len(actual))
    fl.b.call(fl.b.inttoptr(fl.get(ops[k], "b64"), fty.as_pointer()), actual)
    for o, buf in zip(rets, ret_bufs, strict=True):
        if isinstance(o, A.Reg):  # a register result, of the register's own type (a .pred one travels as 0/1)
            t = fl.fn.regs.get(o.name, "b64")
            _copy_back(fl, o, A.Param("", "u32" if t == "pred" else t), buf)
    env.after_call(fl)
