"""Another library's device array as a torch tensor without a copy, and a tensor's memory for another library
(NOTE [device memory aliases] in gpud/aten_alias.py, shim/torch/dlpack.py): one memory under two names, charged
once, kept while it is used, and only the session's own allocations."""

from __future__ import annotations

import numpy as np
import pytest

from .conftest import ROOT, check, run_wooly

SCRIPTS = ROOT / "tests" / "integration" / "torch" / "scripts"
EXPECTED = [
    "alias cuda:0 torch.float32 5.0 True",
    "torch writes [4.0, 6.0]",  # the tensor op ran before the driver copy that followed it
    "driver writes [-1.0, -1.0, 4.0]",
    "charged once True 0",
    "strided torch.Size([3, 2]) (1, 6) True",
    "int32 view torch.int32 True",
    "copies [-1.0, -1.0, 4.0, 6.0] torch.float64 [-1.0, -1.0, 4.0, 6.0] 48",
    "after free 20.0 True",  # cuMemFree under a live tensor: pages and charge stay
    "released True",  # ... until the tensor goes
    "other refused 0x{other:x} is not a device address of this context",
    "wild refused 0x70000000 is not a device address of this context",
    "overrun refused range 0x",
    "odd refused the data is 2 bytes into its allocation, not a multiple of torch.float32's size",
    # the other way: a tensor's (a view's) memory at a driver address, shared both ways, charged once
    "export (512,) None <f4 512.0",
    "both [510.0, 511.0, 0.5, 7.0, 0.5, 0.5] [0.5, 7.0]",
    "once True True True",
    "grad Can't get __cuda_array_interface__ on Variable that requires grad",
    "capsule -3.0 (2, 0)",
    "export freed True",  # the allocation made for it went with the tensor's storage
    "OK",
]


@pytest.mark.parametrize("executors", [True, False], ids=["executor", "in-gpud"])
def test_driver_memory_as_a_tensor(executors: bool) -> None:
    from shim.client import Connection
    from shim.driver import Driver
    from woolyhv.launcher import start_gpud

    extra = [] if executors else ["--no-executors"]
    endpoint, proc = start_gpud(log_level="warning", extra_args=extra)
    try:
        victim = Driver(Connection(endpoint, tenant="victim"))
        other = victim.mem_alloc(4096)
        victim.memcpy_htod(other, np.full(1024, 1234.5, dtype=np.float32))
        out = check(run_wooly(endpoint, SCRIPTS / "dlpack_alias.py", env={"OTHER_PTR": str(other)}, timeout=180))
        assert np.frombuffer(victim.memcpy_dtoh(other, 4096), dtype=np.float32).tolist() == [1234.5] * 1024
        victim.conn.close()
    finally:
        proc.terminate()
        proc.wait(10)
    lines = out.splitlines()
    assert len(lines) == len(EXPECTED) and all(
        got.startswith(want.format(other=other)) for got, want in zip(lines, EXPECTED, strict=True)
    ), out
    assert "overruns the allocation" in lines[11], out


def test_hostile_lending_calls_get_cuda_errors(gpud: str) -> None:
    """Malformed ``wooly.alias_device``/``wooly.export_device`` calls, the executor's own form of them, and either
    inside a batch: each is a CUDA error naming what is wrong, and gpud goes on serving."""
    from gpud.errors import CudaError, codes
    from proto import aten as W
    from proto import messages as m
    from shim.client import Connection
    from shim.driver import Driver

    d = Driver(Connection(gpud, tenant="mallory"))
    try:
        p = d.mem_alloc(4096)
        bad = [
            [],  # nothing
            ["0x1000", 16, "float32", [4], [1]],  # a pointer that is no integer
            [p, -1, "float32", [4], [1]],  # negative size
            [p, 16, "float32", [4], [1, 1]],  # shape and stride differ
            [p, 16, "float32", [1] * 100, [1] * 100],  # too many dimensions
            [0, 0, p, "float32", [4], [1], 1],  # the executor's own form, sent by a client
            [p, 16, "no_such_dtype", [4], [1]],
            [p, 1 << 40, "float32", [1 << 38], [1]],  # past the allocation
        ]
        for args in bad:
            with pytest.raises(CudaError) as err:
                d.conn.call(m.AtenCall(op=[W.OP_ALIAS_DEVICE, args, {}, []]))
            assert err.value.code == codes.INVALID_VALUE, (args, err.value)
        for args in ([], [5], ["x", 0, 1]):
            with pytest.raises(CudaError) as err:
                d.conn.call(m.AtenCall(op=[W.OP_EXPORT_DEVICE, args, {}, []]))
            assert err.value.code == codes.INVALID_VALUE, (args, err.value)
        for op in (W.OP_ALIAS_DEVICE, W.OP_EXPORT_DEVICE):
            d.conn.post(m.AtenBatch(ops=[[op, [0, 0, 4096, "float32", [4], [1], 1], {}, [7]]]))
            with pytest.raises(CudaError) as err:
                d.conn.call(m.AtenCall(op=[W.OP_SYNC, [], {}, []]))
            assert err.value.code == codes.NOT_PERMITTED and "is a synchronous call" in str(err.value)
        assert d.mem_get_info()[1] > 0  # still serving
    finally:
        d.conn.close()
