"""Query NVML as monitoring tools do; print what was seen as JSON (used by test_nvml)."""

import json

import pynvml as nv
from cuda.bindings import driver as cu

nv.nvmlInit()
h = nv.nvmlDeviceGetHandleByIndex(0)
before = nv.nvmlDeviceGetMemoryInfo(h).used
cu.cuInit(0)
_, dev = cu.cuDeviceGet(0)
_, ctx = cu.cuDevicePrimaryCtxRetain(dev)
cu.cuCtxSetCurrent(ctx)
err, ptr = cu.cuMemAlloc(64 << 20)
assert err == cu.CUresult.CUDA_SUCCESS, err
after = nv.nvmlDeviceGetMemoryInfo(h).used
try:
    temp = nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)
except nv.NVMLError as exc:
    temp = str(exc)
seen = {
    "count": nv.nvmlDeviceGetCount(),
    "name": nv.nvmlDeviceGetName(h),
    "uuid": nv.nvmlDeviceGetUUID(h),
    "total": nv.nvmlDeviceGetMemoryInfo(h).total,
    "cc": list(nv.nvmlDeviceGetCudaComputeCapability(h)),
    "cuda_version": nv.nvmlSystemGetCudaDriverVersion(),
    "driver": nv.nvmlSystemGetDriverVersion(),
    "util": nv.nvmlDeviceGetUtilizationRates(h).memory,
    "used_before": before,
    "used_after_alloc": after,
    "temperature": temp,
}
nv.nvmlShutdown()
print(json.dumps(seen))
