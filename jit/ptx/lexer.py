"""PTX lexer: turns text into (kind, text, line, col) tokens."""

from __future__ import annotations

import re
from dataclasses import dataclass

from jit.errors import invalid_ptx


@dataclass(frozen=True)
class Tok:
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
    pos, line, line_start, n = 0, 1, 0, len(text)
    while pos < n:
        m = _TOKEN.match(text, pos)
        if m is None:
            raise invalid_ptx(f"unexpected character {text[pos]!r}", line, pos - line_start + 1)
        kind = m.lastgroup
        s = m.group()
        col = pos - line_start + 1
        if kind == "nl":
            line += 1
            line_start = m.end()
        elif kind == "bcom":
            nls = s.count("\n")
            if nls:
                line += nls
                line_start = pos + s.rfind("\n") + 1
        elif kind not in ("ws", "lcom"):
            toks.append(Tok(kind, s, line, col))  # type: ignore[arg-type]
        pos = m.end()
    toks.append(Tok("eof", "", line, pos - line_start + 1))
    return toks
