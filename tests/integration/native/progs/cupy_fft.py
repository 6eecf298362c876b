"""cupy.fft and cupyx.scipy.fft on the cuFFT stand-in (NOTE [vendor libraries]), checked against numpy.fft; then
cuFFT's C API directly, with arguments a real cuFFT refuses."""

import ctypes

import cupy as cp
import numpy as np
from cupyx.scipy import fft as sfft

rng = np.random.default_rng(0)
x = (rng.standard_normal((3, 16)) + 1j * rng.standard_normal((3, 16))).astype(np.complex64)
y = cp.fft.fft(cp.asarray(x))
assert y.dtype == cp.complex64
np.testing.assert_allclose(cp.asnumpy(y), np.fft.fft(x), rtol=1e-4, atol=1e-4)
np.testing.assert_allclose(cp.asnumpy(cp.fft.ifft(y)), x, rtol=1e-4, atol=1e-5)
r = rng.standard_normal((4, 10))
h = cp.fft.rfft(cp.asarray(r))
np.testing.assert_allclose(cp.asnumpy(h), np.fft.rfft(r), rtol=1e-12, atol=1e-12)
np.testing.assert_allclose(cp.asnumpy(cp.fft.irfft(h, n=10)), r, rtol=1e-12, atol=1e-12)
a = rng.standard_normal((5, 6, 7)).astype(np.float32)
np.testing.assert_allclose(cp.asnumpy(cp.fft.fftn(cp.asarray(a))), np.fft.fftn(a), rtol=2e-4, atol=2e-4)
# a transform over non-contiguous axes: cuFFT's advanced layout (strides and distances)
np.testing.assert_allclose(cp.asnumpy(cp.fft.fft(cp.asarray(a), axis=0)), np.fft.fft(a, axis=0), rtol=2e-4, atol=2e-4)
np.testing.assert_allclose(
    cp.asnumpy(cp.fft.rfft2(cp.asarray(a), axes=(0, 2))), np.fft.rfft2(a, axes=(0, 2)), rtol=2e-4, atol=2e-4
)
z = (rng.standard_normal((8, 12)) + 1j * rng.standard_normal((8, 12))).astype(np.complex128)
np.testing.assert_allclose(cp.asnumpy(sfft.ifft2(cp.asarray(z), norm="ortho")), np.fft.ifft2(z, norm="ortho"))
# a plan made once, used on a stream, in place
g = cp.asarray(z)
s = cp.cuda.Stream(non_blocking=True)
with s:
    plan = sfft.get_fft_plan(g, axes=(1,))
    with plan:
        out = sfft.fft(g, axis=1, overwrite_x=True)
s.synchronize()  # a non-blocking stream: the default stream's copy below does not wait for it
np.testing.assert_allclose(cp.asnumpy(out), np.fft.fft(z, axis=1))

# cuFFT's C API: what a real cuFFT refuses is refused, with cuFFT's status codes
lib = ctypes.CDLL("libcufft.so.11")
p = ctypes.c_int()
assert lib.cufftPlan1d(ctypes.byref(p), 16, 0x77, 1) == 4  # CUFFT_INVALID_VALUE: no such transform type
assert lib.cufftPlan1d(ctypes.byref(p), 0, 0x29, 1) == 4  # a size of 0
assert lib.cufftExecC2C(123456, None, None, -1) == 1  # CUFFT_INVALID_PLAN
assert lib.cufftPlan1d(ctypes.byref(p), 1024, 0x29, 1) == 0
small = cp.zeros(16, cp.complex64)  # 128 bytes; the plan reads and writes 8 KiB
assert lib.cufftExecC2C(p.value, ctypes.c_void_p(small.data.ptr), ctypes.c_void_p(small.data.ptr), -1) == 4
assert lib.cufftExecR2C(p.value, ctypes.c_void_p(small.data.ptr), ctypes.c_void_p(small.data.ptr)) == 4  # C2C plan
assert lib.cufftDestroy(p.value) == 0
assert lib.cufftDestroy(p.value) == 1
v = ctypes.c_int()
assert lib.cufftGetVersion(ctypes.byref(v)) == 0 and v.value >= 11000
print("OK")
