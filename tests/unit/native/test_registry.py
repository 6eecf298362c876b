"""Resolution rules of the native face: (base name, version) and exported symbols -> implementation."""

from __future__ import annotations

import pytest

from shim.native import registry

# importing the api modules registers their implementations
pytest.importorskip("shim.native.cu_device")
import shim.native.cu_launch  # noqa: E402,F401
import shim.native.cu_memory  # noqa: E402,F401
import shim.native.cu_module  # noqa: E402,F401
import shim.native.cu_stream  # noqa: E402,F401
import shim.native.nvml  # noqa: E402,F401


def test_base_name_and_version_pick_the_signature() -> None:
    status, entry = registry.lookup("cuMemAlloc", 3020)
    assert status == 1 and entry is not None and 3020 in entry.versions
    # a newer request for an unchanged signature still resolves to it
    assert registry.lookup("cuMemAlloc", 12090)[1] is entry
    # the 32-bit v2000 signature is a different function: not answered by the 64-bit one
    assert registry.lookup("cuMemAlloc", 2000) == (0, None)


def test_versioned_signatures_are_distinct() -> None:
    v2 = registry.lookup("cuCtxCreate", 3020)[1]
    v4 = registry.lookup("cuCtxCreate", 12050)[1]
    assert v2 is not None and v4 is not None and v2 is not v4
    assert registry.lookup("cuCtxCreate", 11040) == (0, None)  # v3 (affinity params) not implemented


def test_exported_symbol_names() -> None:
    assert registry._parse_symbol("cuMemAlloc_v2") == ("cuMemAlloc", 3020)
    assert registry._parse_symbol("cuMemAlloc") == ("cuMemAlloc", 2000)
    assert registry._parse_symbol("cuCtxCreate_v4") == ("cuCtxCreate", 12050)
    assert registry._parse_symbol("cuMemcpyHtoDAsync_v2_ptsz") == ("cuMemcpyHtoDAsync", 3020)
    assert registry._parse_symbol("cuLaunchKernel_ptsz") == ("cuLaunchKernel", 4000)
    assert registry.lookup("cuMemcpyHtoD_v2", -1)[0] == 1
    assert registry.lookup("cuStreamSynchronize_ptsz", -1)[0] == 1


def test_unknown_and_unsupported() -> None:
    assert registry.lookup("cuNoSuchFunction", 12000) == (-1, None)
    assert registry.lookup("cuGraphCreate", 10000) == (0, None)  # a real entry point, not implemented
    assert registry.lookup("nvmlDeviceGetCount_v2", -1)[0] == 1
    assert registry.lookup("nvmlDeviceGetTemperature", -1) == (0, None)


def test_every_implementation_names_a_real_signature() -> None:
    registry._load_versions()
    for name, entries in registry._ENTRIES.items():
        for e in entries:
            if e.library:  # vendor libraries: exact exported names, no signature versions
                continue
            assert name in registry._VERSIONS, name
            for v in e.versions:
                assert v in registry._VERSIONS[name], (name, v, registry._VERSIONS[name])
