"""Lazy modules (NOTE [lazy modules], jit/ptx/split.py): big modules are split at the text level and each
kernel is translated at its first use; kernels of one module still share its globals."""

from __future__ import annotations

import ctypes
import struct

import numpy as np
import pytest

import jit
from jit.lazy import LazyCpuModule
from jit.ptx.split import split

PTX = b"""
//
// a comment with a brace { that must not count
.version 7.8
.target sm_80
.address_size 64

.global .align 4 .u32 counter = 5;
.global .align 8 .f64 table[4] = {1.0, 2.0, 3.0, 4.0};
.func (.param .b32 r) twice(.param .b32 x);

.func (.param .b32 r) twice(.param .b32 x)
{
    .reg .b32 %r<3>;
    ld.param.u32 %r1, [x];
    add.s32 %r2, %r1, %r1;
    st.param.b32 [r], %r2;
    ret;
}

.visible .entry bump(.param .u64 out)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<3>;
    ld.global.u32 %r1, [counter];
    { // an inner scope
    .param .b32 a;
    .param .b32 b;
    st.param.b32 [a], %r1;
    call.uni (b), twice, (a);
    ld.param.b32 %r2, [b];
    }
    st.global.u32 [counter], %r2;
    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd2, %rd1;
    st.global.u32 [%rd2], %r2;
    ret;
}

.visible .entry peek(.param .u64 out)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<3>;
    ld.global.u32 %r1, [counter];
    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd2, %rd1;
    st.global.u32 [%rd2], %r1;
    ret;
}

.visible .entry unused(.param .u64 out)
{
    ret;
}
"""


def test_split_finds_items_and_reach() -> None:
    s = split(PTX)
    assert s is not None and s.entries == ["bump", "peek", "unused"]
    bump = s.piece("bump")
    assert b"twice" in bump and b".entry peek" not in bump and b"counter" in bump
    peek = s.piece("peek")
    assert b"twice" not in peek and b".entry bump" not in peek
    assert s.piece(None).count(b".entry") == 0 and b"table" in s.piece(None)
    with pytest.raises(KeyError):
        s.piece("nope")


def test_function_address_initializers_are_not_split() -> None:
    ptx = PTX.replace(
        b".global .align 4 .u32 counter = 5;", b".global .align 4 .u32 counter = 5;\n.global .align 8 .u64 fp = twice;"
    )
    assert split(ptx) is None


def test_unbalanced_text_is_not_split() -> None:
    assert split(PTX + b"\n}\n") is None


def test_lazy_module_translates_on_first_use_and_shares_globals(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WOOLY_JIT_LAZY_BYTES", "100")
    mod = jit.compile_module(PTX)
    assert isinstance(mod, LazyCpuModule)
    assert mod.kernel_names == ["bump", "peek", "unused"]
    assert not mod.compiled("bump") and not mod.compiled("peek")
    counter = mod.get_global("counter")
    assert ctypes.c_uint32.from_address(counter.address).value == 5
    table = mod.get_global("table")
    assert struct.unpack("<4d", ctypes.string_at(table.address, 32)) == (1.0, 2.0, 3.0, 4.0)
    out = np.zeros(1, np.uint32)
    params = struct.pack("<Q", out.ctypes.data)
    mod.get_kernel("bump").launch((1, 1, 1), (1, 1, 1), params=params)
    assert out[0] == 10 and mod.compiled("bump") and not mod.compiled("peek")
    mod.get_kernel("peek").launch((1, 1, 1), (1, 1, 1), params=params)
    assert out[0] == 10  # peek, translated separately, reads the counter bump wrote: one data block
    assert ctypes.c_uint32.from_address(counter.address).value == 10
    assert not mod.compiled("unused")
    with pytest.raises(jit.JitError):
        mod.get_kernel("nope")


def test_small_modules_are_translated_whole() -> None:
    assert not isinstance(jit.compile_module(PTX), LazyCpuModule)
