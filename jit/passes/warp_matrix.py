"""Warp matrix instructions -> plain PTX: mma.sync, wmma.load/store/mma, ldmatrix, stmatrix, movmatrix.

NOTE [warp matrix ops]: these instructions exchange data between the 32 lanes of a warp. We rewrite each one into
ordinary PTX that every target already runs: each lane stores the fragment elements it holds into a per-warp area
of a hidden shared array, `bar.warp.sync -1`, reads what its own results need, `bar.warp.sync -1` again (so the area
can be reused by the next instruction). Fragments are stored in logical (row, col) order (layouts:
jit/passes/warp_matrix_layouts.py), converted to the compute type: f32 for f16/bf16/tf32 inputs (products of those
are exact in f32; we accumulate with fma in f32, so results can differ from the hardware's in the last bits of the
sum, as they do between GPU generations), f64 for f64, s32 for s8/u8 (accumulated in s64, then wrapped to 32 bits or
clamped with .satfinite). The rewrite is one `{ }` scope per instruction, so flatten_scopes gives its temporaries
unique names; it runs first in the pipeline, before .funcs with warp collectives are inlined.

The hidden array (`__wooly_warp_scratch`) holds one area per warp of the largest block the kernel allows (32 warps,
fewer under .maxntid/.reqntid). It is not counted in the kernel's reported static shared size
(jit/lower/module.py), so it does not reduce the dynamic shared memory a launch may ask for.
"""

from __future__ import annotations

from jit.errors import invalid_ptx, not_supported
from jit.passes.warp_matrix_layouts import Layout, mma_layouts, wmma_dims, wmma_layout
from jit.passes.warp_matrix_ptx import BITS, Fragment, Snippet, address, ctype, regs, space, txt, warp_area
from jit.ptx import ast as A

SCRATCH = "__wooly_warp_scratch"
_OPS = ("mma", "wmma", "ldmatrix", "stmatrix", "movmatrix")
_TYPES = ("f16", "bf16", "tf32", "f32", "f64", "s8", "u8", "s32", "b16", "e4m3", "e5m2", "s4", "u4", "b1")


def _store_fragment(g: Snippet, lane: str, base: str, at: int, lay: Layout, frag: Fragment, ct: str) -> None:
    """Each element of ``frag`` to base + at + (row * cols_n + col) * size, as the compute type."""
    cs = 8 if ct == "f64" else 4
    hi, lo = g.lane_terms(lay, lane)
    p = g.reg("b64")
    g(
        f"add.u64 {p}, {base}, {g.linear(hi, lo, (lay.rh * lay.cols_n + lay.ch) * cs, (lay.rl * lay.cols_n + lay.cl) * cs)};"
    )
    for i, (r, c) in enumerate(lay.at):
        g(f"st.shared.{'f64' if ct == 'f64' else 'b32'} [{p}+{at + (r * lay.cols_n + c) * cs}], {frag.get(i)};")


def _matmul(
    g: Snippet, ins: A.Instr, lays: tuple[Layout, Layout, Layout], types: tuple[str, str, str, str], area: int
) -> None:
    """D = A * B + C with fragments in the given layouts; types = (d, a, b, c)."""
    la, lb, lc = lays
    dt, at, bt, ctp = types
    ct = ctype(at)
    cs = 8 if ct == "f64" else 4
    m, k, n = la.rows_n, la.cols_n, lb.cols_n
    ops = ins.operands
    fa, fb = Fragment(g, regs(ops[1]), at), Fragment(g, regs(ops[2]), bt)
    fc, fd = Fragment(g, regs(ops[3]), ctp), Fragment(g, regs(ops[0]), dt)
    for f, lay, what in ((fa, la, "A"), (fb, lb, "B"), (fc, lc, "C"), (fd, lc, "D")):
        f.need(len(lay), f"{ins.opcode} {what} fragment")
    lane, base = warp_area(g, area)
    _store_fragment(g, lane, base, 0, la, fa, ct)
    _store_fragment(g, lane, base, m * k * cs, lb, fb, ct)
    g("bar.warp.sync -1;")
    acc_t = "f64" if ct == "f64" else "b64" if ct == "s32" else "f32"
    accs = []
    for i in range(len(lc)):
        acc, v = g.reg(acc_t), fc.get(i)
        g(f"cvt.s64.s32 {acc}, {v};" if ct == "s32" else f"mov.{acc_t} {acc}, {v};")
        accs.append(acc)
    hi, lo = g.lane_terms(lc, lane)
    pa, pb, kk, p = g.reg("b64"), g.reg("b64"), g.reg("b32"), g.reg("pred")
    g(f"add.u64 {pa}, {base}, {g.linear(hi, lo, lc.rh * k * cs, lc.rl * k * cs)};")
    g(f"add.u64 {pb}, {base}, {g.linear(hi, lo, lc.ch * cs, lc.cl * cs)};")
    g(f"mov.u32 {kk}, 0;")
    loop = f"$wooly_wm{g.n}_k"
    g(f"{loop}:")
    xs: dict[int, str] = {}
    ys: dict[int, str] = {}
    ld = "f64" if ct == "f64" else "s32" if ct == "s32" else "f32"
    lt = "f64" if ct == "f64" else "b32" if ct == "s32" else "f32"
    for i, (r, c) in enumerate(lc.at):
        if r not in xs:
            xs[r] = g.reg(lt)
            g(f"ld.shared.{ld} {xs[r]}, [{pa}+{r * k * cs}];")
        if c not in ys:
            ys[c] = g.reg(lt)
            g(f"ld.shared.{ld} {ys[c]}, [{pb}+{m * k * cs + c * cs}];")
        if ct == "s32":
            w = g.reg("b64")
            g(f"mul.wide.s32 {w}, {xs[r]}, {ys[c]};")
            g(f"add.s64 {accs[i]}, {accs[i]}, {w};")
        else:
            g(f"fma.rn.{ct} {accs[i]}, {xs[r]}, {ys[c]}, {accs[i]};")
    g(f"add.u64 {pa}, {pa}, {cs};")
    g(f"add.u64 {pb}, {pb}, {n * cs};")
    g(f"add.u32 {kk}, {kk}, 1;")
    g(f"setp.lt.u32 {p}, {kk}, {k};")
    g(f"@{p} bra {loop};")
    g("bar.warp.sync -1;")
    outs = []
    for acc in accs:
        if dt == "f16":
            h = g.reg("b16")
            g(f"cvt.rn.f16.f32 {h}, {acc};")
            outs.append(h)
        elif dt == "s32":
            if ins.has("satfinite"):
                g(f"max.s64 {acc}, {acc}, -2147483648;")
                g(f"min.s64 {acc}, {acc}, 2147483647;")
            w = g.reg("b32")
            g(f"cvt.u32.u64 {w}, {acc};")
            outs.append(w)
        else:
            outs.append(acc)
    fd.put(outs)


def _shape(ins: A.Instr) -> str:
    s = next((m for m in ins.mods if m.startswith("m") and "n" in m and "k" in m), None)
    if s is None:
        raise not_supported(f"{ins.opcode} without a shape")
    return s


def _types(ins: A.Instr) -> list[str]:
    return [m for m in ins.mods if m in _TYPES]


def _mma(g: Snippet, ins: A.Instr) -> int:
    if not ins.has("sync") or not (ins.has("row") and ins.has("col")) or ins.has("sp", "kind::f8f6f4"):
        raise not_supported(f"mma form .{'.'.join(ins.mods)}")
    ts = _types(ins)
    if len(ts) != 4:
        raise not_supported(f"mma types .{'.'.join(ts)}")
    d, a, b, c = ts
    lays = mma_layouts(_shape(ins), a)
    area = (lays[0].rows_n * lays[0].cols_n + lays[1].rows_n * lays[1].cols_n) * (8 if a == "f64" else 4)
    _matmul(g, ins, lays, (d, a, b, c), area)
    return area


def _wmma_mem(g: Snippet, ins: A.Instr, regtypes: dict[str, str]) -> None:
    """wmma.load.{a,b,c} / wmma.store.d: element by element in our layout, no data exchange."""
    load = ins.has("load")
    role = next((m for m in ("a", "b", "c", "d") if m in ins.mods), None)
    if role is None or (role in ("a", "b", "c")) != load:
        raise not_supported(f"wmma.{'.'.join(ins.mods)}")
    ts = _types(ins)
    if len(ts) != 1:
        raise not_supported(f"wmma.{'.'.join(ins.mods)}")
    t = ts[0]
    mm, nn, kk = wmma_dims(_shape(ins), t if role in ("a", "b") else None)
    rows, cols = {"a": (mm, kk), "b": (kk, nn)}.get(role, (mm, nn))
    lay = wmma_layout(rows, cols)
    ops = ins.operands
    frag_op, addr_op = (ops[0], ops[1]) if load else (ops[1], ops[0])
    frag = Fragment(g, regs(frag_op), t)
    frag.need(len(lay), f"wmma.{'load' if load else 'store'}.{role}")
    col_major = ins.has("col")
    es = BITS[t] // 8 if t != "tf32" else 4
    lane = g.reg("b32")
    g(f"mov.u32 {lane}, %laneid;")
    hi, lo = g.lane_terms(lay, lane)
    stride = g.reg("b32")
    g(f"mov.u32 {stride}, {txt(ops[2]) if len(ops) > 2 else (rows if col_major else cols)};")
    p = address(g, addr_op, regtypes)
    t32, t64, step = g.reg("b32"), g.reg("b64"), g.reg("b64")
    per = 32 // cols  # rows advanced per fragment element
    if col_major:  # element (r, c) at (c * stride + r)
        g(f"mad.lo.u32 {t32}, {lo}, {stride}, {hi};")
        g(f"mov.u64 {step}, {per * es};")
    else:
        g(f"mad.lo.u32 {t32}, {hi}, {stride}, {lo};")
        g(f"mul.wide.u32 {step}, {stride}, {per * es};")
    g(f"mul.wide.u32 {t64}, {t32}, {es};")
    g(f"add.u64 {p}, {p}, {t64};")
    sfx = {8: "u8", 16: "b16", 32: "b32", 64: "b64"}[BITS[t]]
    kind = {8: "b32", 16: "b16", 32: "b32", 64: "b64"}[BITS[t]]
    if load:
        vals = []
        for j in range(len(lay)):
            if j:
                g(f"add.u64 {p}, {p}, {step};")
            v = g.reg(kind)
            g(f"ld{space(ins)}.{sfx} {v}, [{p}];")
            vals.append(v)
        frag.put(vals)
        return
    for j in range(len(lay)):
        if j:
            g(f"add.u64 {p}, {p}, {step};")
        g(f"st{space(ins)}.{sfx} [{p}], {frag.half(j) if t == 'f16' else frag.get(j)};")


def _wmma_mma(g: Snippet, ins: A.Instr) -> int:
    ts = _types(ins)
    if len(ts) == 2:  # .dtype.ctype with f16 inputs
        ts = [ts[0], "f16", "f16", ts[1]]
    if len(ts) != 4:
        raise not_supported(f"wmma.mma types .{'.'.join(ts)}")
    d, a, b, c = ts
    mm, nn, kk = wmma_dims(_shape(ins), a)
    lays = (wmma_layout(mm, kk), wmma_layout(kk, nn), wmma_layout(mm, nn))
    area = (mm * kk + kk * nn) * (8 if a == "f64" else 4)
    _matmul(g, ins, lays, (d, a, b, c), area)
    return area


def _publish(g: Snippet, lane: str, base: str, bits: int, value: str) -> tuple[str, str]:
    """Each lane stores ``value`` at slot ``lane`` of the warp's area, then the warp synchronises. Returns
    (groupID, threadID_in_group) = (lane >> 2, lane & 3) as registers."""
    w = g.reg("b64")
    g(f"mul.wide.u32 {w}, {lane}, {bits // 8};")
    g(f"add.u64 {w}, {w}, {base};")
    g(f"st.shared.b{bits} [{w}], {value};")
    g("bar.warp.sync -1;")
    q, r4 = g.reg("b32"), g.reg("b32")
    g(f"shr.u32 {q}, {lane}, 2;")
    g(f"and.b32 {r4}, {lane}, 3;")
    return q, r4


def _element(g: Snippet, base: str, row: str, row_bytes: int, at: int, col: str, col_bytes: int) -> str:
    """base[row * row_bytes + at] (a row address a lane stored in the warp's area) + col * col_bytes."""
    ra, w = g.reg("b64"), g.reg("b64")
    g(f"mul.wide.u32 {w}, {row}, {row_bytes};")
    g(f"add.u64 {w}, {w}, {base};")
    g(f"ld.shared.b64 {ra}, [{w}+{at}];")
    g(f"mul.wide.u32 {w}, {col}, {col_bytes};")
    g(f"add.u64 {ra}, {ra}, {w};")
    return ra


def _ldst_matrix(g: Snippet, ins: A.Instr, regtypes: dict[str, str]) -> int:
    """ldmatrix / stmatrix .m8n8.x{1,2,4}{.trans}.b16: lanes 8i..8i+7 give the row addresses of matrix i."""
    if not ins.has("m8n8") or not ins.has("b16"):
        raise not_supported(f"{ins.opcode}.{'.'.join(ins.mods)}")
    num = next((int(m[1:]) for m in ins.mods if m in ("x1", "x2", "x4")), 1)
    load = ins.opcode == "ldmatrix"
    frag_op, addr_op = (ins.operands[0], ins.operands[1]) if load else (ins.operands[1], ins.operands[0])
    rs = regs(frag_op)
    if len(rs) != num:
        raise not_supported(f"{ins.opcode} .x{num} with {len(rs)} registers")
    lane, base = warp_area(g, 256)
    addr = address(g, addr_op, regtypes)
    q, r4 = _publish(g, lane, base, 64, addr)
    sp = space(ins)
    trans = ins.has("trans")
    outs = []
    for i, reg in enumerate(rs):
        # plain: word l % 4 of row l / 4; .trans: halves at (row 2 * (l % 4) + h, column l / 4), h = 0, 1
        parts = [(r4, 16, 64 * i + 8 * h, q, 2) for h in range(2)] if trans else [(q, 8, 64 * i, r4, 4)]
        width = 16 if trans else 32
        vals: list[str] = []
        if not load:
            vals = [txt(reg)]
            if trans:
                vals = [g.reg("b16"), g.reg("b16")]
                g(f"mov.b32 {{{vals[0]}, {vals[1]}}}, {txt(reg)};")
        got = []
        for k, (row, row_bytes, at, col, col_bytes) in enumerate(parts):
            ra = _element(g, base, row, row_bytes, at, col, col_bytes)
            if load:
                got.append(g.reg(f"b{width}"))
                g(f"ld{sp}.b{width} {got[-1]}, [{ra}];")
            else:
                g(f"st{sp}.b{width} [{ra}], {vals[k]};")
        if load and trans:
            v = g.reg("b32")
            g(f"mov.b32 {v}, {{{got[0]}, {got[1]}}};")
            got = [v]
        outs += got
    g("bar.warp.sync -1;")
    for reg, v in zip(rs, outs, strict=False):
        g(f"mov.b32 {txt(reg)}, {v};")
    return 256


def _movmatrix(g: Snippet, ins: A.Instr) -> int:
    """movmatrix.sync.aligned.m8n8.trans.b16 d, a: transpose an 8x8 b16 matrix held one word per lane."""
    if not (ins.has("m8n8") and ins.has("trans") and ins.has("b16")):
        raise not_supported(f"movmatrix.{'.'.join(ins.mods)}")
    lane, base = warp_area(g, 128)
    q, r4 = _publish(g, lane, base, 32, txt(ins.operands[1]))
    got = []
    for h in range(2):  # element (row 2 * (l % 4) + h, col l / 4) of the source
        t = g.reg("b32")
        g(f"shl.b32 {t}, {r4}, 1;")
        g(f"add.u32 {t}, {t}, {h};")
        g(f"shl.b32 {t}, {t}, 3;")
        g(f"add.u32 {t}, {t}, {q};")
        p = g.reg("b64")
        g(f"mul.wide.u32 {p}, {t}, 2;")
        g(f"add.u64 {p}, {p}, {base};")
        v = g.reg("b16")
        g(f"ld.shared.b16 {v}, [{p}];")
        got.append(v)
    g("bar.warp.sync -1;")
    g(f"mov.b32 {txt(ins.operands[0])}, {{{got[0]}, {got[1]}}};")
    return 128


def _rewrite(ins: A.Instr, n: int, regtypes: dict[str, str], scratch: str) -> tuple[list[A.Stmt], int]:
    from jit.ptx.parser import parse

    # d, a, b, c for the multiplies; fragment and address (+ stride for wmma) for the moves
    lo, hi = (4, 4) if ins.opcode == "mma" or ins.has("mma") else (2, 3) if ins.opcode == "wmma" else (2, 2)
    if not lo <= len(ins.operands) <= hi:
        raise invalid_ptx(
            f"{ins.opcode} takes {lo if lo == hi else f'{lo} or {hi}'} operands, not {len(ins.operands)}", ins.line
        )
    g = Snippet(n, scratch)
    area = 0
    if ins.opcode == "mma":
        area = _mma(g, ins)
    elif ins.opcode == "wmma" and ins.has("mma"):
        area = _wmma_mma(g, ins)
    elif ins.opcode == "wmma" and ins.has("load", "store"):
        _wmma_mem(g, ins, regtypes)
    elif ins.opcode in ("ldmatrix", "stmatrix"):
        area = _ldst_matrix(g, ins, regtypes)
    elif ins.opcode == "movmatrix":
        area = _movmatrix(g, ins)
    else:
        raise not_supported(f"{ins.opcode}.{'.'.join(ins.mods)}")
    src = ".version 8.0\n.target sm_80\n.address_size 64\n.func w()\n{\n" + g.text() + "\n}\n"
    body = parse(src).functions[0].body or []
    for st in body:
        for s in st.body if isinstance(st, A.Scope) else [st]:
            if isinstance(s, A.Instr | A.Label):
                s.line = ins.line
    out: list[A.Stmt] = list(body)
    if ins.pred:  # @p mma ...: skip the whole sequence
        skip = f"$wooly_wm{n}_skip"
        out = [
            A.Instr("bra", [], [A.Sym(skip)], ins.pred, not ins.pred_neg, ins.line, ins.col),
            *out,
            A.Label(skip, ins.line),
        ]
    return out, area


def _warps(fn: A.Function) -> int:
    return max(1, (A.max_threads(fn) + 31) // 32)


def _walk(
    body: list[A.Stmt], regtypes: dict[str, str], counter: list[int], areas: list[int], scratch: str
) -> list[A.Stmt]:
    regtypes = dict(regtypes)
    out: list[A.Stmt] = []
    for st in body:
        if isinstance(st, A.RegDecl):
            for nm in st.names:
                regtypes[nm] = st.type
        if isinstance(st, A.Scope):
            out.append(A.Scope(_walk(st.body, regtypes, counter, areas, scratch)))
        elif isinstance(st, A.Instr) and st.opcode in _OPS:
            counter[0] += 1
            stmts, area = _rewrite(st, counter[0], regtypes, scratch)
            areas.append(area)
            out += stmts
        else:
            out.append(st)
    return out


def run(module: A.Module) -> A.Module:
    counter = [0]
    # a .func's area serves every kernel of the module that may call it (warp collectives get inlined)
    func_warps = max([_warps(f) for f in module.functions if f.is_entry and f.body is not None], default=32)
    for k, fn in enumerate(module.functions):
        if fn.body is None or not _uses(fn.body):
            continue
        areas: list[int] = []
        scratch = f"{SCRATCH}{k}"  # one per function: .func areas are module-level shared variables
        fn.body = _walk(fn.body, {p.name: p.type for p in fn.params if p.space == "reg"}, counter, areas, scratch)
        if max(areas, default=0):
            size = max(areas) * (_warps(fn) if fn.is_entry else func_warps)
            fn.body.insert(0, A.VarDecl("shared", "b8", scratch, 16, [size], line=fn.line))
    return module


def _uses(body: list[A.Stmt]) -> bool:
    for st in body:
        if isinstance(st, A.Scope) and _uses(st.body):
            return True
        if isinstance(st, A.Instr) and st.opcode in _OPS:
            return True
    return False
