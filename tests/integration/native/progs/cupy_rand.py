"""cupy.random on the cuRAND stand-in (NOTE [random numbers]): the distributions asked for, reproducible by seed;
then cuRAND's C API directly, with arguments a real cuRAND refuses."""

import ctypes

import cupy as cp
import numpy as np

cp.random.seed(5)
a = cp.asnumpy(cp.random.rand(100000))
assert 0 < a.min() and a.max() < 1 and abs(a.mean() - 0.5) < 0.01, a.mean()
cp.random.seed(5)
assert (cp.asnumpy(cp.random.rand(100000)) == a).all()  # the same seed, the same numbers
assert not (cp.asnumpy(cp.random.rand(100000)) == a).all()  # the stream moves on
n = cp.asnumpy(cp.random.normal(3.0, 2.0, size=200001).astype(cp.float32))
assert abs(n.mean() - 3) < 0.05 and abs(n.std() - 2) < 0.05, (n.mean(), n.std())
assert cp.random.standard_normal(1001, dtype=cp.float32).dtype == cp.float32
ln = cp.asnumpy(cp.random.lognormal(0.0, 0.5, size=100000))
assert abs(np.log(ln).std() - 0.5) < 0.02
i = cp.asnumpy(cp.random.randint(0, 10, size=100000))
assert i.min() == 0 and i.max() == 9 and abs(np.bincount(i).std() / 10000) < 0.05
assert set(cp.asnumpy(cp.random.choice(5, size=1000, p=[0.1, 0.2, 0.3, 0.2, 0.2]))) <= set(range(5))

lib = ctypes.CDLL("libcurand.so.10")
g = ctypes.c_void_p()
# CURAND_STATUS_TYPE_ERROR: scrambled Sobol is not offered
assert lib.curandCreateGenerator(ctypes.byref(g), 202) == 103
assert lib.curandCreateGenerator(ctypes.byref(g), 100) == 0
assert lib.curandSetPseudoRandomGeneratorSeed(g, ctypes.c_uint64(42)) == 0
buf = cp.zeros(8, cp.float32)
ptr = ctypes.c_void_p(buf.data.ptr)
lib.curandGenerateNormal.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_float, ctypes.c_float]
assert lib.curandGenerateNormal(g, ptr, 7, 0.0, 1.0) == 105  # CURAND_STATUS_LENGTH_NOT_MULTIPLE: pairs only
assert lib.curandGenerateNormal(g, ptr, 8, 100.0, 0.001) == 0
assert np.allclose(cp.asnumpy(buf), 100.0, atol=0.01)  # the mean and deviation passed by value arrive
assert lib.curandGenerateUniform(g, ptr, 1 << 20) != 0  # more than the buffer holds: refused, not written
assert lib.curandDestroyGenerator(g) == 0
assert lib.curandDestroyGenerator(g) == 101  # CURAND_STATUS_NOT_INITIALIZED
print("OK")
