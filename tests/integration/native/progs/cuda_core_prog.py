"""cuda.core: Device, Program (NVRTC to PTX), launch on a stream, copies through cuda.bindings."""

import numpy as np
from cuda.bindings import driver
from cuda.core import Device, LaunchConfig, Program, ProgramOptions, launch

SOURCE = r"""
extern "C" __global__ void scale(float *x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}
"""

dev = Device()
dev.set_current()
print(dev.name, dev.compute_capability, dev.properties.multiprocessor_count)
s = dev.create_stream()
prog = Program(SOURCE, code_type="c++", options=ProgramOptions(arch=f"sm_{dev.arch}"))
kernel = prog.compile("ptx").get_kernel("scale")
assert kernel.attributes.max_threads_per_block >= 128
n = 1000
buf = dev.allocate(n * 4, stream=s)
host = np.arange(n, dtype=np.float32)
driver.cuMemcpyHtoDAsync(buf.handle, host.ctypes.data, n * 4, s.handle)
launch(s, LaunchConfig(grid=(n + 127) // 128, block=128), kernel, buf, np.float32(3.0), np.int32(n))
out = np.empty_like(host)
driver.cuMemcpyDtoHAsync(out.ctypes.data, buf.handle, n * 4, s.handle)
s.sync()
assert np.allclose(out, host * 3), out[:5]
buf.close(s)
print("cuda.core OK")
