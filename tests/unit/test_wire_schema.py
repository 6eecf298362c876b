"""NOTE [wire schema] (proto/messages.py): every message to or from gpud is built and read through proto/ on both
ends. A plain ``{"kind": ...}`` map of one of gpud's message kinds in the product's code is a second, unchecked
definition of that message: this test finds them. (woolyhv/pool/ speaks the pool controller's own protocol, whose
``ping``/``pong``/``error`` are its own: not yet in proto/.)"""

from __future__ import annotations

import ast
import pathlib

import msgspec
import pytest

from proto import messages as m
from proto.codec import ProtocolError, check, decode, encode

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _hand_built(path: pathlib.Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (
            isinstance(node, ast.Dict)
            and node.keys
            and isinstance(node.keys[0], ast.Constant)
            and node.keys[0].value == "kind"
            and isinstance(node.values[0], ast.Constant)
            and node.values[0].value in m.MESSAGES
        ):
            out.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.values[0].value}")
    return out


def test_no_message_of_gpud_is_built_by_hand() -> None:
    found = [
        hit
        for pkg in ("shim", "gpud", "woolyhv", "proto")
        for p in (ROOT / pkg).rglob("*.py")
        if "pool" not in p.relative_to(ROOT).parts
        for hit in _hand_built(p)
    ]
    assert not found, "build these as proto.messages Structs:\n" + "\n".join(found)


def test_every_message_round_trips_from_its_defaults() -> None:
    """Each class can be built, encoded and decoded by its own side (required fields filled with their type's zero)."""
    zero = {int: 0, str: "", bytes: b"", bool: False, float: 0.0}
    for kind, cls in m.MESSAGES.items():
        fields = {}
        for f in msgspec.structs.fields(cls):
            if f.required:
                t = getattr(f.type, "__origin__", f.type)
                fields[f.name] = zero.get(t, None)
        try:
            msg = cls(**fields)
            got = check(msg)
        except ProtocolError:
            continue  # a required field whose zero breaks a limit (a 16-byte digest, a 3-element grid): fine
        assert type(got) is cls and got.kind == kind
        if not cls.reply:
            assert decode(encode(msg))[0] == got


@pytest.mark.parametrize(
    ("msg", "bulk", "want"),
    [
        (m.MemcpyHtoD(dst=4096, frame=0), [b"x" * 10], [(4096, 10)]),
        (m.Memset(dst=8192, value=1, elem_size=4, count=3), [], [(8192, 12)]),
        (m.ShmHtoD(dst=1 << 20, slot=0, size=77, seq=1), [], [(1 << 20, 77)]),
        (
            m.Launch(function=1, grid=[1, 1, 1], block=[1, 1, 1], params=(5).to_bytes(8, "little") + b"\1\2\3"),
            [],
            [(5, m.POINTERS)],
        ),
        (m.MemcpyDtoH(src=1, size=2), [], []),
        (m.Sync(), [], []),
    ],
)
def test_a_message_declares_what_it_writes(msg, bulk, want) -> None:  # type: ignore[no-untyped-def]
    assert msg.writes(bulk) == want


def test_passive_and_queued_are_declared_by_the_classes() -> None:
    assert m.Ping.passive and m.Sync.passive and not m.Launch.passive and not m.MemAlloc.passive
    assert m.Launch.queued and m.MemFree.queued and not m.MemAlloc.queued and not m.CtxSynchronize.queued


def test_messages_listing_their_operands_declare_what_they_write() -> None:
    """A message with ``extents()`` writes exactly the operands it marks written (what dedup's copy-on-write and
    the hypervisor read): the cuSPARSE conversions and counted operations."""
    from proto import messages as m

    listed = [c for c in m.MESSAGES.values() if hasattr(c, "extents")]
    assert {c.kind for c in listed} >= {"sparse_sort", "sparse_gemm", "sparse_compress", "sparse_indices"}
    msg = m.SparseIndices(to_coo=True, m=4, nnz=6, src=0x1000, dst=0x2000)
    assert msg.writes([]) == [(0x2000, 24)]
    gemm = m.SparseGemm(
        m=2,
        k=2,
        n=2,
        a_nnz=1,
        a_offsets=8,
        a_indices=16,
        a_values=24,
        b_nnz=1,
        b_offsets=32,
        b_indices=40,
        b_values=48,
        c_nnz=1,
        c_offsets=56,
        c_indices=64,
        c_values=72,
        type="f64",
    )
    assert gemm.writes([]) == [(56, 12), (64, 4), (72, 8)]
    assert m.SparseGemm(**{**{f: getattr(gemm, f) for f in gemm.__struct_fields__}, "count": True}).writes([]) == []
