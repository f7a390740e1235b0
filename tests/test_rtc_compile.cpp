// Run-time compilation needs no GPU: NVRTC compiles kernels against the headers embedded in the
// library, and failures carry the compiler's log and the path of the dumped source.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "backend/cuda/rtc_compiler.hpp"
#include "backend/embedded_files.hpp"
#include "flexkit/error.hpp"

namespace flexkit {
namespace {

using backend::cuda::compile_cubin;

TEST(RtcCompile, EmbeddedHeadersAreInTheBinary) {
  bool prelude = false, codec = false;
  for (const auto& f : backend::embedded_device_headers()) {
    std::string_view name = f.name;
    EXPECT_EQ(std::string_view(f.data).size(), f.size) << name;
    prelude |= name == "flexkit/rtc_prelude.cuh";
    codec |= name == "flexkit/portable/flex16_codec.hpp" &&
             std::string_view(f.data).find("flex16_encode") != std::string_view::npos;
  }
  EXPECT_TRUE(prelude);
  EXPECT_TRUE(codec);
}

TEST(RtcCompile, KernelUsingThePortableCodecCompilesForHopper) {
  // Run from a directory with no flexkit headers: only the embedded copies can satisfy the
  // includes.
  auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(std::filesystem::temp_directory_path());
  const std::string source = R"(
#include "flexkit/rtc_prelude.cuh"
FLEXKIT_KERNEL void encode(const float* x, short* m, int n, int iwl) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) m[i] = flexkit::portable::flex16_encode(x[i], iwl).m;
}
)";
  std::string cubin = compile_cubin("encode_test", source, "sm_90a");
  std::filesystem::current_path(cwd);
  ASSERT_GT(cubin.size(), 4u);
  EXPECT_EQ(cubin.substr(0, 4), std::string("\x7f"
                                            "ELF"));
  EXPECT_EQ(backend::cuda::rtc_arch_for(9, 0), "sm_90a");
  EXPECT_EQ(backend::cuda::rtc_arch_for(8, 6), "sm_86");
}

TEST(RtcCompile, FailureCarriesLogAndDumpedSource) {
  const std::string source = "FLEXKIT_KERNEL void broken() { this is not cuda; }\n";
  try {
    compile_cubin("broken_kernel", source, "sm_90a");
    FAIL() << "a broken kernel compiled";
  } catch (const CompileError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("broken_kernel"), std::string::npos) << msg;
    EXPECT_NE(msg.find("error"), std::string::npos) << msg;
    auto at = msg.find("source written to ");
    ASSERT_NE(at, std::string::npos) << msg;
    std::string path = msg.substr(at + 18, msg.find('\n', at) - at - 18);
    std::ifstream in(path);
    std::stringstream dumped;
    dumped << in.rdbuf();
    EXPECT_EQ(dumped.str(), source) << path;
  }
}

}  // namespace
}  // namespace flexkit
