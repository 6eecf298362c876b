"""The fidelity harness reads PyTorch's own CPU-vs-CUDA verdicts from its test database (tests/torch_fidelity)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402
from torch.testing._internal.common_modules import module_db  # noqa: E402

from tests.torch_fidelity.worker import compare, parity_rules  # noqa: E402

MODULE_TEST = ("TestModule", "test_cpu_gpu_parity")
OP_TEST = ("TestCommon", "test_compare_cpu")


def _module(name: str):
    return next(e for e in module_db if e.name == name)


def _op(name: str, variant: str = ""):
    return next(e for e in op_db if e.name == name and e.variant_test_name == variant)


def test_module_tolerance_override_and_expected_failure():
    lce = _module("nn.LinearCrossEntropyLoss")
    assert parity_rules(lce, *MODULE_TEST, torch.float16) == ((0.04, 0.3), False)
    assert parity_rules(lce, *MODULE_TEST, torch.bfloat16) == (None, True)
    assert parity_rules(lce, *MODULE_TEST, torch.float32) == (None, False)


def test_op_expected_failure_only_where_pytorch_marks_it():
    assert parity_rules(_op("as_strided", "partial_views"), *OP_TEST, torch.float32) == (None, True)
    assert parity_rules(_op("add"), *OP_TEST, torch.float32) == (None, False)
    # the marks are the parity test's: another test of the same class is not affected
    assert parity_rules(_op("as_strided", "partial_views"), "TestCommon", "test_no_such_test", torch.float32) == (
        None,
        False,
    )


def test_compare_uses_the_given_tolerance():
    a = torch.tensor([1.0, 2.0], dtype=torch.float16)
    b = a + 0.02
    with pytest.raises(AssertionError):
        compare(a, b)
    compare(a, b, tol=(0.04, 0.3))
