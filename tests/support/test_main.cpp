// gtest main that takes --device=cpu|cuda[:N]. A cuda run on a machine without a usable device
// fails instead of skipping: the cuda label is only run where a GPU is expected.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "flexkit/cuda.hpp"
#include "support/test_device.hpp"

namespace flexkit::test {
namespace {
Device g_device = Device::cpu();
}
Device device() {
  return g_device;
}
}  // namespace flexkit::test

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--device=", 9) == 0)
      flexkit::test::g_device = flexkit::Device::parse(argv[i] + 9);
  }
  if (flexkit::test::g_device.is_cuda() &&
      flexkit::test::g_device.index >= flexkit::cuda::device_count()) {
    std::fprintf(stderr, "--device=%s: no such CUDA device on this machine (%d found)\n",
                 flexkit::test::g_device.str().c_str(), flexkit::cuda::device_count());
    return 1;
  }
  std::printf("flexkit tests on %s\n", flexkit::test::g_device.str().c_str());
  return RUN_ALL_TESTS();
}
