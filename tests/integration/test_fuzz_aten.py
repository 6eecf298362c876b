"""The ATen path fuzzed against a real gpud: ATen calls recorded from PyTorch's own OpInfo samples, sent as a
hostile client would, mutated (index tensors pointing anywhere, dtypes swapped, integer arguments bent,
arguments dropped or added). Every reply is a value or a CUDA error; gpud never dies and keeps serving.

Bounded in time (``FUZZ_SECONDS``) and seeded (``WOOLY_FUZZ_SEED``), so a failure can be replayed.
"""

from __future__ import annotations

import os
import random
import time
import warnings
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from proto import aten as W  # noqa: E402
from proto.errors import CudaError  # noqa: E402
from tests.conftest import connect, start  # noqa: E402

FUZZ_SECONDS = float(os.environ.get("WOOLY_FUZZ_SECONDS", "45"))
SEED = int(os.environ.get("WOOLY_FUZZ_SEED", "20261203"))
_E = W.encoder()
_INTS = (-1, -7, 0, 3, 64)  # bent integer arguments: never sizes large enough to exhaust the host by themselves


def recorded_calls(rng: random.Random, n_ops: int) -> list[tuple[Any, tuple, dict]]:
    """ATen calls (overload, args, kwargs) that OpInfo samples make on the CPU."""
    from torch.testing._internal.common_methods_invocations import op_db
    from torch.utils._python_dispatch import TorchDispatchMode

    calls: list[tuple[Any, tuple, dict]] = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            calls.append((func, args, dict(kwargs or {})))
            return func(*args, **(kwargs or {}))

    warnings.simplefilter("ignore")
    for op in rng.sample(list(op_db), n_ops):
        try:
            sample = next(iter(op.sample_inputs("cpu", rng.choice([torch.float32, torch.int64]))))
            with Record():
                op(sample.input, *sample.args, **sample.kwargs)
        except Exception:  # noqa: BLE001 - samples a dtype does not support: nothing recorded worth keeping
            continue

    def dense(v: Any) -> bool:
        if isinstance(v, torch.Tensor):
            return v.layout == torch.strided
        return all(dense(x) for x in v) if isinstance(v, (list, tuple)) else True

    return [c for c in calls if c[0].namespace == "aten" and dense(c[1]) and dense(list(c[2].values()))]


class Client:
    """Speaks the aten wire directly (no shim checks): uploads, calls, handles of its own."""

    def __init__(self, endpoint: str) -> None:
        self.driver = connect(endpoint, timeout_s=30)
        self.conn = self.driver.conn
        self.next = 1 << 40

    def upload(self, t: torch.Tensor) -> Any:
        t = t.detach().resolve_conj().resolve_neg()
        h = self.next
        self.next += 1
        flat = t.clone(memory_format=torch.contiguous_format).reshape(-1)
        raw = flat.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        name = _E.dtype_name[t.dtype]
        self.conn.post(
            {"kind": "aten_batch", "rid": 0, "frame": 0, "ops": [[W.OP_UPLOAD, [0, name, list(t.shape)], {}, [h]]]},
            [raw],
        )
        return W.tensor_ref(h)

    def enc(self, v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            if v.dim() == 0:
                return _E.scalar_tensor(v)
            return self.upload(v)
        if isinstance(v, (list, tuple)):
            return [self.enc(x) for x in v]
        if isinstance(v, torch.dtype):
            return _E.dtype[v]
        if isinstance(v, torch.device):
            return _E.device_cuda
        if isinstance(v, torch.memory_format):
            return _E.memory_format[v]
        if isinstance(v, torch.layout):
            return _E.layout[v]
        if isinstance(v, complex):
            return _E.complex(v)
        if isinstance(v, torch.Generator):
            return _E.generator
        return v

    def call(self, name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        return self.conn.call({"kind": "aten_call", "rid": 0, "op": [name, args, kwargs, []], "frame": 0})


def mutate(rng: random.Random, args: tuple, kwargs: dict) -> tuple[list, dict]:
    def bend(v: Any) -> Any:
        if isinstance(v, torch.Tensor) and rng.random() < 0.5:
            if v.dtype == torch.int64 and v.numel():  # indices pointing anywhere
                return torch.tensor([rng.choice([-(1 << 40), -1, 1 << 20, 1 << 40]) for _ in range(v.numel())]).reshape(
                    v.shape
                )
            return v.to(rng.choice([torch.float64, torch.int32, torch.bool, torch.float16]))
        if type(v) is int and rng.random() < 0.5:
            return rng.choice(_INTS)
        if isinstance(v, (list, tuple)) and v and all(type(x) is int for x in v) and rng.random() < 0.3:
            return [rng.choice(_INTS) for _ in v]
        return v

    out = [bend(a) for a in args]
    kw = {k: bend(v) for k, v in kwargs.items()}
    r = rng.random()
    if r < 0.1 and out:
        out.pop(rng.randrange(len(out)))
    elif r < 0.2:
        out.append(rng.choice([1, torch.ones(2, 2), "x", None]))
    return out, kw


def test_aten_fuzz_never_takes_gpud_down() -> None:
    rng = random.Random(SEED)
    calls = recorded_calls(rng, 160)
    assert len(calls) > 100
    g = start("tcp", extra_args=["--cpu-memory", str(2 << 30)])
    try:
        client = Client(g.endpoint)
        deadline = time.monotonic() + FUZZ_SECONDS
        sent = errors = executor_deaths = 0
        while time.monotonic() < deadline:
            func, args, kwargs = rng.choice(calls)
            a, k = (list(args), dict(kwargs)) if rng.random() < 0.3 else mutate(rng, args, kwargs)
            try:
                client.call(str(func), client.enc(a), {n: client.enc(v) for n, v in k.items()})
            except CudaError as exc:
                errors += 1
                assert exc.name != "CUDA_ERROR_DEVICE_UNAVAILABLE", f"{func}: gpud stopped answering: {exc}"
                if "ATen executor" in exc.message:  # NOTE [executors]: this tenant's process died, not gpud
                    executor_deaths += 1
                    print(f"executor died on {func}: {exc.message[:200]}")
                    client.conn.close()
                    client = Client(g.endpoint)
            sent += 1
            assert g.proc.poll() is None, f"gpud died on {func} (seed {SEED}, call {sent})"
        print(f"fuzzed {sent} calls, {errors} errors, {executor_deaths} executor deaths")
        assert sent > 100 and 0 < errors < sent
        assert client.driver.mem_get_info()[1] > 0  # still serving
        client.conn.close()
    finally:
        g.stop()
