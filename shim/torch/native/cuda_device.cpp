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
//     the device count), and host memory as "pinned" memory. Everything else (generators, cuDNN...)
//     keeps the default "not built" answer: those paths are answered in Python by the torch face, or
//     refused.
// No CUDA kernel is registered here: an op that reaches the CUDA dispatch key without a remote
// tensor argument (a factory called by a composite) is handled by the Python fallback in
// shim/torch/device.py. The library is tied to the torch build it is compiled against and is
// rebuilt when that changes (shim/torch/device.py).
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#ifdef HAVE_C10D_TIMER
#include <torch/csrc/distributed/c10d/reducer_timer.hpp>
#endif

#include <atomic>
#include <map>
#include <memory>
#include <mutex>

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

// Host memory handed out as "pinned": the ranges, so that is_pinned() answers for them (and views into them).
std::mutex pinned_lock;
std::map<uintptr_t, size_t> pinned_ranges;

bool pinned_contains(const void* p) {
  auto a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> hold(pinned_lock);
  auto it = pinned_ranges.upper_bound(a);
  if (it == pinned_ranges.begin()) return false;
  --it;
  return a < it->first + (it->second ? it->second : 1);
}

void pinned_free(void* p) {
  {
    std::lock_guard<std::mutex> hold(pinned_lock);
    pinned_ranges.erase(reinterpret_cast<uintptr_t>(p));
  }
  c10::free_cpu(p);
}

struct PinnedAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    void* p = c10::alloc_cpu(n);
    {
      std::lock_guard<std::mutex> hold(pinned_lock);
      pinned_ranges[reinterpret_cast<uintptr_t>(p)] = n;
    }
    return {p, p, &pinned_free, Device(DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &pinned_free; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
};

PinnedAllocator pinned_allocator;

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
  // Page-locked host memory is for a GPU's DMA engine, which this side has none of: "pinned" host memory is
  // ordinary host memory that remembers it was asked for pinned (DistributedDataParallel's reducer with
  // find_unused_parameters keeps a pinned copy of its used-parameter map and asserts it is pinned; the default
  // answer threw "Pinned memory requires CUDA").
  bool isPinnedPtr(const void* p) const override { return pinned_contains(p); }
  c10::Allocator* getPinnedMemoryAllocator() const override { return &pinned_allocator; }
  // No cuDNN on this side (a CUDA build asks for its version before choosing an attention kernel;
  // the default answer throws): cuDNN-backed choices are made by gpud's torch.
  bool hasCuDNN() const override { return false; }
  long versionCuDNN() const override { return 0; }
  long versionRuntimeCuDNN() const override { return 0; }
};

WoolyCudaGuard guard;

#ifdef HAVE_C10D_TIMER
// DistributedDataParallel's reducer times each iteration with the timer its registry has for the parameters'
// device type. A CPU build has none for CUDA (the reducer has no timer, and DDP's runtime-statistics logger
// asserted on it from the second iteration); a CUDA build's records CUDA events in this process, where there is
// no GPU (it aborted the program at its second iteration). Host-clock times, as the CPU timer keeps: the moments
// this side queued the work, which is what the client can see.
class WoolyTimer final : public c10d::Timer {
 public:
  explicit WoolyTimer(c10::Device) {}
  std::optional<int64_t> measureDifference(Event start, Event end) override {
    int64_t s = getTimeRef(start), e = getTimeRef(end);
    if (s == c10d::kUnsetTime || e == c10d::kUnsetTime || e < s) return std::nullopt;
    return e - s;
  }
};

void install_timer() {
  c10d::TimerRegistry()->Register(
      DeviceType::CUDA,
      [](c10::Device d) -> std::unique_ptr<c10d::Timer> { return std::make_unique<WoolyTimer>(d); },
      c10::REGISTRY_PREFERRED);
}
#else
void install_timer() {}  // a torch without torch.distributed
#endif
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
  install_timer();
  return 0;
}
