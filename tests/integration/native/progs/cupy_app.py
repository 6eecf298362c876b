"""A CuPy program as CuPy users write them; prints OK when every result matches NumPy."""

import cupy as cp
import numpy as np

a = cp.arange(12, dtype=cp.float64).reshape(3, 4)
h = np.arange(12, dtype=np.float64).reshape(3, 4)
assert np.allclose(cp.asnumpy(a.sum(axis=0)), h.sum(axis=0))
assert float(a.mean()) == h.mean() and float(a.max()) == 11.0
assert np.allclose(cp.asnumpy(cp.sin(a) * 2 + a**2), np.sin(h) * 2 + h**2)
v = cp.asarray(np.random.default_rng(0).integers(0, 1000, 500))
assert (cp.asnumpy(cp.sort(v)) == np.sort(cp.asnumpy(v))).all()  # thrust: a lazily translated module
# more than one tile of CUB's onesweep radix sort: a register past its shared window (NOTE [confined windows])
d = np.random.default_rng(5).random(10000) * 100
assert (cp.asnumpy(cp.sort(cp.asarray(d))) == np.sort(d)).all()
assert (cp.asnumpy(cp.unique(cp.asarray(np.round(d)))) == np.unique(np.round(d))).all()
# CuPy's warp-synchronous selection kernels, lanes sharing steps through memory (NOTE [implicit warp synchrony])
r = np.random.default_rng(7).random((3, 3, 256))
ap = np.take_along_axis(r, cp.asnumpy(cp.argpartition(cp.asarray(r), 20)), axis=-1)
assert (ap[..., 20] == np.sort(r)[..., 20]).all() and (ap[..., :20] <= ap[..., 20:21]).all()
assert (ap[..., 21:] >= ap[..., 20:21]).all()
assert float(cp.partition(cp.asarray(d), 5000)[5000]) == np.sort(d)[5000]
assert int(cp.argmax(v)) == int(np.argmax(cp.asnumpy(v)))
mul = cp.ElementwiseKernel("float32 x, float32 y", "float32 z", "z = x * y + 1", "mul1")
assert (cp.asnumpy(mul(cp.ones(4, cp.float32), cp.full(4, 3, cp.float32))) == 4).all()
twice = cp.RawKernel(
    r"""extern "C" __global__ void twice(float *a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) a[i] *= 2; }""",
    "twice",
)
w = cp.arange(300, dtype=cp.float32)
twice((3,), (128,), (w, cp.int32(300)))
assert (cp.asnumpy(w) == np.arange(300) * 2).all()
sumsq = cp.ReductionKernel("T x", "T y", "x * x", "a + b", "y = a", "0", "sumsq")
assert float(sumsq(cp.arange(5, dtype=cp.float32))) == 30.0
s = cp.cuda.Stream(non_blocking=True)
e = cp.cuda.Event()
with s:
    z = cp.arange(1000) * 5
    e.record()
e.synchronize()
assert int(z[-1]) == 4995
x = cp.linspace(0, 1, 7)
assert np.allclose(cp.asnumpy(cp.cumsum(x)), np.cumsum(np.linspace(0, 1, 7)))
# cuBLAS through the stand-in (NOTE [vendor libraries]): 2-D, batched, float64 and float32
p = np.random.default_rng(1).standard_normal((33, 17))
q = np.random.default_rng(2).standard_normal((17, 9))
assert np.allclose(cp.asnumpy(cp.asarray(p) @ cp.asarray(q)), p @ q)
r = np.random.default_rng(3).standard_normal((4, 5, 6)).astype(np.float32)
t = np.random.default_rng(4).standard_normal((4, 6, 3)).astype(np.float32)
assert np.allclose(cp.asnumpy(cp.matmul(cp.asarray(r), cp.asarray(t))), r @ t, atol=1e-5)
# cublas<t>geam (CuPy's layout changes go through it), every type, with a transpose
for dt in (np.float32, np.float64, np.complex64, np.complex128):
    m0 = (np.arange(12).reshape(3, 4) * (1 - 2j if dt in (np.complex64, np.complex128) else 1)).astype(dt)
    fm = cp.asfortranarray(cp.asarray(m0))
    assert fm.flags.f_contiguous and (cp.asnumpy(fm) == m0).all()
    assert (cp.asnumpy(cp.ascontiguousarray(fm.T)) == m0.T).all()
print("OK")
