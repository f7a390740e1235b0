// Checking every CUDA call: a failure throws CudaError naming the statement, file:line, device.
#pragma once
#include <cuda_runtime_api.h>

#include <string>

namespace flexkit::backend::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* statement, const char* file,
                                   int line);

}  // namespace flexkit::backend::cuda

#define FLEXKIT_CUDA_CHECK(statement)                                                              \
  do {                                                                                             \
    cudaError_t flexkit_status_ = (statement);                                                     \
    if (flexkit_status_ != cudaSuccess)                                                            \
      ::flexkit::backend::cuda::throw_cuda_error(flexkit_status_, #statement, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: a launch error surfaces here, naming the kernel.
#define FLEXKIT_CUDA_CHECK_LAUNCH(kernel_name)                                              \
  do {                                                                                      \
    cudaError_t flexkit_status_ = cudaGetLastError();                                       \
    if (flexkit_status_ != cudaSuccess)                                                     \
      ::flexkit::backend::cuda::throw_cuda_error(flexkit_status_, "launch of " kernel_name, \
                                                 __FILE__, __LINE__);                       \
  } while (0)

namespace flexkit::backend::cuda {

// Makes `device` current for the guard's lifetime (CUDA's current device is per thread).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  bool changed_ = false;
};

}  // namespace flexkit::backend::cuda
