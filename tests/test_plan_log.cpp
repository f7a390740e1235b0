// The heavy operations' plans seen from outside: FLEXKIT_LOG=1 prints one line per new plan (read
// in a child process, since the variable is read once per process), nothing without it, and the
// names dot_kernel_name and ConvPlan::kernel_name give are the CPU's instruction set.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "flexkit/conv.hpp"
#include "flexkit/gemm.hpp"
#include "support/kernel_names.hpp"

namespace flexkit {
namespace {

constexpr const char* kChildVariable = "FLEXKIT_PLAN_LOG_TEST_CHILD";

Array flex(const Shape& shape, int iwl) {
  Array a = Array::zeros(shape, DType::flex16);
  a.set_iwl(iwl);
  return a;
}

// The calls the child makes: two dot shapes (the first three times, once by name only), one
// fprop geometry twice under the exact policy (a measuring and a storing pass), one update.
void make_the_calls() {
  const Array a = flex({64, 32}, 1), b = flex({32, 48}, 1);
  Array out = flex({64, 48}, 4);
  dot(a, b, out);
  dot(a, b, out, {.iwl = 6});
  EXPECT_FALSE(dot_kernel_name(a, b, out).empty());
  dot(flex({8, 32}, 1), b, flex({8, 48}, 4));
  const ConvParams params{{1}, {}, {}, {}};
  const ConvPlan plan({4, 6, 6, 2}, {4, 3, 3, 8}, params);
  const Array I = flex({4, 6, 6, 2}, 2), F = flex({4, 3, 3, 8}, 0);
  Array O = flex(plan.output_shape(), 9), gradF = flex({4, 3, 3, 8}, 9);
  for (int i = 0; i < 2; ++i) plan.fprop(I, F, O, {.iwl_policy = IwlPolicy::exact});
  plan.update(I, O, gradF);
}

// Run only as the child of the tests below.
TEST(PlanLog, Child) {
  if (!std::getenv(kChildVariable)) GTEST_SKIP() << "runs as a child process of another test";
  make_the_calls();
}

// The child's stderr, one entry per line.
std::vector<std::string> child_stderr(bool log) {
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe");
  std::string command = std::string(kChildVariable) + "=1 ";
  command += log ? "FLEXKIT_LOG=1 " : "FLEXKIT_LOG= ";
  command += '\'';
  command += self.string();
  command += "' --gtest_filter=PlanLog.Child 2>&1 >/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  EXPECT_NE(pipe, nullptr) << command;
  std::vector<std::string> lines;
  if (!pipe) return lines;
  char buffer[4096];
  std::string text;
  while (std::fgets(buffer, sizeof buffer, pipe)) text += buffer;
  EXPECT_EQ(pclose(pipe), 0) << command << "\n" << text;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

int count_starting(const std::vector<std::string>& lines, const std::string& prefix) {
  int n = 0;
  for (const std::string& line : lines) n += line.rfind(prefix, 0) == 0 ? 1 : 0;
  return n;
}

TEST(PlanLog, OneLinePerNewPlan) {
  const std::vector<std::string> lines = child_stderr(true);
  std::string all;
  for (const std::string& line : lines) all += line + "\n";
  const std::string kernel = test::expected_cpu_kernel_name();
  EXPECT_EQ(count_starting(lines, "flexkit: dot " + kernel + " "), 2) << all;
  EXPECT_EQ(count_starting(lines, "flexkit: conv fprop " + kernel + " "), 1) << all;
  EXPECT_EQ(count_starting(lines, "flexkit: conv update " + kernel + " "), 1) << all;
  EXPECT_EQ(count_starting(lines, "flexkit: "), 4) << all;
  // Each line says what it planned for.
  EXPECT_NE(all.find(" for batch 1 m 64 n 48 k 32, A flex16 B flex16 out flex16"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find(" for C 4 K 8 N 2 in 1x6x6 filter 1x3x3"), std::string::npos) << all;
}

TEST(PlanLog, SilentWithoutTheVariable) {
  EXPECT_EQ(count_starting(child_stderr(false), "flexkit: "), 0);
}

// Every heavy product on the CPU runs the kernels of one instruction set: the best this CPU has,
// capped by FLEXKIT_GEMM_ISA.
TEST(PlanLog, NamesAreTheCpuInstructionSet) {
  const std::string kernel = test::expected_cpu_kernel_name();
  const Array a = flex({16, 24}, 1), b = flex({24, 40}, 1);
  EXPECT_EQ(dot_kernel_name(a, b, flex({16, 40}, 4)), kernel);
  const Array spikes = Array::zeros({24, 40}, DType::u8);
  EXPECT_EQ(dot_kernel_name(a, spikes, flex({16, 40}, 4)), kernel);
  EXPECT_EQ(dot_kernel_name(Array::zeros({16, 24}, DType::f32), Array::zeros({24, 40}, DType::f32),
                            Array::zeros({16, 40}, DType::f32)),
            kernel);
  const ConvPlan plan({4, 6, 6, 8}, {4, 3, 3, 8}, {{1}, {2}, {}, {}});
  const Array I = flex(plan.input_shape(), 2), F = flex(plan.filter_shape(), 0);
  const Array O = flex(plan.output_shape(), 9);
  EXPECT_EQ(plan.kernel_name(ConvDirection::fprop, I, F, O), kernel);
  EXPECT_EQ(plan.kernel_name(ConvDirection::bprop, F, O, flex(plan.input_shape(), 9)), kernel);
  EXPECT_EQ(plan.kernel_name(ConvDirection::update, I, O, flex(plan.filter_shape(), 9)), kernel);
}

}  // namespace
}  // namespace flexkit
