"""Sobol sequences for cuRAND's quasi-random face: direction vectors and the 32-bit generator.

NOTE [sobol]: cuRAND's ``CURAND_DIRECTION_VECTORS_32_JOEKUO6`` set is Joe and Kuo's direction numbers (search
criterion D(6)), for up to 20,000 dimensions. SciPy ships the same numbers (``new-joe-kuo-6.21201``: each
dimension's primitive polynomial and its initial direction numbers m_1..m_s); the 32 direction vectors of a
dimension are built from them here with Bratley and Fox's recurrence (dimension 0 is van der Corput's
sequence, v_k = 2^(31-k)). A generator's points come in Gray-code order, as the device API's ``curand()`` on a
``curandStateSobol32_t`` steps (x_0 = 0, x_{i+1} = x_i ^ v[trailing zeros of ~i]), so point i of dimension d
is the XOR of the direction vectors picked by the bits of gray(i) = i ^ (i >> 1). The host API returns
``n / dims`` consecutive points of dimension 0, then of dimension 1, and so on (cuRAND's
``CURAND_ORDERING_QUASI_DEFAULT``). Checked against SciPy's own unscrambled Sobol generator (tests); not
checked against a GPU's cuRAND here (no GPU was lent).
"""

from __future__ import annotations

import os

import numpy as np

DIMENSIONS = 20000  # cuRAND's JOEKUO6 set
BITS = 32

_vectors: np.ndarray | None = None


def direction_vectors() -> np.ndarray:
    """(20000, 32) uint32: the direction vectors of each dimension, computed once."""
    global _vectors
    if _vectors is None:
        import scipy.stats

        data = np.load(os.path.join(os.path.dirname(scipy.stats.__file__), "_sobol_direction_numbers.npz"))
        poly = data["poly"][:DIMENSIONS].astype(np.int64)
        m = data["vinit"][:DIMENSIONS].astype(np.uint64)
        v = np.zeros((DIMENSIONS, BITS), dtype=np.uint64)
        v[0] = 1 << (31 - np.arange(BITS, dtype=np.uint64))
        degree = np.array([int(p).bit_length() - 1 for p in poly])
        for s in range(1, int(degree.max()) + 1):
            rows = np.nonzero(degree == s)[0]
            rows = rows[rows > 0]
            if rows.size == 0:
                continue
            for k in range(min(s, BITS)):  # v_k = m_(k+1) * 2^(31-k)
                v[rows, k] = m[rows, k] << np.uint64(31 - k)
            for k in range(s, BITS):  # v_k = v_(k-s) ^ (v_(k-s) >> s) ^ sum of a_i v_(k-i)
                x = v[rows, k - s] ^ (v[rows, k - s] >> np.uint64(s))
                for i in range(1, s):
                    a = (poly[rows] >> (s - i)) & 1
                    x ^= np.where(a == 1, v[rows, k - i], np.uint64(0))
                v[rows, k] = x
        _vectors = np.ascontiguousarray(v.astype(np.uint32))
    return _vectors


def points(dims: int, offset: int, count: int) -> np.ndarray:
    """(dims, count) uint32: points offset .. offset+count-1 of each of the first ``dims`` dimensions."""
    if not 1 <= dims <= DIMENSIONS:
        raise ValueError(f"dimensions must be 1..{DIMENSIONS}, got {dims}")
    if offset < 0 or count < 0 or offset + count > 1 << BITS:
        raise ValueError(f"points {offset}..{offset + count} are outside a 32-bit Sobol sequence")
    v = direction_vectors()[:dims]
    i = np.arange(offset, offset + count, dtype=np.uint64)
    gray = i ^ (i >> np.uint64(1))
    out = np.zeros((dims, count), dtype=np.uint32)
    for k in range(BITS):
        bit = ((gray >> np.uint64(k)) & np.uint64(1)).astype(bool)
        if bit.any():
            out[:, bit] ^= v[:, k : k + 1]
    return out
