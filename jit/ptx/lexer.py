"""PTX lexer: turns text into (kind, text, line, col) tokens."""

from __future__ import annotations

import re
from typing import NamedTuple

from jit.errors import invalid_ptx


class Tok(NamedTuple):  # a tuple: made ~3x faster than a frozen dataclass, and a module has thousands
    kind: str  # 'dir' (.version), 'word', 'num', 'hexf', 'str', 'punct', 'eof'
    text: str
    line: int
    col: int


# NOTE [lexing words with dots]
# Opcodes with their modifiers ("ld.global.v4.f32", "ld.global.L1::no_allocate.L2::256B.f32") and special
# registers ("%tid.x") are lexed as one word; the parser splits opcodes at dots (NOTE [qualified modifiers]). Directives start with a dot and are their own kind.
_TOKEN = re.compile(
    r"""
    (?P<ws>[ \t\r\f\v]+)
  | (?P<nl>\n)
  | (?P<lcom>//[^\n]*)
  | (?P<bcom>/\*.*?\*/)
  | (?P<str>"(?:[^"\\\n]|\\.)*")
  | (?P<hexf>0[fFdD][0-9a-fA-F]{8}(?:[0-9a-fA-F]{8})?(?![\w$]))
  | (?P<num>(?:0[xX][0-9a-fA-F]+|0[bB][01]+|(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)[uU]?(?![\w$]))
  | (?P<dir>\.[A-Za-z_$][\w$]*)
  | (?P<word>[A-Za-z_$%][\w$]*(?:\.[\w$]+(?:::[\w$]+)*)*)
  | (?P<punct>[{}()\[\],;:<>@!|+\-*/=_&~^?])
    """,
    re.VERBOSE | re.DOTALL,
)


def tokenize(text: str) -> list[Tok]:
    toks: list[Tok] = []
    append = toks.append
    line, line_start, pos = 1, 0, 0
    for m in _TOKEN.finditer(text):
        start = m.start()
        if start != pos:  # finditer skipped what no token matches
            break
        kind = m.lastgroup
        pos = m.end()
        if kind == "ws" or kind == "lcom":
            continue
        if kind == "nl":
            line += 1
            line_start = pos
        elif kind == "bcom":
            s = m.group()
            nls = s.count("\n")
            if nls:
                line += nls
                line_start = start + s.rfind("\n") + 1
        else:
            append(Tok(kind, m.group(), line, start - line_start + 1))  # type: ignore[arg-type]
    if pos < len(text):
        raise invalid_ptx(f"unexpected character {text[pos]!r}", line, pos - line_start + 1)
    toks.append(Tok("eof", "", line, pos - line_start + 1))
    return toks
