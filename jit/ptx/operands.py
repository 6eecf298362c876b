"""Operand syntax of PTX instructions: registers, immediates (0f/0d hex floats), vectors, groups, addresses."""

from __future__ import annotations

from jit.ptx import ast as A


class OperandParser:
    """Mixin of Parser (jit/ptx/parser.py): needs peek/next/accept/expect/ident/integer/error."""

    def operand(self) -> A.Operand:
        t = self.peek()
        if t.text == "[":
            self.next()
            return self.address()
        if t.text == "{":
            self.next()
            items = []
            while not self.accept("}"):
                items.append(self.operand())
                self.accept(",")
            return A.Vec(tuple(items))
        if t.text == "(":
            self.next()
            items = []
            while not self.accept(")"):
                items.append(self.operand())
                self.accept(",")
            return A.Group(tuple(items))
        if t.text == "!":
            self.next()
            return A.Not(A.Reg(self.ident()))
        if t.text == "-" or t.kind in ("num", "hexf"):
            return self.immediate()
        if t.kind == "word":
            self.next()
            if t.text == "_":
                return A.Sink()
            first: A.Operand = A.Reg(t.text) if t.text.startswith("%") else A.Sym(t.text)
            if self.peek().text == "|":
                self.next()
                return A.PredPair(first, self.operand())
            if isinstance(first, A.Sym) and self.peek().text in ("+", "-") and self.peek(1).kind == "num":
                sign = -1 if self.next().text == "-" else 1
                return A.SymOff(first.name, sign * self.integer())
            return first
        raise self.error("bad operand", t)

    def immediate(self) -> A.Imm:
        neg = self.accept("-")
        t = self.next()
        if t.kind == "hexf":
            bits = 32 if t.text[1] in "fF" else 64
            v = int(t.text[2:], 16)
            return A.Imm(v, True, bits) if not neg else A.Imm(v ^ (1 << (bits - 1)), True, bits)
        iv = _int(t.text)
        if iv is not None:
            return A.Imm(-iv if neg else iv)
        try:
            fv = float(t.text.rstrip("uU"))
        except ValueError:
            raise self.error("bad number", t) from None
        return A.Imm(-fv if neg else fv, True, 0)

    def address(self) -> A.Addr:
        base: A.Reg | A.Sym | A.Imm | None = None
        off = 0
        t = self.peek()
        if t.kind == "word":
            self.next()
            base = A.Reg(t.text) if t.text.startswith("%") else A.Sym(t.text)
        elif t.kind == "num" or t.text == "-":
            off = self.integer()
        while self.peek().text in ("+", "-"):
            sign = -1 if self.next().text == "-" else 1
            off += sign * self.integer()
        if self.peek().text == ",":  # texture/surface style [tex, coords]: kept as a group
            items: list[A.Operand] = [base if base is not None else A.Imm(off)]
            while self.accept(","):
                items.append(self.operand())
            self.expect("]")
            return A.Group(tuple(items))  # type: ignore[return-value]
        self.expect("]")
        if base is None:
            return A.Addr(A.Imm(off), 0)
        return A.Addr(base, off)


def _int(s: str) -> int | None:
    s = s.rstrip("uU")
    try:
        if s[:2] in ("0x", "0X"):
            return int(s[2:], 16)
        if s[:2] in ("0b", "0B"):
            return int(s[2:], 2)
        if s.isdigit():
            return int(s, 8) if len(s) > 1 and s[0] == "0" else int(s)
    except ValueError:
        return None
    return None
