"""NOTE [sobol]: the direction vectors and points of cuRAND's 32-bit Sobol face, against SciPy's unscrambled Sobol."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import qmc

from shim.native import sobol


@pytest.mark.parametrize("dims", [1, 2, 7, 1111])
def test_points_equal_scipys(dims: int) -> None:
    ref = qmc.Sobol(dims, scramble=False, bits=32)
    ref.fast_forward(37)
    want = ref.random(300)  # (points, dims), x / 2^32
    got = sobol.points(dims, 37, 300).T.astype(np.float64) / 2.0**32
    assert np.array_equal(got, want)


def test_table_shape_and_first_dimension() -> None:
    v = sobol.direction_vectors()
    assert v.shape == (20000, 32) and v.dtype == np.uint32 and v.flags.c_contiguous
    assert list(v[0]) == [1 << (31 - k) for k in range(32)]
    assert (v[1:, 0] == 1 << 31).all()  # m_1 = 1 in every dimension


def test_bad_ranges() -> None:
    with pytest.raises(ValueError, match="dimensions"):
        sobol.points(0, 0, 1)
    with pytest.raises(ValueError, match="outside"):
        sobol.points(1, (1 << 32) - 1, 2)
