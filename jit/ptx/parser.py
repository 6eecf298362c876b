"""Recursive-descent PTX parser producing jit.ptx.ast nodes. Errors carry line:column."""

from __future__ import annotations

from jit.errors import invalid_ptx
from jit.ptx import ast as A
from jit.ptx.lexer import Tok, tokenize
from jit.ptx.operands import OperandParser, _int

_SPACES = {"global", "const", "shared", "local", "param", "tex", "surf", "sampler"}
_FUNC_ATTRS = {
    "maxntid",
    "reqntid",
    "minnctapersm",
    "maxnctapersm",
    "maxnreg",
    "maxclusterrank",
    "reqnctapercluster",
    "explicitcluster",
    "blocksareclusters",
    "noreturn",
    "pragma",
}


# NOTE [declaration limits]
# A declaration costs the translator and the runtime in proportion to what it declares (the parser names every
# register of `%r<N>`, the lowering makes a slot for each, the runtime allocates a variable's bytes per module,
# block or thread), so absurd ones are refused up front as CUDA_ERROR_INVALID_PTX naming line and column, before
# they cost anything: `.reg .b64 %r<4294967295>` grew the compile worker to 4 GB, `.shared .b8 x[2^64 - 1]` never
# came back. The bounds are far above what any compiler emits and at or above every GPU's own limits (ptxas refuses
# more than 48 KiB of static shared memory, 64 KiB of constants, 512 KiB of local memory per thread).
MAX_REGISTERS = 1 << 20  # registers one declaration may name
MAX_MODULE_REGISTERS = 4 << 20  # and all the declarations of a module
MAX_VAR_BYTES = {"shared": 227 << 10, "local": 512 << 10, "const": 64 << 10, "param": 32 << 10, "global": 256 << 20}
MAX_ALIGN = 1 << 16


class Parser(OperandParser):
    def __init__(self, text: str) -> None:
        self.toks = tokenize(text)
        self.i = 0
        self.nregs = 0  # registers declared so far (NOTE [declaration limits])

    # -- token helpers -------------------------------------------------------------------------
    def peek(self, k: int = 0) -> Tok:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def next(self) -> Tok:
        t = self.toks[self.i]
        if t.kind != "eof":
            self.i += 1
        return t

    def error(self, msg: str, tok: Tok | None = None) -> Exception:
        tok = tok or self.peek()
        return invalid_ptx(f"{msg} (at {tok.text!r})" if tok.text else msg, tok.line, tok.col)

    def accept(self, text: str) -> bool:
        if self.peek().text == text and self.peek().kind in ("punct", "dir", "word"):
            self.i += 1
            return True
        return False

    def expect(self, text: str) -> Tok:
        t = self.peek()
        if t.text != text:
            raise self.error(f"expected {text!r}")
        return self.next()

    def ident(self) -> str:
        t = self.next()
        if t.kind != "word":
            raise self.error("expected identifier", t)
        return t.text

    def integer(self) -> int:
        neg = self.accept("-")
        t = self.next()
        if t.kind != "num":
            raise self.error("expected integer", t)
        v = _int(t.text)
        if v is None:
            raise self.error("expected integer", t)
        return -v if neg else v

    # -- module level --------------------------------------------------------------------------
    def parse_module(self) -> A.Module:
        mod = A.Module()
        while self.peek().kind != "eof":
            t = self.peek()
            if t.text == ".version":
                self.next()
                mod.version = self.next().text
            elif t.text == ".target":
                self.next()
                mod.target.append(self.ident())
                while self.accept(","):
                    mod.target.append(self.ident())
            elif t.text == ".address_size":
                self.next()
                mod.address_size = self.integer()
            elif t.text in (".file", ".loc", ".pragma"):
                self.skip_statement()
            elif t.text == ".section":
                self.next()
                self.next()
                self.skip_braces()
            elif t.kind == "dir" or t.text == ";":
                self.parse_toplevel_decl(mod)
            else:
                raise self.error("unexpected token at module scope")
        return mod

    def skip_statement(self) -> None:
        line = self.peek().line
        self.next()
        while self.peek().kind != "eof" and self.peek().text != ";" and self.peek().line == line:
            self.next()
        self.accept(";")

    def skip_braces(self) -> None:
        self.expect("{")
        depth = 1
        while depth:
            t = self.next()
            if t.kind == "eof":
                raise self.error("unterminated block", t)
            depth += {"{": 1, "}": -1}.get(t.text, 0) if t.kind == "punct" else 0

    def parse_toplevel_decl(self, mod: A.Module) -> None:
        if self.accept(";"):
            return
        flags: set[str] = set()
        start = self.peek()
        while self.peek().text in (".visible", ".extern", ".weak", ".common"):
            flags.add(self.next().text[1:])
        t = self.peek()
        if t.text in (".entry", ".func"):
            self.next()
            fn = self.parse_function(t.text == ".entry", flags, start)
            fn.weak = "weak" in flags
            old = next((f for f in mod.functions if f.name == fn.name and f.body is not None), None)
            if fn.body is None or old is None:
                mod.functions.append(fn)
            elif not self._keep_first(old, fn, start):
                mod.functions[mod.functions.index(old)] = fn
            return
        if t.kind == "dir" and t.text[1:] in _SPACES:
            for v in self.parse_var_decl(flags):
                old_v = next((g for g in mod.globals if g.name == v.name and not g.extern), None)
                if v.extern or old_v is None:
                    mod.globals.append(v)
                elif not self._keep_first(old_v, v, start):
                    mod.globals[mod.globals.index(old_v)] = v
            self.expect(";")
            return
        raise self.error("unknown directive", t)

    def _keep_first(self, old: A.Function | A.VarDecl, new: A.Function | A.VarDecl, at: Tok) -> bool:
        """Two definitions of one name, as modules linked into one PTX text have (numba's debug=True kernels
        define a shared device function in each module, `.weak`): a strong definition wins over weak ones, the
        first of several weak ones is kept (`.common` variables count as weak); two strong ones are an error, as for
        a linker."""

        def weak(d: A.Function | A.VarDecl) -> bool:
            return d.weak or isinstance(d, A.VarDecl) and d.common

        if weak(old):
            return weak(new)
        if weak(new):
            return True
        raise self.error(f"{new.name} is defined twice", at)

    # -- variables -----------------------------------------------------------------------------
    def parse_var_decl(self, flags: set[str], multi: bool = True) -> list[A.VarDecl]:
        tok = self.next()
        space = tok.text[1:]
        align, vec, typ, ptr_attrs = 0, 1, "", []
        while self.peek().kind == "dir":
            d = self.next().text[1:]
            if d == "align":
                at = self.peek()
                align = self.integer()
                if align <= 0 or align & (align - 1) or align > MAX_ALIGN:
                    raise self.error(f".align {align}: expected a power of two up to {MAX_ALIGN}", at)
            elif d in ("v2", "v4", "v8"):
                vec = int(d[1:])
            elif d == "ptr":
                ptr_attrs.append("ptr")
            elif d in ("extern", "visible", "weak", "common"):
                flags.add(d)
            elif d in ("global", "shared", "const", "local") and space == "param":
                ptr_attrs.append(d)
            elif d == "attribute":
                self.expect("(")
                while not self.accept(")"):
                    self.next()
            else:
                typ = d
        if not typ:
            raise self.error("missing type in declaration", tok)
        out = []
        while True:
            name_tok = self.next()
            if name_tok.kind != "word":
                raise self.error("expected variable name", name_tok)
            v = A.VarDecl(
                space,
                typ,
                name_tok.text,
                align,
                [],
                None,
                vec,
                "extern" in flags,
                "visible" in flags,
                "weak" in flags,
                "common" in flags,
                ptr_attrs,
                tok.line,
            )
            if self.accept("<"):  # %r<10> register-like range for .local/.param is not PTX; reject
                raise self.error("range not allowed here")
            while self.accept("["):
                at = self.peek()
                v.dims.append(0 if at.text == "]" else self.integer())
                if v.dims[-1] < 0:
                    raise self.error(f"negative array size in the declaration of {v.name}", at)
                self.expect("]")
            self._check_size(v, name_tok)
            if self.accept("="):
                v.init = self.parse_initializer()
            out.append(v)
            if not multi or not self.accept(","):
                return out

    def _check_size(self, v: A.VarDecl, at: Tok) -> None:
        """NOTE [declaration limits]: a variable's bytes against its space's bound."""
        limit = MAX_VAR_BYTES.get(v.space)
        if limit is None:
            return
        if A.var_size(v) > limit:
            raise self.error(
                f".{v.space} variable {v.name} declares more than {limit} bytes (the most this state space can hold)",
                at,
            )

    def parse_initializer(self) -> list:
        vals: list = []
        if self.accept("{"):
            while not self.accept("}"):
                if self.peek().text == "{":
                    vals.extend(self.parse_initializer())
                else:
                    vals.append(self.init_value())
                self.accept(",")
            return vals
        return [self.init_value()]

    def init_value(self) -> A.Operand:
        if self.peek().text == "generic" and self.peek(1).text == "(":  # generic(var): its address (the same here)
            self.next()
            self.expect("(")
            name = self.ident()
            self.expect(")")
            if self.accept("+"):
                off = self.next()
                if off.kind != "num":
                    raise self.error("expected an offset after 'generic(...) +'", off)
                return A.SymOff(name, int(off.text.rstrip("uU"), 0))
            return A.Sym(name)
        op = self.operand()
        if isinstance(op, A.Reg):  # bare identifiers in initializers are symbols (addresses)
            return A.Sym(op.name)
        return op

    # -- functions -----------------------------------------------------------------------------
    def parse_function(self, is_entry: bool, flags: set[str], start: Tok) -> A.Function:
        rets: list[A.Param] = []
        if not is_entry and self.peek().text == "(":
            rets = self.param_list()
        name = self.ident()
        params = self.param_list() if self.peek().text == "(" else []
        fn = A.Function(name, is_entry, params, rets, None, {}, "visible" in flags, "extern" in flags, start.line)
        while self.peek().kind == "dir":
            d = self.next().text[1:]
            if d not in _FUNC_ATTRS:
                raise self.error(f"unknown function directive .{d}")
            vals: list[int] = []
            if d == "pragma":
                self.next()
                self.accept(";")
                continue
            if self.peek().kind == "num":
                vals.append(self.integer())
                while self.accept(","):
                    vals.append(self.integer())
            fn.attrs[d] = vals
        if self.accept(";"):
            return fn
        self.tables: dict[str, list[str]] = {}
        fn.body = self.block()
        fn.branch_tables = self.tables
        return fn

    def param_list(self) -> list[A.Param]:
        self.expect("(")
        out: list[A.Param] = []
        while not self.accept(")"):
            sp = self.next()
            if sp.text not in (".param", ".reg"):
                raise self.error("expected .param", sp)
            for v in self.parse_var_decl_from(sp.text[1:]):
                out.append(A.Param(v.name, v.type, v.align, v.dims, v.ptr_attrs, sp.text[1:], v.vec))
            if not self.accept(","):
                self.expect(")")
                break
        return out

    def parse_var_decl_from(self, space: str) -> list[A.VarDecl]:
        self.i -= 1  # re-read the space directive
        return self.parse_var_decl(set(), multi=False)

    def block(self) -> list[A.Stmt]:
        self.expect("{")
        body: list[A.Stmt] = []
        while not self.accept("}"):
            t = self.peek()
            if t.kind == "eof":
                raise self.error("unterminated function body", t)
            if t.text == "{":
                body.append(A.Scope(self.block()))
            elif t.text == ";":
                self.next()
            elif t.text == ".reg":
                body.append(self.reg_decl())
            elif t.text in (".loc", ".pragma", ".file"):
                self.skip_statement()
            elif t.kind == "dir" and t.text[1:] in _SPACES | {"extern", "align"}:
                flags: set[str] = set()
                if self.accept(".extern"):
                    flags.add("extern")
                body.extend(self.parse_var_decl(flags))
                self.expect(";")
            elif t.kind == "word" and self.peek(1).text == ":":
                self.next()
                self.next()
                if self.accept(".branchtargets"):  # ts: .branchtargets L0, L1, ...; (for brx.idx)
                    labels = [self.ident()]
                    while self.accept(","):
                        labels.append(self.ident())
                    self.expect(";")
                    self.tables[t.text] = labels
                    continue
                if self.accept(".callprototype"):  # proto: .callprototype (.param ...) _ (.param ...); for call via %r
                    while self.peek().kind != "eof" and self.peek().text != ";":
                        self.next()
                    self.expect(";")
                    continue
                body.append(A.Label(t.text, t.line))
            elif t.kind == "dir":
                raise self.error("unknown directive in function body", t)
            else:
                body.append(self.instruction())
        return body

    def reg_decl(self) -> A.RegDecl:
        self.next()
        vec, typ = 1, ""
        while self.peek().kind == "dir":
            d = self.next().text[1:]
            if d in ("v2", "v4"):
                vec = int(d[1:])
            elif d != "align":
                typ = d
            else:
                self.integer()
        if not typ:
            raise self.error("missing register type")
        names: list[str] = []
        while True:
            name = self.ident()
            if self.accept("<"):
                at = self.peek()
                n = self.integer()
                if not 0 <= n <= MAX_REGISTERS - len(names):
                    raise self.error(
                        f"%{name.lstrip('%')}<{n}>: at most {MAX_REGISTERS} registers may be declared at once", at
                    )
                self.expect(">")
                if self.nregs + len(names) + n > MAX_MODULE_REGISTERS:
                    raise self.error(f"more than {MAX_MODULE_REGISTERS} registers declared in one module", at)
                names.extend(f"{name}{k}" for k in range(n))
            else:
                names.append(name)
            if not self.accept(","):
                break
        self.expect(";")
        self.nregs += len(names)
        return A.RegDecl(typ, names, vec)

    # -- instructions --------------------------------------------------------------------------
    def instruction(self) -> A.Instr:
        start = self.peek()
        pred, neg = None, False
        if self.accept("@"):
            neg = self.accept("!")
            pred = self.ident()
        t = self.next()
        if t.kind != "word":
            raise self.error("expected instruction", t)
        parts = t.text.split(".")
        ins = A.Instr(parts[0], [m for m in map(_qualified, parts[1:]) if m], [], pred, neg, start.line, start.col)
        while self.peek().kind == "dir":  # e.g. 'call.uni' written with spaces, rare
            ins.mods.append(self.next().text[1:])
        if self.accept(";"):
            return ins
        while True:
            ins.operands.append(self.operand())
            if self.accept(";"):
                if "L2::cache_hint" in parts:  # the last operand is a cache policy (createpolicy): a hint
                    ins.operands.pop()
                return ins
            if not self.accept(","):
                raise self.error("expected ',' or ';'")


# NOTE [qualified modifiers]
# PTX 7.x-8.x qualify some modifiers with `::` (`ld.global.L1::no_allocate.L2::256B`, `cp.async.cg.shared.global
# .L2::128B`, `mbarrier.arrive.shared::cta.b64`, `fence.proxy.async.shared::cta`); nvcc emits them for cache hints,
# memcpy_async and cuda::barrier on sm_80 and later. Cache-eviction and prefetch-size hints (`L1::`, `L2::`) change
# nothing on the CPU and are dropped here, with the cache-policy operand `.L2::cache_hint` adds; `.shared::cta` and
# `.shared::cluster` are `.shared` (a cluster is one CTA here, so a cluster shared address is the CTA's own).
# Other qualified modifiers (`.mbarrier::complete_tx::bytes` of bulk copies...) stay as they are, for the
# instruction's lowering to accept or to report as not supported.
def _qualified(mod: str) -> str:
    if "::" not in mod:
        return mod
    if mod.startswith(("L1::", "L2::")):
        return ""
    if mod in ("shared::cta", "shared::cluster"):
        return "shared"
    return mod


def parse(text: str | bytes) -> A.Module:
    if isinstance(text, (bytes, bytearray, memoryview)):
        text = bytes(text).split(b"\0", 1)[0].decode("utf-8", errors="replace")
    return Parser(text).parse_module()
