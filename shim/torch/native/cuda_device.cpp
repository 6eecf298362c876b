// The CUDA device, as the CPU build of PyTorch on a wooly client sees it.
//
// NOTE [a cuda device in a CPU build]: remote tensors are wrapper tensors whose C++ TensorImpl
// sits on device cuda:N (shim/torch/tensor.py), so every device check, every helper tensor a C++
// composite creates with `self.device()`, and dlpack see a CUDA tensor. The CPU build of PyTorch
// ships no CUDA runtime, so two registrations are missing and are made here:
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
};

WoolyCudaGuard guard;
}  // namespace

// Registered when the library is loaded, which must happen before torch first asks for its CUDA
// hooks (it caches the answer): shim/torch loads it ahead of `import torch`.
namespace at {
C10_REGISTER_TYPED_CLASS(CUDAHooksRegistry, "CUDAHooks", WoolyCudaHooks)
}

// Install the device guard for `n` devices. 0: installed; 1: a real CUDA guard is present (a
// CUDA build of torch): nothing is changed.
extern "C" int wooly_install_cuda_device(int n) {
  device_count = n < 1 ? 1 : n;
  auto& slot = c10::impl::device_guard_impl_registry[static_cast<size_t>(DeviceType::CUDA)];
  const c10::impl::DeviceGuardImplInterface* prev = slot.load();
  if (prev != nullptr && prev != &guard) return 1;
  slot.store(&guard);
  return 0;
}
