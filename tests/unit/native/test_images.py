"""Module images by pointer: PTX text, fatbins carrying PTX, cubins refused; PTX merging for numba links."""

from __future__ import annotations

import ctypes
import struct

import pytest

from proto.errors import CudaError
from shim.native import images
from shim.native.numba_ptx import merge_ptx

PTX = b".version 7.0\n.target sm_80\n.address_size 64\n.visible .entry k() { ret; }\n"


def _fatbin(entries: list[tuple[int, int, int, bytes]]) -> bytes:
    body = b""
    for kind, arch, flags, payload in entries:
        header = struct.pack("<HHIQ", kind, 0x101, 64, len(payload)).ljust(28, b"\0")
        header += struct.pack("<I", arch).ljust(12, b"\0") + struct.pack("<Q", flags)
        body += header.ljust(64, b"\0") + payload
    return struct.pack("<IHHQ", images.FATBIN_MAGIC, 1, 16, len(body)) + body


def _ptr(data: bytes) -> tuple[int, ctypes.Array]:
    buf = ctypes.create_string_buffer(data)
    return ctypes.addressof(buf), buf


def test_ptx_text_is_read_to_its_nul() -> None:
    addr, _keep = _ptr(PTX)
    assert images.read_image(addr) == PTX


def test_fatbin_ptx_entry_is_extracted() -> None:
    fat = _fatbin([(2, 80, 0, b"\x7fELF" + b"\0" * 12), (1, 70, 0, b"old ptx\0"), (1, 80, 0, PTX + b"\0\0")])
    addr, _keep = _ptr(fat)
    assert images.read_image(addr) == PTX


def test_fatbin_without_ptx_is_no_binary_for_gpu() -> None:
    addr, _keep = _ptr(_fatbin([(2, 80, 0, b"\x7fELF" + b"\0" * 12)]))
    with pytest.raises(CudaError) as err:
        images.read_image(addr)
    assert err.value.name == "CUDA_ERROR_NO_BINARY_FOR_GPU"


def test_compressed_ptx_says_so() -> None:
    addr, _keep = _ptr(_fatbin([(1, 80, 0x2000, b"\x01\x02compressed")]))
    with pytest.raises(CudaError, match="compressed"):
        images.read_image(addr)


def test_cubin_is_refused() -> None:
    addr, _keep = _ptr(b"\x7fELF" + b"\0" * 60)
    with pytest.raises(CudaError) as err:
        images.read_image(addr)
    assert err.value.name == "CUDA_ERROR_NO_BINARY_FOR_GPU"


def test_merge_ptx_puts_definitions_first_and_drops_resolved_externs() -> None:
    main = (
        ".version 8.0\n.target sm_80\n.address_size 64\n"
        ".extern .func  (.param .b32 func_retval0) helper\n(\n\t.param .b32 helper_param_0\n)\n;\n"
        ".extern .func other ();\n"
        ".visible .entry k() { ret; }\n"
    )
    lib = (
        ".version 7.8\n.target sm_80\n.address_size 64\n"
        ".visible .func  (.param .b32 func_retval0) helper(\n\t.param .b32 helper_param_0\n)\n{ ret; }\n"
    )
    merged = merge_ptx([main, lib])
    assert merged.count(".version") == 1 and ".version 8.0" in merged
    assert ".extern .func  (.param .b32 func_retval0) helper" not in merged
    assert ".extern .func other" in merged  # not defined anywhere: stays extern
    assert merged.index(".func  (.param .b32 func_retval0) helper(") < merged.index(".entry k")
