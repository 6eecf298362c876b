"""proto/rand.py, NOTE [random numbers]: the numbers are named by seed and position; distributions as asked."""

from __future__ import annotations

import numpy as np
import pytest

from proto import messages as m
from proto.errors import CudaError
from proto.rand import check, generate_numpy


def _gen(dist: str, dtype: str, n: int, **kw: float | int) -> np.ndarray:
    out = np.zeros(n, {"u32": np.uint32, "f32": np.float32, "f64": np.float64}[dtype])
    msg = m.RandGenerate(dist=dist, dtype=dtype, out=out.ctypes.data, n=n, **kw)
    check(msg)
    generate_numpy(msg)
    return out


def test_seed_and_position_name_the_numbers() -> None:
    a = _gen("uniform", "f64", 1000, seed=7, offset=0)
    assert (a == _gen("uniform", "f64", 1000, seed=7, offset=0)).all()
    assert not np.isin(_gen("uniform", "f64", 1000, seed=7, offset=1000), a).any()  # the next call: other numbers
    assert not (a == _gen("uniform", "f64", 1000, seed=8, offset=0)).all()
    assert 0 < a.min() and a.max() <= 1  # (0, 1], as cuRAND's uniform


def test_the_distributions_asked_for() -> None:
    n = _gen("normal", "f32", 100000, seed=1, mean=-2.0, stddev=0.5)
    assert n.dtype == np.float32 and abs(n.mean() + 2) < 0.01 and abs(n.std() - 0.5) < 0.01
    ln = _gen("lognormal", "f64", 100000, seed=2, mean=1.0, stddev=0.25)
    assert abs(np.log(ln).mean() - 1) < 0.01 and abs(np.log(ln).std() - 0.25) < 0.01
    p = _gen("poisson", "u32", 100000, seed=3, lam=4.0)
    assert abs(p.mean() - 4) < 0.05
    b = _gen("bits", "u32", 100000, seed=4)
    assert b.max() > (1 << 31) and abs(b.mean() / (1 << 32) - 0.5) < 0.01


@pytest.mark.parametrize(
    "kw",
    [
        {"dist": "normal", "dtype": "u32"},
        {"dist": "normal", "dtype": "f32", "stddev": 0.0},
        {"dist": "normal", "dtype": "f32", "stddev": float("nan")},
        {"dist": "poisson", "dtype": "u32", "lam": -1.0},
    ],
)
def test_what_curand_refuses(kw: dict) -> None:  # type: ignore[type-arg]
    with pytest.raises(CudaError):
        check(m.RandGenerate(out=1, n=2, **kw))
