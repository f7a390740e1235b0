// Devices, versions and streams.
#include <cuda_runtime_api.h>
#include <nvrtc.h>

#include <array>

#include "backend/cuda/check.hpp"
#include "core/text.hpp"
#include "flexkit/cuda.hpp"
#include "flexkit/error.hpp"

namespace flexkit::backend::cuda {

void throw_cuda_error(cudaError_t status, const char* statement, const char* file, int line) {
  int device = -1;
  cudaGetDevice(&device);
  cudaGetLastError();  // clear a non-sticky error so the process can continue
  throw CudaError(detail::cat(cudaGetErrorName(status), " (", cudaGetErrorString(status), ") in `",
                              statement, "` at ", file, ":", line, " on cuda:", device));
}

DeviceGuard::DeviceGuard(int device) {
  FLEXKIT_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) {
    FLEXKIT_CUDA_CHECK(cudaSetDevice(device));
    changed_ = true;
  }
}

// Guards nest and each restores what it changed, so one that changed nothing has nothing to
// restore (and asks the runtime nothing: a guard is on every launch's path).
DeviceGuard::~DeviceGuard() {
  if (changed_) cudaSetDevice(previous_);
}

}  // namespace flexkit::backend::cuda

namespace flexkit::cuda {

using backend::cuda::DeviceGuard;
using detail::cat;

namespace {

constexpr int kMaxDevices = 64;
thread_local std::array<void*, kMaxDevices> t_current_stream{};  // nullptr: the legacy stream

void require_device(int device, const char* operation) {
  int n = device_count();
  if (n == 0)
    throw DeviceError(
        cat(operation, ": cuda:", device, " requested but no CUDA device is ", "available (",
            built_with_cuda() ? "no GPU or driver found" : "built without CUDA", ")"));
  if (device < 0 || device >= n || device >= kMaxDevices)
    throw DeviceError(
        cat(operation, ": cuda:", device, " does not exist; ", n, " device(s) found"));
}

}  // namespace

bool built_with_cuda() {
  return true;
}

int device_count() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return n;
  }();
  return count;
}

DeviceInfo device_info(int device) {
  require_device(device, "device_info");
  cudaDeviceProp prop{};
  FLEXKIT_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  DeviceInfo info;
  info.index = device;
  info.name = prop.name;
  info.compute_major = prop.major;
  info.compute_minor = prop.minor;
  info.total_memory = prop.totalGlobalMem;
  info.multiprocessors = prop.multiProcessorCount;
  info.l2_bytes = static_cast<std::size_t>(prop.l2CacheSize);
  return info;
}

Versions versions() {
  Versions v;
  cudaRuntimeGetVersion(&v.runtime);
  if (cudaDriverGetVersion(&v.driver) != cudaSuccess) {
    cudaGetLastError();
    v.driver = 0;
  }
  nvrtcVersion(&v.nvrtc_major, &v.nvrtc_minor);
  return v;
}

Stream::Stream(int device) : device_(device), handle_(nullptr) {
  require_device(device, "Stream");
  DeviceGuard guard(device);
  cudaStream_t s = nullptr;
  FLEXKIT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  handle_ = s;
}

Stream::Stream(Stream&& other) noexcept : device_(other.device_), handle_(other.handle_) {
  other.handle_ = nullptr;
}

Stream::~Stream() {
  if (handle_) cudaStreamDestroy(static_cast<cudaStream_t>(handle_));
}

void Stream::synchronize() const {
  FLEXKIT_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(handle_)));
}

StreamGuard::StreamGuard(const Stream& stream)
    : device_(stream.device()), previous_(t_current_stream[stream.device()]) {
  t_current_stream[device_] = stream.handle();
}

StreamGuard::StreamGuard(int device, void* stream_handle) : device_(device), previous_(nullptr) {
  require_device(device, "StreamGuard");
  previous_ = t_current_stream[device];
  t_current_stream[device] = stream_handle;
}

StreamGuard::~StreamGuard() {
  t_current_stream[device_] = previous_;
}

void* current_stream(int device) {
  require_device(device, "current_stream");
  return t_current_stream[device];
}

void synchronize(int device) {
  require_device(device, "synchronize");
  DeviceGuard guard(device);
  FLEXKIT_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(current_stream(device))));
}

}  // namespace flexkit::cuda
