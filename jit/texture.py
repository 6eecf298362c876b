"""Texture and surface instructions on devices without texture units: calls into a PTX library.

# NOTE [textures]
# A texture or surface object (cuTexObjectCreate, cuSurfObjectCreate: shim/native/cu_texture.py) is the device address
# of a 96-byte descriptor the client writes into the tenant's own memory: the texels' address, pitch and slice
# pitch, extent, layers (a cubemap's faces are layers), channel format and count, address and filter modes, the
# CU_TRSF flags and the border colour (``struct Desc`` in jit/texture_lib.cu; ``proto.texture.pack_descriptor`` writes it).
# Before a module is parsed, ``supply`` rewrites each ``tex``, ``suld``, ``sust``, ``txq`` and ``suq`` statement into
# PTX every backend already translates:
# - ``tex.{1d,2d,3d,a1d,a2d,cube,acube}.v4.{f32,s32,u32}.{f32,s32}`` becomes a call of a library function
#   (``__wooly_tex_f``: filtered float reads, ``__wooly_tex_fi``: texel fetches with integer coordinates,
#   ``__wooly_tex_i``: integer reads) and the loads of its four results;
# - ``suld.b``/``sust.b`` become a call of ``__wooly_surf`` (the address of byte x of row y, by the .trap/.clamp/.zero
#   mode) and a plain ``ld.global``/``st.global`` of the vector at that address;
# - ``txq``/``suq`` width, height, depth and array size become a load of the descriptor's field.
# The library (jit/texture_lib.ptx, compiled from jit/texture_lib.cu by ``python -m jit.texture --regenerate``) is
# appended once, its functions ``.weak`` (a linked program may carry it twice). Everything it reads -- the
# descriptor, the texels -- it reads with ordinary global loads, so the JIT's bounds checks (NOTE [bounds checking],
# jit/emit/bounds.py) confine a hostile handle to the tenant's own memory: at worst its launch fails with
# CUDA_ERROR_ILLEGAL_ADDRESS. Filtering follows a texture unit's: bilinear (trilinear in 3D) weights with 8
# fractional bits, texel centres at +0.5, the address mode applied per texel index (wrap, clamp, mirror, border);
# normalized-float reads of 8- and 16-bit integer formats scale to [0, 1] or [-1, 1]. A rewritten statement keeps its
# line (one line in, one line out), so errors still name the tenant's line. Not offered: mipmaps (``tex.level``,
# ``tex.grad``), ``tld4`` gathers and formatted surface stores (``sust.p``): those stay as they are and the JIT
# refuses them by name (CUDA_ERROR_NOT_SUPPORTED), as it does the legacy texture and surface references (a
# ``.texref``/``.surfref`` symbol in place of the object register; removed from CUDA 12).
"""

from __future__ import annotations

import itertools
import os
import re

from proto.texture import DEPTH, ELEM, HEIGHT, LAYERS, WIDTH  # fields of the descriptor (struct Desc)

HERE = os.path.dirname(os.path.abspath(__file__))
LIB_PATH = os.path.join(HERE, "texture_lib.ptx")
SRC_PATH = os.path.join(HERE, "texture_lib.cu")

_REG = r"[%\w$.]+"
_HANDLE = r"%[\w$.]+"  # an object is a register; a .texref/.surfref symbol is left for the JIT to refuse
_PRED = r"(?P<pred>@!?%[\w$]+\s+)?"
_TEX = re.compile(
    _PRED + r"tex\.(?P<geo>1d|2d|3d|a1d|a2d|cube|acube)\.v4\.(?P<rt>f32|s32|u32)\.(?P<ct>f32|s32)\s+"
    r"\{(?P<dst>[^}]*)\}\s*,\s*\[\s*(?P<h>" + _HANDLE + r")\s*,\s*\{(?P<c>[^}]*)\}\s*\]\s*;"
)
_SULD = re.compile(
    _PRED + r"suld\.b\.(?P<geo>1d|2d|3d|a1d|a2d)(?:\.(?:ca|cg|cs|cv))?(?:\.(?P<vec>v2|v4))?\.(?P<t>b8|b16|b32|b64)"
    r"(?:\.(?P<mode>trap|clamp|zero))?\s+(?:\{(?P<dst>[^}]*)\}|(?P<dst1>" + _REG + r"))\s*,\s*"
    r"\[\s*(?P<h>" + _HANDLE + r")\s*,\s*\{(?P<c>[^}]*)\}\s*\]\s*;"
)
_SUST = re.compile(
    _PRED + r"sust\.b\.(?P<geo>1d|2d|3d|a1d|a2d)(?:\.(?:wb|cg|cs|wt))?(?:\.(?P<vec>v2|v4))?\.(?P<t>b8|b16|b32|b64)"
    r"(?:\.(?P<mode>trap|clamp|zero))?\s+\[\s*(?P<h>" + _HANDLE + r")\s*,\s*\{(?P<c>[^}]*)\}\s*\]\s*,\s*"
    r"(?:\{(?P<src>[^}]*)\}|(?P<src1>" + _REG + r"))\s*;"
)
_QUERY = re.compile(
    _PRED + r"(?P<op>txq|suq)(?:\.level)?\.(?P<what>width|height|depth|array_size|num_mipmap_levels)\.b32\s+"
    r"(?P<d>" + _REG + r")\s*,\s*\[\s*(?P<h>" + _HANDLE + r")\s*\]\s*;"
)
_MODES = {"trap": 0, "clamp": 1, "zero": 2, None: 0}
_DIMS = {"1d": 1, "a1d": 1, "2d": 2, "a2d": 2, "3d": 3, "cube": 2, "acube": 2}
_ZERO_F = "0f00000000"


def _split(text: str) -> list[str]:
    return [x.strip() for x in text.split(",")]


def _coords(geo: str, c: list[str], zero: str) -> tuple[str, str, str, str]:
    """(x, y, z, layer) of a coordinate vector; absent ones ``zero`` (layer: 0)."""
    layer = "0"
    if geo.startswith("a"):
        layer, c = c[0], c[1:]
    x = c[0]
    y = c[1] if len(c) > 1 and geo not in ("1d", "a1d") else zero
    z = c[2] if len(c) > 2 and geo in ("3d", "cube", "acube") else zero
    return x, y, z, layer


def _call(pred: str | None, body: list[str], counter: itertools.count) -> str:
    """One scoped block (a single line) of ``body``, skipped when the statement's predicate is false."""
    if not pred:
        return "{ " + " ".join(body) + " }"
    p = pred.strip()
    neg = "@" + p[2:] if p.startswith("@!") else "@!" + p[1:]
    label = f"$__wooly_tex_skip{next(counter)}"
    return "{ " + f"{neg} bra {label}; " + " ".join(body) + f" {label}: " + "}"


def _params(kinds: list[tuple[str, str]]) -> list[str]:
    out = []
    for i, (t, v) in enumerate(kinds):
        out.append(f".param .{t} __wooly_p{i};")
        out.append(f"st.param.{t} [__wooly_p{i}], {v};")
    return out


def _tex(m: re.Match, counter: itertools.count) -> str:
    geo, rt, ct = m["geo"], m["rt"], m["ct"]
    dst = _split(m["dst"])
    h = m["h"]
    c = _split(m["c"])
    cube = geo in ("cube", "acube")
    dims = _DIMS[geo]
    if rt == "f32" and ct == "f32":
        x, y, z, layer = _coords(geo, c, _ZERO_F)
        fn = "__wooly_tex_f"
        args = [("b64", h), ("b32", str(dims)), ("f32", x), ("f32", y), ("f32", z), ("b32", layer)]
        args.append(("b32", "1" if cube else "0"))
    elif rt == "f32":
        x, y, z, layer = _coords(geo, c, "0")
        fn = "__wooly_tex_fi"
        args = [("b64", h), ("b32", x), ("b32", y), ("b32", z), ("b32", layer)]
    elif ct == "f32":
        x, y, z, layer = _coords(geo, c, _ZERO_F)
        fn = "__wooly_tex_i"
        args = [("b64", h), ("b32", str(dims)), ("f32", x), ("f32", y), ("f32", z), ("b32", layer), ("b32", "0")]
        args += [("b32", "0")] * 3
    else:
        x, y, z, layer = _coords(geo, c, "0")
        fn = "__wooly_tex_i"
        args = [("b64", h), ("b32", str(dims)), ("f32", _ZERO_F), ("f32", _ZERO_F), ("f32", _ZERO_F)]
        args += [("b32", layer), ("b32", "1"), ("b32", x), ("b32", y), ("b32", z)]
    body = _params(args)
    body.append(".param .align 16 .b8 __wooly_r[16];")
    body.append(f"call.uni (__wooly_r), {fn}, ({', '.join(f'__wooly_p{i}' for i in range(len(args)))});")
    lt = "f32" if rt == "f32" else "b32"
    for k, d in enumerate(dst[:4]):
        if d != "_":
            body.append(f"ld.param.{lt} {d}, [__wooly_r+{4 * k}];")
    return _call(m["pred"], body, counter)


def _operand(regs: list[str]) -> str:
    return regs[0] if len(regs) == 1 else "{" + ", ".join(regs) + "}"


def _surface(m: re.Match, counter: itertools.count, store: bool) -> str:
    geo, t = m["geo"], m["t"]
    n = int(m["vec"][1:]) if m["vec"] else 1
    width = int(t[1:]) // 8
    x, y, z, layer = _coords(geo, _split(m["c"]), "0")
    mode = _MODES[m["mode"]]
    args = [("b64", m["h"]), ("b32", x), ("b32", y), ("b32", z), ("b32", layer), ("b32", str(n * width))]
    args.append(("b32", str(mode)))
    body = [".reg .b64 %__wooly_a;"] + _params(args)
    body.append(".param .b64 __wooly_r;")
    body.append(f"call.uni (__wooly_r), __wooly_surf, ({', '.join(f'__wooly_p{i}' for i in range(len(args)))});")
    body.append("ld.param.b64 %__wooly_a, [__wooly_r];")
    vec = f".v{n}" if n > 1 else ""
    guard = ""
    if mode == 2:  # .zero: outside the surface the address is 0: loads read zeros, stores are dropped
        body.insert(0, ".reg .pred %__wooly_q;")
        body.append("setp.ne.u64 %__wooly_q, %__wooly_a, 0;")
        guard = "@%__wooly_q "
    if store:
        vals = _split(m["src"]) if m["src"] is not None else [m["src1"]]
        body.append(f"{guard}st.global{vec}.{t} [%__wooly_a], {_operand(vals)};")
    else:
        dsts = _split(m["dst"]) if m["dst"] is not None else [m["dst1"]]
        if guard:
            mov = "b16" if width < 4 else t
            body += [f"mov.{mov} {d}, 0;" for d in dsts]
        body.append(f"{guard}ld.global{vec}.{t} {_operand(dsts)}, [%__wooly_a];")
    return _call(m["pred"], body, counter)


def _query(m: re.Match) -> str:
    pred = m["pred"] or ""
    what, d, h = m["what"], m["d"], m["h"]
    if what == "num_mipmap_levels":
        return f"{pred}mov.b32 {d}, 1;"
    if m["op"] == "suq" and what == "width":  # a surface's width in bytes, as suq gives it
        return (
            "{ .reg .b32 %__wooly_e; "
            f"{pred}ld.global.u32 {d}, [{h}+{WIDTH}]; {pred}ld.global.u32 %__wooly_e, [{h}+{ELEM}]; "
            f"{pred}mul.lo.u32 {d}, {d}, %__wooly_e; }}"
        )
    off = {"width": WIDTH, "height": HEIGHT, "depth": DEPTH, "array_size": LAYERS}[what]
    return f"{pred}ld.global.u32 {d}, [{h}+{off}];"


_library: str | None = None
_HEADER = re.compile(r"(?:^[ \t]*(?:\.version|\.target|\.address_size)[^\n]*\n|^[ \t]*(?://[^\n]*)?\n)+", re.M)


def library() -> str:
    """The library's function definitions (its PTX header left out), each ``.weak``."""
    global _library
    if _library is None:
        with open(LIB_PATH) as f:
            text = f.read()
        body = [ln for ln in text.splitlines() if not ln.startswith((".version", ".target", ".address_size", "//"))]
        _library = "\n" + "\n".join(body).replace(".visible .func", ".weak .func") + "\n"
    return _library


_MARKERS = (b"tex.", b"suld.", b"sust.", b"txq.", b"suq.")


def supply(ptx: str | bytes) -> str | bytes:
    """``ptx`` with its texture and surface statements rewritten and the library appended (NOTE [textures]); the
    text itself when it has none."""
    raw = ptx if isinstance(ptx, bytes) else ptx.encode()
    if not any(k in raw for k in _MARKERS):
        return ptx
    text = raw.decode("utf-8", "replace")
    counter = itertools.count()
    new, n1 = _TEX.subn(lambda m: _tex(m, counter), text)
    new, n2 = _SULD.subn(lambda m: _surface(m, counter, False), new)
    new, n3 = _SUST.subn(lambda m: _surface(m, counter, True), new)
    new, n4 = _QUERY.subn(_query, new)
    if n1 + n2 + n3 + n4 == 0:
        return ptx
    if n1 + n2 + n3:  # declared before the module's own functions, which call them
        header = _HEADER.search(new)
        at = header.end() if header else 0
        new = new[:at] + library() + new[at:]
    return new.encode() if isinstance(ptx, bytes) else new


def regenerate() -> None:
    """Compile texture_lib.cu to texture_lib.ptx with nvcc (a development step; the PTX is shipped)."""
    import subprocess

    subprocess.run(
        ["nvcc", "-ptx", "-rdc=true", "-arch=compute_80", "-O3", SRC_PATH, "-o", LIB_PATH], check=True
    )  # fmt: skip


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--regenerate"]:
        regenerate()
    else:
        print("usage: python -m jit.texture --regenerate", file=sys.stderr)
        sys.exit(2)
