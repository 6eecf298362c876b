"""One shard of the fidelity run, inside a ``wooly run`` process (the PyTorch face active).

For each OpInfo (``op_db``) or ModuleInfo (``module_db``) entry of the shard and each requested
dtype the entry supports, every sample input is run twice: on the host CPU (the reference) and on
``"cuda"`` (through the torch face, computed on gpud). Outputs are compared with
``torch.testing.assert_close`` (dtype-based tolerances, NaNs equal); with ``--grad`` and a
floating dtype, gradients of the summed outputs with respect to every input (and, for modules,
every parameter) are compared too. One JSON line per sample goes to ``--out``:

    {"kind": "op", "name": "add", "dtype": "float32", "i": 3, "status": "pass"|"mismatch"|"error"|"skip", "msg": ...}

``mismatch`` is a silently wrong result (the remote run succeeded and differs) and is what the
suite must never show; ``error`` is an exception raised by the remote run (it names the op);
``skip`` is a sample whose CPU reference itself failed, or an op whose values are random.

The comparison is PyTorch's own CPU-versus-CUDA test (``TestCommon.test_compare_cpu`` for an OpInfo,
``TestModule.test_cpu_gpu_parity`` for a ModuleInfo), so the entry's decorators for that test on
``cuda`` apply as they do in PyTorch's CI on a GPU (``parity_rules``): a ``toleranceOverride`` for
the dtype replaces the default tolerances, and a sample of an entry the database marks
``expectedFailure`` for that test and dtype (the GPU kernel takes another numerical path than the
CPU one: ``nn.LinearCrossEntropyLoss`` in bfloat16) that differs is ``xfail``, counted apart, never
as a pass.
"""

from __future__ import annotations

import argparse
import copy
import json
import signal
import sys
import time
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

# Ops whose values are random draws: compared by shape and dtype only (the device's generator is
# not the host's, as on a real GPU).
RANDOM = (
    "rand",
    "normal",
    "bernoulli",
    "dropout",
    "multinomial",
    "uniform",
    "exponential",
    "cauchy",
    "geometric",
    "log_normal",
    "poisson",
    "randint",
    "randn",
    "randperm",
    "empty",
    "new_empty",
    "empty_like",
    "empty_strided",
    "empty_permuted",
)


class _Timeout(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Timeout("sample timed out")


# Ops whose first positional argument PyTorch requires on the CPU even for a CUDA input; OpInfo builds it with
# torch.tensor() on the default device (PyTorch's own CUDA tests thus pass it from the CPU), so it stays there.
HOST_ARGS = frozenset({"tensor_split"})


def _is_random(name: str) -> bool:
    return any(r in name for r in RANDOM)


def to_cuda(x: Any) -> Any:
    moved: dict[int, torch.Tensor] = {}  # a tensor passed twice (input and target: nn.KLDivLoss) moves once

    def move(t: Any) -> Any:
        if isinstance(t, torch.Tensor):
            r = moved.get(id(t))
            if r is None:
                r = moved[id(t)] = t.detach().to("cuda")
                if t.requires_grad:
                    r.requires_grad_(True)
            return r
        return t

    return tree_map(move, x)


def to_host(x: Any) -> Any:
    return tree_map(lambda t: t.detach().cpu() if isinstance(t, torch.Tensor) else t, x)


Tol = tuple[float, float] | None  # (atol, rtol) of a toleranceOverride, None: assert_close's defaults for the dtype


def parity_rules(entry: Any, cls_name: str, test_name: str, dtype: torch.dtype) -> tuple[Tol, bool]:
    """The tolerance override and the expected-failure mark PyTorch's database gives ``test_name`` (its
    CPU-versus-CUDA test) on cuda for ``dtype``: ``((atol, rtol) or None, expected_failure)``."""
    tol: Tol = None
    xfail = False
    for info in getattr(entry, "decorators", ()) or ():
        if not hasattr(info, "is_active") or not info.is_active(cls_name, test_name, "cuda", dtype, {}):
            continue
        for dec in info.decorators:
            override = getattr(dec, "d", None)
            if isinstance(override, dict) and dtype in override:
                given = override[dtype]
                if isinstance(given, (int, float)):  # a precisionOverride: an absolute tolerance alone
                    tol = (float(given), torch.testing._comparison.default_tolerances(dtype)[0])
                else:
                    tol = (float(given.atol), float(given.rtol))
            elif (
                getattr(dec, "__name__", "") == "expectedFailure" and getattr(dec, "__module__", "") == "unittest.case"
            ):
                xfail = True
    return tol, xfail


def compare(ref: Any, got: Any, *, shapes_only: bool = False, tol: Tol = None) -> None:
    rl, rs = tree_flatten(ref)
    gl, gs = tree_flatten(got)
    if rs != gs and len(rl) != len(gl):
        raise AssertionError(f"output structure differs: {rs} vs {gs}")
    for a, b in zip(rl, gl, strict=False):
        if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
            if not isinstance(b, torch.Tensor) or not isinstance(a, torch.Tensor):
                raise AssertionError(f"tensor vs {type(b).__name__}")
            if b.device.type == "cpu" and a.device.type == "cpu":
                pass
            if shapes_only:
                if a.shape != b.shape or a.dtype != b.dtype:
                    raise AssertionError(f"shape/dtype {tuple(a.shape)}/{a.dtype} vs {tuple(b.shape)}/{b.dtype}")
                continue
            torch.testing.assert_close(
                b,
                a,
                equal_nan=True,
                check_device=False,
                check_stride=False,
                check_layout=False,
                atol=tol[0] if tol is not None else None,
                rtol=tol[1] if tol is not None else None,
            )
        elif isinstance(a, float) and isinstance(b, float):
            torch.testing.assert_close(b, a, equal_nan=True)
        elif a != b and not (a is None or b is None):
            raise AssertionError(f"value {a!r} vs {b!r}")


def _leaves_requiring_grad(x: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(x)[0] if isinstance(t, torch.Tensor) and t.requires_grad]


def _grads(out: Any, inputs: list[torch.Tensor]) -> list[Any]:
    outs = [
        o
        for o in tree_flatten(out)[0]
        if isinstance(o, torch.Tensor) and o.requires_grad and (o.is_floating_point() or o.is_complex())
    ]
    if not outs or not inputs:
        return []
    total = sum(o.abs().sum() if o.is_complex() else o.sum() for o in outs)
    return list(torch.autograd.grad(total, inputs, allow_unused=True))


def _record(out: Any, rec: dict[str, Any]) -> None:
    out.write(json.dumps(rec) + "\n")
    out.flush()


def _message(exc: BaseException) -> str:
    msg = f"{type(exc).__name__}: {exc}".strip()
    return msg.splitlines()[0][:300] if msg else type(exc).__name__


def _snapshot(x: Any) -> Any:
    """Host copies of the tensors in ``x`` taken before the reference runs (some samples write into their
    inputs: ``embedding_bag(max_norm=...)`` renormalises its weight), aliasing kept."""
    memo: dict[int, torch.Tensor] = {}

    def keep(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        c = memo.get(id(t))
        if c is None:
            c = memo[id(t)] = t.detach().clone()
            if t.requires_grad:
                c.requires_grad_(True)
        return c

    return tree_map(keep, x)


def _against_reference(
    ref: Any,
    ref_grads: list[Any],
    remote: Any,
    timeout_s: float,
    random: bool,
    grad: bool,
    rules: tuple[Tol, bool] = (None, False),
) -> tuple[str, str]:
    """Run ``remote() -> (output, grads)`` on cuda under a timeout and compare it with the reference."""
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        got, got_grads = remote()
        got_h, grads_h = to_host(got), to_host(got_grads)
    except _Timeout:
        return "error", f"timeout after {timeout_s:g} s"
    except Exception as exc:  # noqa: BLE001
        return "error", _message(exc)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    tol, xfail = rules
    try:
        compare(to_host(ref), got_h, shapes_only=random, tol=tol)
        if grad and not random:
            compare(to_host(ref_grads), grads_h, tol=tol)
    except AssertionError as exc:
        if xfail:
            return "xfail", "PyTorch's database expects this CPU/CUDA comparison to fail: " + _message(exc)
        return "mismatch", _message(exc)
    return "pass", ""


def run_sample(
    fn: Any, sample: Any, name: str, grad: bool, timeout_s: float, rules: tuple[Tol, bool] = (None, False)
) -> tuple[str, str]:
    """(status, message) of one sample: reference on the host, the same on 'cuda'."""
    random = _is_random(name)
    inputs = _snapshot((sample.input, sample.args, sample.kwargs))
    try:
        torch.manual_seed(0)
        ref = fn(sample.input, *sample.args, **sample.kwargs)
        ref_grads = _grads(ref, _leaves_requiring_grad((sample.input, sample.args, sample.kwargs))) if grad else []
    except Exception as exc:  # noqa: BLE001 - the reference itself refuses this sample
        return "skip", "reference: " + _message(exc)

    def remote() -> tuple[Any, list[Any]]:
        rinput, rargs, rkwargs = to_cuda(inputs)
        if name in HOST_ARGS and rargs and isinstance(inputs[1][0], torch.Tensor):
            rargs = (inputs[1][0], *rargs[1:])  # an argument PyTorch's CUDA kernels want on the CPU
        torch.manual_seed(0)
        got = fn(rinput, *rargs, **rkwargs)
        return got, (_grads(got, _leaves_requiring_grad((rinput, rargs, rkwargs))) if grad and not random else [])

    return _against_reference(ref, ref_grads, remote, timeout_s, random, grad, rules)


def run_ops(names: list[str], dtypes: list[torch.dtype], grad: bool, out: Any, timeout_s: float, limit: int) -> None:
    from torch.testing._internal.common_methods_invocations import op_db

    wanted = set(names)
    for op in op_db:
        full = op.name + ("." + op.variant_test_name if op.variant_test_name else "")
        if full not in wanted:
            continue
        _record(out, {"event": "start", "name": full})
        for dt in dtypes:
            if dt not in op.supported_dtypes("cpu"):
                continue
            use_grad = (
                grad
                and op.supports_autograd
                and dt in (torch.float32, torch.complex64)
                and dt in op.supported_backward_dtypes("cpu")
            )
            try:
                samples = list(op.sample_inputs("cpu", dt, requires_grad=use_grad))
            except Exception as exc:  # noqa: BLE001
                _record(
                    out,
                    {
                        "kind": "op",
                        "name": full,
                        "dtype": str(dt)[6:],
                        "i": -1,
                        "status": "skip",
                        "msg": "samples: " + _message(exc),
                    },
                )
                continue
            rules = parity_rules(op, "TestCommon", "test_compare_cpu", dt)
            for i, sample in enumerate(samples[:limit]):
                t0 = time.perf_counter()
                status, msg = run_sample(op, sample, full, use_grad, timeout_s, rules)
                _record(
                    out,
                    {
                        "kind": "op",
                        "name": full,
                        "dtype": str(dt)[6:],
                        "i": i,
                        "status": status,
                        "msg": msg,
                        "s": round(time.perf_counter() - t0, 4),
                    },
                )
        _record(out, {"event": "end", "name": full})


class _ModuleCall:
    def __init__(self, module: torch.nn.Module) -> None:
        self.module = module

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)


def run_module_sample(
    mi: Any, minput: Any, training: bool, grad: bool, timeout_s: float, rules: tuple[Tol, bool] = (None, False)
) -> tuple[str, str]:
    cargs, ckw = minput.constructor_input.args, minput.constructor_input.kwargs
    fargs, fkw = minput.forward_input.args, minput.forward_input.kwargs
    inputs = _snapshot((fargs, fkw))
    try:
        torch.manual_seed(0)
        m = mi.module_cls(*cargs, **ckw)
        m.train(training)
        remote_m = copy.deepcopy(m)
        torch.manual_seed(1)
        ref = m(*fargs, **fkw)
        params = [p for p in m.parameters() if p.requires_grad]
        ref_grads = _grads(ref, _leaves_requiring_grad((fargs, fkw)) + params) if grad else []
    except Exception as exc:  # noqa: BLE001
        return "skip", "reference: " + _message(exc)

    def remote() -> tuple[Any, list[Any]]:
        rm = remote_m.to("cuda")
        rargs, rkw = to_cuda(inputs)
        torch.manual_seed(1)
        got = rm(*rargs, **rkw)
        rparams = [p for p in rm.parameters() if p.requires_grad]
        return got, (_grads(got, _leaves_requiring_grad((rargs, rkw)) + rparams) if grad else [])

    random = training and any(r in mi.name.lower() for r in ("dropout", "rrelu"))
    return _against_reference(ref, ref_grads, remote, timeout_s, random, grad, rules)


def run_modules(
    names: list[str], dtypes: list[torch.dtype], grad: bool, out: Any, timeout_s: float, limit: int
) -> None:
    from torch.testing._internal.common_modules import module_db

    wanted = set(names)
    for mi in module_db:
        if mi.name not in wanted:
            continue
        _record(out, {"event": "start", "name": mi.name})
        for dt in dtypes:
            if dt not in mi.dtypes:
                continue
            use_grad = grad and dt.is_floating_point
            rules = parity_rules(mi, "TestModule", "test_cpu_gpu_parity", dt)
            for training in (True, False):
                try:
                    inputs = mi.module_inputs_func(
                        mi, device="cpu", dtype=dt, requires_grad=use_grad, training=training
                    )
                except Exception as exc:  # noqa: BLE001
                    _record(
                        out,
                        {
                            "kind": "module",
                            "name": mi.name,
                            "dtype": str(dt)[6:],
                            "i": -1,
                            "status": "skip",
                            "msg": "samples: " + _message(exc),
                        },
                    )
                    continue
                for i, minput in enumerate(inputs[:limit]):
                    if minput.forward_input is None:
                        continue
                    t0 = time.perf_counter()
                    status, msg = run_module_sample(mi, minput, training, use_grad, timeout_s, rules)
                    _record(
                        out,
                        {
                            "kind": "module",
                            "name": mi.name,
                            "dtype": str(dt)[6:],
                            "i": i + (0 if training else 1000),
                            "status": status,
                            "msg": msg,
                            "s": round(time.perf_counter() - t0, 4),
                        },
                    )
        _record(out, {"event": "end", "name": mi.name})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", choices=("op", "module"), required=True)
    ap.add_argument("--names", required=True, help="file with one entry name a line")
    ap.add_argument("--dtypes", default="float32")
    ap.add_argument("--grad", action="store_true")
    ap.add_argument("--out", required=True)
    ap.add_argument("--timeout", type=float, default=20.0)
    ap.add_argument("--limit", type=int, default=1000, help="samples per entry and dtype")
    a = ap.parse_args(argv)
    signal.signal(signal.SIGALRM, _alarm)
    import warnings

    warnings.simplefilter("ignore")
    names = [n.strip() for n in open(a.names) if n.strip()]
    dtypes = [getattr(torch, d) for d in a.dtypes.split(",")]
    with open(a.out, "a") as out:
        if a.kind == "op":
            run_ops(names, dtypes, a.grad, out, a.timeout, a.limit)
        else:
            run_modules(names, dtypes, a.grad, out, a.timeout, a.limit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
