// flexkit info: what this build and machine offer.
#include <cstdio>

#include "cli_parse.hpp"
#include "commands.hpp"
#include "flexkit/flexkit.hpp"

namespace flexkit::cli {

namespace {
std::string version_text(int v) {
  return v ? std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10) : "none";
}
}  // namespace

int info_command(const Args& args) {
  CLI::App app{"Devices found, the CUDA and NVRTC versions, and the kernel cache directory.",
               "flexkit info"};
  if (const auto rc = parse(app, args)) return *rc;
  std::printf("flexkit %.*s\n", static_cast<int>(kVersion.size()), kVersion.data());
  std::printf("  cpu backend     : yes\n");
  std::printf("  cuda backend    : %s\n", cuda::built_with_cuda() ? "built" : "not built");
  if (cuda::built_with_cuda()) {
    cuda::Versions v = cuda::versions();
    std::printf("  cuda runtime    : %s\n", version_text(v.runtime).c_str());
    std::printf("  cuda driver     : %s\n",
                v.driver ? version_text(v.driver).c_str() : "none (no driver on this machine)");
    std::printf("  nvrtc           : %d.%d\n", v.nvrtc_major, v.nvrtc_minor);
  }
  int n = cuda::device_count();
  std::printf("  cuda devices    : %d\n", n);
  for (int i = 0; i < n; ++i) {
    cuda::DeviceInfo d = cuda::device_info(i);
    std::printf("    cuda:%d  %s  sm_%d%d  %d SMs  %.1f GiB  L2 %.0f MiB\n", i, d.name.c_str(),
                d.compute_major, d.compute_minor, d.multiprocessors,
                static_cast<double>(d.total_memory) / (1u << 30),
                static_cast<double>(d.l2_bytes) / (1u << 20));
  }
  std::printf("  kernel cache    : %s (set FLEXKIT_CACHE_DIR to move it)\n",
              cache_directory().string().c_str());
  return 0;
}

}  // namespace flexkit::cli
