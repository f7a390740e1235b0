// The kernel cache: one compile per expression structure (scalars are parameters), loaded
// modules reused in memory, cubins reused across processes from the disk cache, damaged files
// detected by their checksum and rebuilt, sources dumped on request, and compile failures that
// carry the compiler's log. The disk-cache tests need no GPU; the expression tests run on cuda.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cuda/kernel_cache.hpp"
#include "flexkit/expr.hpp"
#include "flexkit/flexkit.hpp"
#include "support/test_device.hpp"

namespace flexkit {
namespace {

namespace fs = std::filesystem;
using backend::cuda::KernelCache;
using test::device;

constexpr const char* kChildVariable = "FLEXKIT_KERNEL_CACHE_TEST_CHILD";

// A fresh directory, made the cache directory (or the dump directory) of this process.
fs::path fresh_directory(const char* variable) {
  static int counter = 0;
  fs::path dir =
      fs::temp_directory_path() /
      ("flexkit-kernel-cache-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  fs::remove_all(dir);
  fs::create_directories(dir);
  setenv(variable, dir.c_str(), 1);
  return dir;
}

std::vector<fs::path> files_in(const fs::path& dir, const std::string& extension) {
  std::vector<fs::path> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == extension) out.push_back(e.path());
  return out;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// Flips bytes in the middle of the file, where the cubin payload is.
void corrupt(const fs::path& p) {
  std::string bytes = read_file(p);
  ASSERT_GT(bytes.size(), 64u);
  for (std::size_t i = bytes.size() / 2; i < bytes.size() / 2 + 16; ++i) bytes[i] ^= '\xff';
  write_file(p, bytes);
}

cuda::KernelCacheStats stats() {
  return cuda::kernel_cache_stats();
}

const std::string kSmallKernel = R"(
#include "flexkit/rtc_prelude.cuh"
FLEXKIT_KERNEL void twice(float* x) { x[threadIdx.x] *= 2.0f; }
)";

// ---- the disk cache on its own (no GPU needed) -----------------------------------------------

TEST(KernelCacheDisk, StoresVerifiesAndRebuilds) {
  const fs::path dir = fresh_directory("FLEXKIT_CACHE_DIR");
  const fs::path kernels = dir / "kernels";
  KernelCache& cache = KernelCache::instance();
  const auto s0 = stats();
  const std::string first = cache.cubin("twice", kSmallKernel, "sm_90a");
  auto s1 = stats();
  EXPECT_EQ(s1.compiles, s0.compiles + 1);
  EXPECT_EQ(s1.disk_hits, s0.disk_hits);
  auto files = files_in(kernels, ".cubin");
  ASSERT_EQ(files.size(), 1u);

  // Same program again: read back, verified, identical bytes.
  EXPECT_EQ(cache.cubin("twice", kSmallKernel, "sm_90a"), first);
  auto s2 = stats();
  EXPECT_EQ(s2.compiles, s1.compiles);
  EXPECT_EQ(s2.disk_hits, s1.disk_hits + 1);

  // Damaged payload: counted, rebuilt, and the file on disk is good again.
  corrupt(files[0]);
  EXPECT_EQ(cache.cubin("twice", kSmallKernel, "sm_90a"), first);
  auto s3 = stats();
  EXPECT_EQ(s3.corrupt_files, s2.corrupt_files + 1);
  EXPECT_EQ(s3.compiles, s2.compiles + 1);
  EXPECT_EQ(cache.cubin("twice", kSmallKernel, "sm_90a"), first);
  auto s4 = stats();
  EXPECT_EQ(s4.disk_hits, s3.disk_hits + 1);
  EXPECT_EQ(s4.compiles, s3.compiles);

  // A truncated file (a crash mid-write elsewhere) is damage too.
  write_file(files[0], read_file(files[0]).substr(0, 30));
  cache.cubin("twice", kSmallKernel, "sm_90a");
  EXPECT_EQ(stats().corrupt_files, s4.corrupt_files + 1);

  // Another architecture or another source is another file; no temporary files are left.
  cache.cubin("twice", kSmallKernel, "sm_80");
  cache.cubin("twice", kSmallKernel + "// changed\n", "sm_90a");
  EXPECT_EQ(files_in(kernels, ".cubin").size(), 3u);
  for (const auto& e : fs::directory_iterator(kernels))
    EXPECT_EQ(e.path().extension(), ".cubin") << e.path();
  unsetenv("FLEXKIT_CACHE_DIR");
  fs::remove_all(dir);
}

TEST(KernelCacheDisk, DumpsSourcesOnRequest) {
  const fs::path cache_dir = fresh_directory("FLEXKIT_CACHE_DIR");
  const fs::path dump = fresh_directory("FLEXKIT_DUMP_KERNELS");
  backend::cuda::compile_kernel_program("dumped_twice", kSmallKernel, "sm_90a");
  EXPECT_EQ(read_file(dump / "dumped_twice.cu"), kSmallKernel);
  unsetenv("FLEXKIT_DUMP_KERNELS");
  unsetenv("FLEXKIT_CACHE_DIR");
  fs::remove_all(dump);
  fs::remove_all(cache_dir);
}

TEST(KernelCacheDisk, CompileErrorCarriesLogAndSourcePath) {
  const fs::path dump = fresh_directory("FLEXKIT_DUMP_KERNELS");
  const std::string broken =
      "#include \"flexkit/rtc_prelude.cuh\"\nFLEXKIT_KERNEL void broken(float* x) { x = y; }\n";
  try {
    backend::cuda::compile_kernel_program("broken_expr", broken, "sm_90a");
    FAIL() << "a broken program compiled";
  } catch (const CompileError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("identifier \"y\" is undefined"), std::string::npos) << msg;
    const auto at = msg.find("source written to ");
    ASSERT_NE(at, std::string::npos) << msg;
    const std::string path = msg.substr(at + 18, msg.find('\n', at) - at - 18);
    EXPECT_EQ(read_file(path), broken) << path;
    EXPECT_NE(msg.find((dump / "broken_expr.cu").string()), std::string::npos) << msg;
    EXPECT_EQ(read_file(dump / "broken_expr.cu"), broken);
  }
  unsetenv("FLEXKIT_DUMP_KERNELS");
  fs::remove_all(dump);
}

// ---- expressions on a GPU ----------------------------------------------------------------------

class KernelCacheCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!device().is_cuda()) GTEST_SKIP() << "needs --device=cuda";
  }
};

std::vector<float> values(std::int64_t n, float scale) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = scale * static_cast<float>(i % 13) - 3.0f;
  return v;
}

constexpr std::int64_t kN = 1000;

// C = A * B + offset, and its check, with A of `dtype`.
void run_and_check(DType a_dtype, double offset, bool subtract = false) {
  const auto a = values(kN, 0.5f), b = values(kN, 0.25f);
  Array A = Array::from_floats(std::span<const float>(a), {kN}, a_dtype, device());
  Array B = Array::from_floats(std::span<const float>(b), {kN}, DType::f32, device());
  Array C = Array::empty({kN}, DType::f32, device());
  if (subtract)
    C = A * B - offset;
  else
    C = A * B + offset;
  const auto c = C.to_floats();
  for (std::int64_t i = 0; i < kN; ++i) {
    const double want = double(a[i]) * b[i] + (subtract ? -offset : offset);
    ASSERT_NEAR(c[i], want, 1e-5 * (1 + std::abs(want))) << "element " << i;
  }
}

TEST_F(KernelCacheCuda, OneCompilePerStructureThenDiskThenRebuild) {
  const fs::path dir = fresh_directory("FLEXKIT_CACHE_DIR");
  cuda::clear_kernel_memory_cache();

  const auto s0 = stats();
  run_and_check(DType::f32, 2.5);
  const auto s1 = stats();
  EXPECT_EQ(s1.compiles, s0.compiles + 1);
  run_and_check(DType::f32, 7.0);  // another scalar: the same kernel
  const auto s2 = stats();
  EXPECT_EQ(s2.compiles, s1.compiles);
  EXPECT_EQ(s2.memory_hits, s1.memory_hits + 1);

  run_and_check(DType::bf16, 2.5);  // another operand dtype
  EXPECT_EQ(stats().compiles, s2.compiles + 1);
  run_and_check(DType::f32, 2.5, /*subtract=*/true);  // another op
  EXPECT_EQ(stats().compiles, s2.compiles + 2);
  const auto s3 = stats();

  // As a new process would: the cubin comes from disk.
  cuda::clear_kernel_memory_cache();
  run_and_check(DType::f32, 2.5);
  const auto s4 = stats();
  EXPECT_EQ(s4.compiles, s3.compiles);
  EXPECT_EQ(s4.disk_hits, s3.disk_hits + 1);

  // A real second process finds the same file.
  const fs::path self = fs::read_symlink("/proc/self/exe");
  setenv(kChildVariable, "1", 1);
  std::string command = "'";
  command += self.string();
  command += "' --gtest_filter=KernelCacheCuda.ChildProcessHitsTheDiskCache --device=";
  command += device().str();
  command += " > /dev/null";
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  unsetenv(kChildVariable);

  // Damaged cubins: counted, recompiled, results right, the file rewritten.
  for (const fs::path& f : files_in(dir / "kernels", ".cubin")) corrupt(f);
  cuda::clear_kernel_memory_cache();
  const auto s5 = stats();
  run_and_check(DType::f32, 2.5);
  const auto s6 = stats();
  EXPECT_EQ(s6.corrupt_files, s5.corrupt_files + 1);
  EXPECT_EQ(s6.compiles, s5.compiles + 1);
  cuda::clear_kernel_memory_cache();
  run_and_check(DType::f32, 2.5);
  const auto s7 = stats();
  EXPECT_EQ(s7.disk_hits, s6.disk_hits + 1);
  EXPECT_EQ(s7.compiles, s6.compiles);
  EXPECT_EQ(s7.corrupt_files, s6.corrupt_files);

  unsetenv("FLEXKIT_CACHE_DIR");
  fs::remove_all(dir);
}

// Run only as the child of the test above, with its cache directory.
TEST_F(KernelCacheCuda, ChildProcessHitsTheDiskCache) {
  if (!std::getenv(kChildVariable)) GTEST_SKIP() << "runs as a child process of another test";
  run_and_check(DType::f32, 1.25);
  const auto s = stats();
  EXPECT_GE(s.disk_hits, 1u);
  EXPECT_EQ(s.compiles, 0u);
}

TEST_F(KernelCacheCuda, DumpsEveryGeneratedSource) {
  const fs::path cache_dir = fresh_directory("FLEXKIT_CACHE_DIR");
  const fs::path dump = fresh_directory("FLEXKIT_DUMP_KERNELS");
  cuda::clear_kernel_memory_cache();
  run_and_check(DType::f32, 2.5);
  const auto sources = files_in(dump, ".cu");
  ASSERT_EQ(sources.size(), 1u);
  const std::string text = read_file(sources[0]);
  EXPECT_NE(text.find("flexkit_expr_main"), std::string::npos);
  EXPECT_NE(text.find("ew_mul"), std::string::npos);
  unsetenv("FLEXKIT_DUMP_KERNELS");
  unsetenv("FLEXKIT_CACHE_DIR");
  fs::remove_all(dump);
  fs::remove_all(cache_dir);
}

}  // namespace
}  // namespace flexkit
