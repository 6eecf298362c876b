"""Splitting a PTX module into per-kernel pieces at the text level, for lazy loading.

NOTE [lazy modules]: libraries ship big modules of which a program uses a few kernels: CuPy's thrust
sort is one 20 MB module, its CUB reductions 22 MB with 383 kernels; CUDA itself has loaded modules
lazily since 12.2 (CUDA_MODULE_LOADING=LAZY). Translating such a module whole takes minutes, so a
module larger than WOOLY_JIT_LAZY_BYTES is split here and each kernel is translated at its first
cuModuleGetFunction (jit/lazy.py). The split reads only the top level of the text, not the
instructions: one pass finds the statements at brace depth 0 (the header, variables, function
prototypes, function and kernel definitions) and which functions each body names. A kernel's piece
is the header, every module-scope variable in the original order (so every piece lays out the
module's data block identically, and all pieces share one block, as a GPU module's kernels share
its globals), the prototypes and definitions of the functions it reaches, in their original order,
and the kernel. A module whose variables are initialised with function addresses is not split
(those addresses would differ between pieces).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_SCAN = re.compile(rb'[;{}"]|//|/\*')  # at the top level: statement ends matter
_SCAN_BODY = re.compile(rb'[{}"]|//|/\*')  # inside a body only braces (and what may hide them) do
_IDENT = re.compile(rb"[A-Za-z_$][\w$]*")
_ENTRY = re.compile(rb"\.entry\s+([\w$]+)")
_FUNC = re.compile(rb"\.func\s*(?:\([^)]*\)\s*)?([\w$]+)")
_HEADER = (b".version", b".target", b".address_size", b".file")


@dataclass
class Item:
    kind: str  # header | var | proto | func | entry | other
    name: str
    text: bytes
    refs: set[str] = field(default_factory=set)


@dataclass
class Split:
    items: list[Item]
    entries: list[str]

    def piece(self, entry: str | None) -> bytes:
        """The PTX of one kernel (``None``: the header and the variables only, for the data layout)."""
        funcs = {i.name: i for i in self.items if i.kind == "func"}
        need: set[str] = set()
        todo = [] if entry is None else [entry]
        items_by_entry = {i.name: i for i in self.items if i.kind == "entry"}
        if entry is not None and entry not in items_by_entry:
            raise KeyError(entry)
        while todo:
            name = todo.pop()
            item = funcs.get(name) or items_by_entry.get(name)
            if item is None:
                continue
            for r in item.refs:  # a kernel it names is one it launches (NOTE [device launches]): in its piece too
                if r not in need and (r in funcs or r in self._protos or r in items_by_entry):
                    need.add(r)
                    todo.append(r)
        out = []
        for i in self.items:
            if (
                i.kind in ("header", "var")
                or (i.kind in ("proto", "func") and i.name in need)
                or (i.kind == "entry" and (i.name == entry or i.name in need))
            ):
                out.append(i.text)
        return b"\n".join(out) + b"\n"

    @property
    def _protos(self) -> set[str]:
        p = self.__dict__.get("_p")
        if p is None:
            p = self.__dict__["_p"] = {i.name for i in self.items if i.kind == "proto"}
        return p


def _statements(text: bytes) -> list[tuple[int, int, bool]]:
    """(start, end, has_body) of each top-level statement: up to its ';' or its closing brace."""
    out = []
    depth, start, pos, n = 0, 0, 0, len(text)
    body = False
    while pos < n:
        m = (_SCAN_BODY if depth else _SCAN).search(text, pos)
        if m is None:
            break
        tok = m.group()
        pos = m.end()
        if tok == b"//":
            nl = text.find(b"\n", pos)
            pos = n if nl < 0 else nl + 1
        elif tok == b"/*":
            close = text.find(b"*/", pos)
            pos = n if close < 0 else close + 2
        elif tok == b'"':
            close = text.find(b'"', pos)
            pos = n if close < 0 else close + 1
        elif tok == b"{":
            depth += 1
            body = True
        elif tok == b"}":
            depth -= 1
            if depth == 0:
                out.append((start, pos, True))
                start, body = pos, False
            elif depth < 0:
                raise ValueError("unbalanced '}'")
        elif tok == b";" and depth == 0:
            out.append((start, pos, body))
            start, body = pos, False
    if text[start:].strip():
        out.append((start, n, body))
    return out


def split(ptx: bytes) -> Split | None:
    """The module's top-level items, or None when it cannot be split safely (see the NOTE)."""
    try:
        stmts = _statements(ptx)
    except ValueError:
        return None
    items: list[Item] = []
    for start, end, has_body in stmts:
        text = ptx[start:end].strip()
        if not text:
            continue
        head = text.split(b"{", 1)[0] if has_body else text
        code = re.sub(rb"//[^\n]*|/\*.*?\*/", b"", head, flags=re.S).strip()
        if code.startswith(_HEADER):
            items.append(Item("header", "", text))
        elif (m := _ENTRY.search(code)) is not None:
            items.append(Item("entry", m.group(1).decode(), text))
        elif (m := _FUNC.search(code)) is not None:
            items.append(Item("func" if has_body else "proto", m.group(1).decode(), text))
        elif code.startswith(b".section") or not code:
            items.append(Item("other", "", text))  # debug sections: not needed to run
        else:
            items.append(Item("var", "", text))
    names = {i.name.encode() for i in items if i.kind in ("func", "proto", "entry")}
    callable_ = any(i.kind in ("func", "proto") for i in items)  # nothing to reach: skip reading the bodies
    for i in items:
        if i.kind in ("func", "entry") and callable_:
            i.refs = {t.decode() for t in set(_IDENT.findall(i.text)) & names}
            i.refs.discard(i.name)
        elif i.kind == "var" and set(_IDENT.findall(i.text)) & names:
            return None  # a function address in an initializer
    entries = [i.name for i in items if i.kind == "entry"]
    if not entries or len(set(entries)) != len(entries):
        return None
    return Split(items, entries)
