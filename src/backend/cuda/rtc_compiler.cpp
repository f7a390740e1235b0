#include "backend/cuda/rtc_compiler.hpp"

#include <cuda_runtime_api.h>
#include <nvrtc.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "backend/cuda/check.hpp"
#include "backend/embedded_files.hpp"
#include "core/text.hpp"
#include "flexkit/cuda.hpp"
#include "flexkit/error.hpp"

namespace flexkit::backend::cuda {

using detail::cat;

namespace {

void check_nvrtc(nvrtcResult result, const char* statement) {
  if (result != NVRTC_SUCCESS)
    throw CompileError(cat("NVRTC error ", nvrtcGetErrorString(result), " in `", statement, "`"));
}

// Failed sources go where a user can open them; the message gives the path.
std::string dump_failed_source(std::string_view name, const std::string& source) {
  std::error_code ec;
  auto dir = std::filesystem::temp_directory_path(ec) / "flexkit-failed-kernels";
  std::filesystem::create_directories(dir, ec);
  auto path = dir / cat(name, "-", std::hash<std::string>{}(source), ".cu");
  std::ofstream out(path);
  out << source;
  return out ? path.string() : std::string("(could not write the source to ") + path.string() + ")";
}

struct Program {
  nvrtcProgram handle = nullptr;
  ~Program() {
    if (handle) nvrtcDestroyProgram(&handle);
  }
};

}  // namespace

std::string rtc_arch_for(int compute_major, int compute_minor) {
  std::string arch = cat("sm_", compute_major, compute_minor);
  if (compute_major == 9 && compute_minor == 0) arch += "a";
  return arch;
}

std::string compile_cubin(std::string_view program_name, const std::string& source,
                          const std::string& arch, const std::vector<std::string>& extra_options) {
  auto headers = embedded_device_headers();
  std::vector<const char*> header_data, header_names;
  for (const EmbeddedFile& f : headers) {
    header_data.push_back(f.data);
    header_names.push_back(f.name);
  }
  Program program;
  std::string name(program_name);
  check_nvrtc(
      nvrtcCreateProgram(&program.handle, source.c_str(), (name + ".cu").c_str(),
                         static_cast<int>(headers.size()), header_data.data(), header_names.data()),
      "nvrtcCreateProgram");
  std::vector<std::string> options = {"-arch=" + arch, "-std=c++17"};
  options.insert(options.end(), extra_options.begin(), extra_options.end());
  std::vector<const char*> option_ptrs;
  for (const auto& o : options) option_ptrs.push_back(o.c_str());
  nvrtcResult result =
      nvrtcCompileProgram(program.handle, static_cast<int>(option_ptrs.size()), option_ptrs.data());
  if (result != NVRTC_SUCCESS) {
    std::size_t log_size = 0;
    nvrtcGetProgramLogSize(program.handle, &log_size);
    std::string log(log_size, '\0');
    if (log_size) nvrtcGetProgramLog(program.handle, log.data());
    throw CompileError(cat("NVRTC could not compile kernel program '", name, "' for ", arch, " (",
                           nvrtcGetErrorString(result), "); source written to ",
                           dump_failed_source(name, source), "\n", log));
  }
  std::size_t size = 0;
  check_nvrtc(nvrtcGetCUBINSize(program.handle, &size), "nvrtcGetCUBINSize");
  std::string cubin(size, '\0');
  check_nvrtc(nvrtcGetCUBIN(program.handle, cubin.data()), "nvrtcGetCUBIN");
  return cubin;
}

RtcModule::RtcModule(int device, const std::string& cubin) : device_(device), library_(nullptr) {
  flexkit::cuda::current_stream(device);  // validates the device
  DeviceGuard guard(device);
  cudaLibrary_t library = nullptr;
  FLEXKIT_CUDA_CHECK(
      cudaLibraryLoadData(&library, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  library_ = library;
}

RtcModule::~RtcModule() {
  if (library_) cudaLibraryUnload(static_cast<cudaLibrary_t>(library_));
}

void* RtcModule::kernel(const char* name, unsigned shared_bytes) const {
  // Up to 48 KiB needs no opt-in.
  constexpr unsigned kDefaultShared = 48 * 1024;
  std::lock_guard<std::mutex> lock(mutex_);
  Kernel* found = nullptr;
  for (Kernel& known : kernels_)
    if (known.name == name) found = &known;
  if (!found) {
    cudaKernel_t handle = nullptr;
    FLEXKIT_CUDA_CHECK(cudaLibraryGetKernel(&handle, static_cast<cudaLibrary_t>(library_), name));
    found = &kernels_.emplace_back(Kernel{name, handle, kDefaultShared});
  }
  if (shared_bytes > found->shared_allowed) {
    FLEXKIT_CUDA_CHECK(cudaKernelSetAttributeForDevice(static_cast<cudaKernel_t>(found->handle),
                                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                       static_cast<int>(shared_bytes), device_));
    found->shared_allowed = shared_bytes;
  }
  return found->handle;
}

void RtcModule::launch(const char* name, unsigned grid, unsigned block, void** args,
                       unsigned shared_bytes) const {
  DeviceGuard guard(device_);
  launch_kernel(kernel(name, shared_bytes), grid, block, args, shared_bytes,
                flexkit::cuda::current_stream(device_));
}

void launch_kernel(void* kernel, unsigned grid, unsigned block, void** args, unsigned shared_bytes,
                   void* stream) {
  FLEXKIT_CUDA_CHECK(cudaLaunchKernel(kernel, dim3(grid), dim3(block), args, shared_bytes,
                                      static_cast<cudaStream_t>(stream)));
}

}  // namespace flexkit::backend::cuda
