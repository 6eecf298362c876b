// The CUDA device, as the CPU build of PyTorch on a wooly client sees it.
//
// NOTE [a cuda device in a CPU build]: remote tensors are wrapper tensors whose C++ TensorImpl
// sits on device cuda:N (shim/torch/tensor.py), so every device check, every helper tensor a C++
// composite creates with `self.device()`, and dlpack see a CUDA tensor. The CPU build of PyTorch
// ships no CUDA runtime, so two registrations are missing and are made here (a CUDA build on a
// machine without a GPU has both, but they ask a driver that is not there: they are replaced):
//   * a device guard for DeviceType::CUDA (the autograd engine starts a worker thread per CUDA
//     device and sets the current device/stream through it). It keeps the current device per
//     thread and has one stream per device: wooly orders a session's work on gpud, so streams
//     and events are bookkeeping on this side.
//   * CUDA hooks reporting that CUDA is built and present (at::getAccelerator, hasPrimaryContext,
//     the device count). Everything else (generators, pinned memory, cuDNN...) keeps the default
//     "not built" answer: those paths are answered in Python by the torch face, or refused.
// No CUDA kernel is registered here: an op that reaches the CUDA dispatch key without a remote
// tensor argument (a factory called by a composite) is handled by the Python fallback in
// shim/torch/device.py. The library is tied to the torch build it is compiled against and is
// rebuilt when that changes (shim/torch/device.py).
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <atomic>
#include <memory>

namespace {
using c10::Device;
using c10::DeviceIndex;
using c10::DeviceType;
using c10::Stream;

thread_local DeviceIndex tls_device = 0;
std::atomic<int> device_count{1};

DeviceIndex count() { return static_cast<DeviceIndex>(device_count.load()); }

struct WoolyCudaGuard final : c10::impl::DeviceGuardImplInterface {
  DeviceType type() const override { return DeviceType::CUDA; }
  Device exchangeDevice(Device d) const override {
    Device old(DeviceType::CUDA, tls_device);
    tls_device = d.index();
    return old;
  }
  Device getDevice() const override { return Device(DeviceType::CUDA, tls_device); }
  void setDevice(Device d) const override { tls_device = d.index(); }
  void uncheckedSetDevice(Device d) const noexcept override { tls_device = d.index(); }
  Stream getStream(Device d) const override { return Stream(Stream::DEFAULT, d); }
  Stream exchangeStream(Stream s) const override { return Stream(Stream::DEFAULT, s.device()); }
  DeviceIndex deviceCount() const noexcept override { return count(); }
  void record(void**, const Stream&, const DeviceIndex, const c10::EventFlag) const override {}
  void block(void*, const Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const DeviceIndex) const noexcept override {}
  bool queryStream(const Stream&) const override { return true; }
  void synchronizeStream(const Stream&) const override {}
  void synchronizeEvent(void*) const override {}
  void synchronizeDevice(const DeviceIndex) const override {}
};

struct WoolyCudaHooks final : at::CUDAHooksInterface {
  explicit WoolyCudaHooks(at::CUDAHooksArgs) {}
  void init() const override {}
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasCUDA() const override { return true; }
  bool hasPrimaryContext(DeviceIndex) const override { return true; }
  DeviceIndex deviceCount() const override { return count(); }
  int getNumGPUs() const override { return device_count.load(); }
  DeviceIndex current_device() const override { return tls_device; }
  DeviceIndex getCurrentDevice() const override { return tls_device; }
  void setCurrentDevice(DeviceIndex d) const override { tls_device = d; }
  DeviceIndex exchangeDevice(DeviceIndex d) const override {
    DeviceIndex old = tls_device;
    tls_device = d;
    return old;
  }
  DeviceIndex maybeExchangeDevice(DeviceIndex d) const override { return exchangeDevice(d); }
  bool isPinnedPtr(const void*) const override { return false; }
  // No cuDNN on this side (a CUDA build asks for its version before choosing an attention kernel;
  // the default answer throws): cuDNN-backed choices are made by gpud's torch.
  bool hasCuDNN() const override { return false; }
  long versionCuDNN() const override { return 0; }
  long versionRuntimeCuDNN() const override { return 0; }
};

WoolyCudaGuard guard;
}  // namespace

// The number of devices the program has (NOTE [devices of a program] in shim/runtime.py), known once its first
// session is open: set before a backward pass starts the autograd engine's device threads (one per device).
extern "C" void wooly_set_device_count(int n) { device_count = n < 1 ? 1 : n; }

// Install the hooks and the device guard for `n` devices; returns 0.
//
// The CPU build registers neither, so this is called ahead of `import torch`, before torch first
// asks for its CUDA hooks (it keeps the first answer). A CUDA build registers its own at load time
// (a client without a GPU or a driver, as `pip install torch` gives on Linux): shim/torch/device.py
// loads libtorch_cuda first and calls this right after, so the hooks registered here at a higher
// priority replace torch's before anything has asked for them, and the guard replaces its guard
// (one that asks the CUDA runtime for the current device, which fails without a driver). The real
// CUDA kernels of such a build stay registered: remote tensors reach gpud through the Python key
// ahead of them, and the factories a composite calls are routed to gpud by shim/torch/device.py.
extern "C" int wooly_install_cuda_device(int n) {
  device_count = n < 1 ? 1 : n;
  at::CUDAHooksRegistry()->Register(
      "CUDAHooks",
      [](at::CUDAHooksArgs args) -> std::unique_ptr<at::CUDAHooksInterface> {
        return std::make_unique<WoolyCudaHooks>(args);
      },
      c10::REGISTRY_PREFERRED);
  c10::impl::device_guard_impl_registry[static_cast<size_t>(DeviceType::CUDA)].store(&guard);
  return 0;
}
