"""NOTE [register forwarding] (jit/lower/forwarding.py): within a basic block a register's value is reused after a store
or a first load instead of being loaded again, and registers whose loads were all forwarded lose their allocas
(drop_unread_allocas). A stale value would silently change results, so: what the scanner must see, and kernels that
read a register again after overwriting it."""

from __future__ import annotations

import re

import numpy as np
import pytest
from llvmlite import ir

from jit.lower.core import FuncLowering
from jit.lower.forwarding import drop_unread_allocas
from jit.lower.module import ModuleCodegen
from jit.pipeline import front_end, translate
from jit.ptx import ast as A
from tests.unit.jit.helpers import HEADER, pack

I32 = ir.IntType(32)


def _lowering() -> tuple[FuncLowering, ir.IRBuilder]:
    mod = front_end(HEADER + ".visible .entry k() { .reg .b32 %r<3>; ret; }")
    cg = ModuleCodegen(mod)
    llfn = ir.Function(cg.module, ir.FunctionType(ir.VoidType(), []), "k")
    entry = llfn.append_basic_block("entry")
    ab, b = ir.IRBuilder(entry), ir.IRBuilder(llfn.append_basic_block("body"))
    fl = FuncLowering(cg, mod.functions[0], llfn, None, ab, b)  # type: ignore[arg-type]
    return fl, b


def test_values_come_from_stores_made_by_anyone() -> None:
    fl, b = _lowering()
    r1 = A.Reg("%r1")
    fl.put(r1, ir.Constant(I32, 5), "u32")
    assert fl.get(r1, "u32") is b.block.instructions[-1].operands[0]  # the stored constant, no load
    b.store(ir.Constant(I32, 7), fl.regs["%r1"])  # a direct store (thread-record restores do this)
    assert str(fl.get(r1, "u32")) == "i32 7"
    n = len(b.block.instructions)
    first = fl.get(A.Reg("%r2"), "u32")  # unknown here: one load, then reused
    assert isinstance(first, ir.LoadInstr) and fl.get(A.Reg("%r2"), "u32") is first
    assert len(b.block.instructions) == n + 1


def test_calls_on_a_register_and_other_blocks_forget() -> None:
    fl, b = _lowering()
    r1 = A.Reg("%r1")
    fl.put(r1, ir.Constant(I32, 5), "u32")
    fn = ir.Function(fl.module, ir.FunctionType(ir.VoidType(), [ir.PointerType(I32)]), "writes")
    b.call(fn, [fl.regs["%r1"]])
    assert isinstance(fl.get(r1, "u32"), ir.LoadInstr)
    fl.put(r1, ir.Constant(I32, 6), "u32")
    nxt = fl.block("next")
    b.branch(nxt)
    b.position_at_end(nxt)
    assert isinstance(fl.get(r1, "u32"), ir.LoadInstr)  # another block: nothing known


def test_not_at_the_end_of_a_block_loads() -> None:
    fl, b = _lowering()
    r1 = A.Reg("%r1")
    fl.put(r1, ir.Constant(I32, 5), "u32")
    store = b.block.instructions[-1]
    fl.put(r1, ir.Constant(I32, 6), "u32")
    b.position_after(store)  # inserting between the two stores: the later one must not be seen
    assert isinstance(fl.get(r1, "u32"), ir.LoadInstr)


def test_unread_allocas_are_dropped_with_their_stores() -> None:
    fl, b = _lowering()
    fl.put(A.Reg("%r1"), ir.Constant(I32, 5), "u32")
    fl.put(A.Reg("%r2"), ir.Constant(I32, 6), "u32")
    v = fl.get(A.Reg("%r2"), "u32")
    b.store(b.add(v, v), fl.regs["%r0"])
    b.load(fl.regs["%r0"])
    b.ret_void()
    drop_unread_allocas(fl.llfn)
    text = str(fl.llfn)
    assert '%"r1"' not in text and '%"r2"' not in text and '%"r0" = alloca' in text


def test_an_alloca_whose_address_is_stored_is_kept() -> None:
    fl, b = _lowering()
    fl.put(A.Reg("%r1"), ir.Constant(I32, 5), "u32")
    slot = fl.ab.alloca(ir.PointerType(I32), name="slot")
    b.store(fl.regs["%r1"], slot)
    b.load(slot)
    b.ret_void()
    drop_unread_allocas(fl.llfn)
    assert '%"r1" = alloca' in str(fl.llfn)


REUSE = (
    HEADER
    + """
.visible .entry k(.param .u64 out)
{
  .reg .b32 %r<8>; .reg .b64 %rd<4>; .reg .pred %p<3>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  add.u32 %r2, %r1, 1;
  mov.u32 %r1, 7;
  add.u32 %r3, %r1, %r2;
  setp.lt.u32 %p1, %r3, 10;
  mov.u32 %r1, 100;
  @%p1 add.u32 %r1, %r1, 1;
  add.u32 %r4, %r1, %r3;
  mul.wide.u32 %rd2, %r1, 0;
  cvt.u32.u64 %r5, %rd2;
  add.u32 %r4, %r4, %r5;
  mov.u32 %r6, %tid.x;
  mul.wide.u32 %rd3, %r6, 4; add.s64 %rd3, %rd1, %rd3; st.global.u32 [%rd3], %r4;
  ret;
}
"""
)


@pytest.mark.parametrize("tier", ["quick", "optimized"])
def test_overwritten_registers_are_read_anew(tier: str) -> None:
    """%r1 is read, overwritten, read, overwritten under a predicate and read again, all in one block."""
    from jit import compile_module

    k = compile_module(REUSE, tier=tier).get_kernel("k")
    out = np.zeros(8, np.uint32)
    k.launch(1, 8, 0, pack(k, out))
    t = np.arange(8)
    r3 = 7 + t + 1
    assert (out == np.where(r3 < 10, 101, 100) + r3).all()


def test_reduction_ir_has_no_reload_after_store() -> None:
    """A register loaded right after a store to it in the same block means forwarding is off."""
    from pathlib import Path

    text = (Path(__file__).parents[2] / "jit_golden" / "cases" / "nb_block_reduce_shared.ptx").read_text()
    ir_text = str(translate(text, "cpu", False, "t", quick=True).ir_module)
    pairs = re.findall(r'store [^,]+, [^*]+\* (%"[^"]+")\n\s+%"?[.\w]+"? = load [^,]+, [^*]+\* \1\n', ir_text)
    assert not pairs
    assert ir_text.count(" load ") < ir_text.count(" store ")
