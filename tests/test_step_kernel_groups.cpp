// A step kernel's carried finals summed in groups of 32 neurons (CarriedSlot::summed_in_groups):
// each group's 32 values summed as a balanced binary tree in neuron order, the same float on the
// CPU and on CUDA, whose four-lane kernel (aligned input) and one-lane kernel (unaligned input)
// must both form that tree. The reference is the tree written out here; a sum in neuron order
// gives other floats for these values, so a kernel that kept it fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "flexkit/array.hpp"
#include "ir/step_kernel.hpp"
#include "support/test_device.hpp"

namespace flexkit::snn {
namespace {

constexpr std::int64_t kNeurons = 128, kSteps = 2;

// acc' = acc + x: the final of neuron n is x[0, n] + x[1, n] (from 0).
StepKernel accumulate() {
  StepKernel k;
  k.name = "group_sum";
  k.seq_in = {{"x", DType::f32}};
  k.carried = {{"acc", 0.0f, true}};
  ir::Instr x;
  x.op = ir::Op::seq_in;
  x.slot = 0;
  ir::Instr acc;
  acc.op = ir::Op::carried;
  acc.slot = 0;
  ir::Instr sum;
  sum.op = ir::Op::add;
  sum.a = 1;
  sum.b = 0;
  k.body.instrs = {x, acc, sum};
  k.carried_next = {2};
  return k;
}

// Values spread over many binades, so that the order of a sum shows in its float.
std::vector<float> spread_values(unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(-12, 24);
  std::vector<float> v(static_cast<std::size_t>(kSteps * kNeurons));
  for (float& x : v) x = (gen() % 2 ? 1.0f : -1.0f) * std::ldexp(mantissa(gen), exponent(gen));
  return v;
}

std::vector<float> final_values(const std::vector<float>& x) {
  std::vector<float> f(static_cast<std::size_t>(kNeurons));
  for (std::size_t n = 0; n < f.size(); ++n) f[n] = (0.0f + x[n]) + x[kNeurons + n];
  return f;
}

std::vector<float> tree_sums(const std::vector<float>& finals) {
  std::vector<float> out;
  for (std::size_t g = 0; g < finals.size(); g += kFinalGroup) {
    std::vector<float> level(finals.begin() + static_cast<std::ptrdiff_t>(g),
                             finals.begin() + static_cast<std::ptrdiff_t>(g + kFinalGroup));
    while (level.size() > 1) {
      std::vector<float> next;
      for (std::size_t i = 0; i < level.size(); i += 2) next.push_back(level[i] + level[i + 1]);
      level = next;
    }
    out.push_back(level[0]);
  }
  return out;
}

std::vector<float> ordered_sums(const std::vector<float>& finals) {
  std::vector<float> out;
  for (std::size_t g = 0; g < finals.size(); g += kFinalGroup) {
    float s = finals[g];
    for (std::size_t i = g + 1; i < g + kFinalGroup; ++i) s += finals[i];
    out.push_back(s);
  }
  return out;
}

std::vector<float> run_groups(const Array& x) {
  const Device device = x.device();
  StepKernelLaunch launch;
  launch.neurons = kNeurons;
  launch.steps = kSteps;
  launch.inner = kNeurons;
  launch.seq_in = {x};
  launch.carried_init = {Array()};
  launch.carried_final = {Array::zeros({kNeurons / kFinalGroup}, DType::f32, device)};
  launch.final_group = kFinalGroup;
  const StepKernel kernel = accumulate();
  if (device.is_cuda())
    run_step_kernel_cuda(kernel, launch);
  else
    run_step_kernel_cpu(kernel, launch);
  return launch.carried_final[0].to_floats();
}

TEST(StepKernelGroups, SumsEachGroupAsABalancedTree) {
  const Device device = test::device();
  const std::vector<float> x = spread_values(11);
  const std::vector<float> expected = tree_sums(final_values(x));
  ASSERT_NE(expected, ordered_sums(final_values(x))) << "values whose sum order does not show";
  const Shape shape{kSteps, kNeurons};
  // Aligned (four lanes a thread on CUDA), then starting one element into a larger array (one).
  EXPECT_EQ(run_groups(Array::from_floats(x, shape, DType::f32, device)), expected) << "aligned";
  std::vector<float> padded(x.size() + 1, 0.0f);
  std::copy(x.begin(), x.end(), padded.begin() + 1);
  const Array wide =
      Array::from_floats(padded, {static_cast<std::int64_t>(padded.size())}, DType::f32, device);
  const Array shifted = wide(slice(1, static_cast<std::int64_t>(padded.size()))).reshape(shape);
  ASSERT_TRUE(shifted.is_contiguous());
  EXPECT_EQ(run_groups(shifted), expected) << "unaligned";
}

}  // namespace
}  // namespace flexkit::snn
