// Run-time compilation of CUDA C++ (NVRTC) against the embedded device headers, and loading
// the result as a module whose kernels can be launched.
#pragma once
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace flexkit::backend::cuda {

// The NVRTC target for a device: "sm_90a" on Hopper (wgmma needs the arch-specific target),
// "sm_XY" otherwise.
std::string rtc_arch_for(int compute_major, int compute_minor);

// Compiles `source` to a cubin for `arch`. Sources may include any embedded header
// (flexkit/rtc_prelude.cuh and flexkit/portable/*). On failure throws CompileError carrying the
// NVRTC log and the path the source was written to.
std::string compile_cubin(std::string_view program_name, const std::string& source,
                          const std::string& arch,
                          const std::vector<std::string>& extra_options = {});

// A loaded cubin on one device.
class RtcModule {
 public:
  RtcModule(int device, const std::string& cubin);
  ~RtcModule();
  RtcModule(const RtcModule&) = delete;
  RtcModule& operator=(const RtcModule&) = delete;

  // Launches the extern "C" kernel `name` on the device's current stream, with `shared_bytes`
  // of dynamic shared memory a block (past 48 KiB, the kernel is allowed that much first).
  void launch(const char* name, unsigned grid, unsigned block, void** args,
              unsigned shared_bytes = 0) const;

  // Kernel `name` (a cudaKernel_t), its handle asked of the library once (a launch is on every
  // assignment's path, and the library's lookup by name costs more than the rest of the
  // launch's host side), allowed at least `shared_bytes` of dynamic shared memory. Valid while
  // the module lives; launch it with launch_kernel.
  void* kernel(const char* name, unsigned shared_bytes) const;

 private:
  struct Kernel {
    std::string name;
    void* handle;             // cudaKernel_t
    unsigned shared_allowed;  // dynamic shared memory the kernel was allowed
  };

  int device_;
  void* library_;  // cudaLibrary_t
  mutable std::mutex mutex_;
  mutable std::vector<Kernel> kernels_;
};

// Launches a kernel handle from RtcModule::kernel (allowed `shared_bytes`) on `stream`. The
// caller has made the module's device current: the warm paths that use it hold a DeviceGuard
// and the stream already, and a launch is mostly the runtime's own time.
void launch_kernel(void* kernel, unsigned grid, unsigned block, void** args, unsigned shared_bytes,
                   void* stream);

}  // namespace flexkit::backend::cuda
