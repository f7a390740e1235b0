// The rate readout and its loss in one pass (`rate_loss_on_device`): the rates, both losses, the
// correct count and the gradient against a float64 reference, for every output dtype it reads
// (u8 spikes with their many tied rates, f32, bf16, flex16), a non-contiguous output, labels
// outside the classes, more samples than one CUDA block takes at once, a NaN in the output; and
// on CUDA, every bit equal to the CPU's.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "flexkit/array.hpp"
#include "flexkit/expr.hpp"
#include "flexkit/nn.hpp"
#include "support/random_arrays.hpp"
#include "support/test_device.hpp"

namespace flexkit::nn {
namespace {

struct Problem {
  std::int64_t classes, steps, n;
  Array output;  // (classes, T, N) on the test's device
  std::vector<std::int32_t> labels;
};

// An output of `dtype`: spikes (0 or 1) for u8, values in [-2, 3) otherwise; labels mostly in
// range, with a few outside it.
Problem make_problem(DType dtype, std::int64_t classes, std::int64_t steps, std::int64_t n,
                     unsigned seed) {
  Problem p{classes, steps, n, Array(), {}};
  const Shape shape{classes, steps, n};
  std::vector<float> v =
      test::uniform_values(static_cast<std::size_t>(shape_numel(shape)), seed, -2.0f, 3.0f);
  if (dtype == DType::u8)
    for (float& x : v) x = x > 1.5f ? 1.0f : 0.0f;
  p.output = Array::from_floats(v, shape, dtype, test::device());
  std::mt19937 gen(seed + 1);
  for (std::int64_t i = 0; i < n; ++i) {
    const auto r = static_cast<std::int32_t>(gen() % (classes + 2)) - 1;  // −1 … classes
    p.labels.push_back(r);
  }
  return p;
}

struct Reference {
  std::vector<double> rate;  // (classes, N)
  std::vector<double> grad;  // (classes, T, N)
  double loss = 0;
  double correct = 0;
};

Reference reference(const Problem& p, LossKind kind) {
  const std::vector<double> x = p.output.to_doubles();  // the values the output holds
  const std::int64_t c_n = p.classes, t_n = p.steps, n = p.n;
  Reference r;
  r.rate.assign(static_cast<std::size_t>(c_n * n), 0.0);
  r.grad.assign(static_cast<std::size_t>(c_n * t_n * n), 0.0);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int32_t label = p.labels[static_cast<std::size_t>(i)];
    std::vector<double> rate(static_cast<std::size_t>(c_n));
    std::int64_t best = 0;
    for (std::int64_t c = 0; c < c_n; ++c) {
      double s = 0;
      for (std::int64_t t = 0; t < t_n; ++t)
        s += x[static_cast<std::size_t>((c * t_n + t) * n + i)];
      // The rate the loss works from is the f32 mean.
      rate[static_cast<std::size_t>(c)] = static_cast<float>(s / static_cast<double>(t_n));
      r.rate[static_cast<std::size_t>(c * n + i)] = rate[static_cast<std::size_t>(c)];
      if (rate[static_cast<std::size_t>(c)] > rate[static_cast<std::size_t>(best)]) best = c;
    }
    r.correct += best == label ? 1 : 0;
    double top = rate[0], sum_exp = 0;
    for (double v : rate) top = std::max(top, v);
    for (double v : rate) sum_exp += std::exp(v - top);
    const double lse = std::log(sum_exp) + top;
    for (std::int64_t c = 0; c < c_n; ++c) {
      const double one_hot = c == label ? 1.0 : 0.0;
      const double v = rate[static_cast<std::size_t>(c)];
      double g;
      if (kind == LossKind::cross_entropy) {
        g = (std::exp(v - lse) - one_hot) / static_cast<double>(n * t_n);
        if (c == label) r.loss += (lse - v) / static_cast<double>(n);
      } else {
        g = 2.0 * (v - one_hot) / static_cast<double>(n * c_n * t_n);
        r.loss += (v - one_hot) * (v - one_hot) / static_cast<double>(n * c_n);
      }
      for (std::int64_t t = 0; t < t_n; ++t)
        r.grad[static_cast<std::size_t>((c * t_n + t) * n + i)] = g;
    }
  }
  return r;
}

DeviceLossResult run(const Problem& p, LossKind kind, const Array& output) {
  const Array labels = Array::from_vector(p.labels, {p.n}, output.device());
  return rate_loss_on_device(output, labels, kind);
}

void expect_matches(const Problem& p, LossKind kind, const DeviceLossResult& got,
                    const std::string& what) {
  const Reference want = reference(p, kind);
  EXPECT_NEAR(got.loss.to_doubles().at(0), want.loss, 1e-6 * std::abs(want.loss) + 1e-7) << what;
  EXPECT_EQ(got.correct.to_doubles().at(0), want.correct) << what;
  const std::vector<double> rate = got.rate.to_doubles();
  ASSERT_EQ(rate.size(), want.rate.size());
  for (std::size_t k = 0; k < rate.size(); ++k)
    ASSERT_EQ(rate[k], want.rate[k]) << what << " " << k;
  const std::vector<double> grad = got.grad_output.to_doubles();
  ASSERT_EQ(grad.size(), want.grad.size());
  for (std::size_t k = 0; k < grad.size(); ++k)
    ASSERT_NEAR(grad[k], want.grad[k], 1e-6 * std::abs(want.grad[k]) + 1e-9) << what << " " << k;
}

TEST(RateLoss, EveryOutputDTypeAgainstFloat64) {
  unsigned seed = 3;
  for (DType dtype : {DType::u8, DType::f32, DType::bf16, DType::flex16})
    for (LossKind kind : {LossKind::cross_entropy, LossKind::mse}) {
      // 300 samples: more than one run of a CUDA block's threads, the last run partial.
      const Problem p = make_problem(dtype, 10, 4, 300, seed++);
      expect_matches(p, kind, run(p, kind, p.output),
                     std::string(dtype_name(dtype)) + (kind == LossKind::mse ? " mse" : " ce"));
    }
}

TEST(RateLoss, NonContiguousOutputAndOtherShapes) {
  // The output a view of every other sample of a larger one.
  const Problem wide = make_problem(DType::f32, 3, 7, 2 * 41, 21);
  Problem p{3, 7, 41, wide.output(all, all, slice(0, 82, 2)), {}};
  for (std::int64_t i = 0; i < 41; ++i) p.labels.push_back(static_cast<std::int32_t>(i % 3));
  ASSERT_FALSE(p.output.is_contiguous());
  expect_matches(p, LossKind::cross_entropy, run(p, LossKind::cross_entropy, p.output), "view");
  // More classes than the CUDA kernel keeps in shared memory (their rates read back from global).
  const Problem many = make_problem(DType::flex16, 60, 3, 300, 6);
  expect_matches(many, LossKind::cross_entropy, run(many, LossKind::cross_entropy, many.output),
                 "60 classes");
  // One class, one step, one sample.
  const Problem tiny = make_problem(DType::f32, 1, 1, 1, 5);
  expect_matches(tiny, LossKind::mse, run(tiny, LossKind::mse, tiny.output), "1x1x1");
}

TEST(RateLoss, NaNReachesTheLossAndWinsTheArgmax) {
  Problem p = make_problem(DType::f32, 4, 2, 3, 9);
  std::vector<float> v(p.output.to_floats());
  v[(2 * 2 + 1) * 3 + 1] = std::numeric_limits<float>::quiet_NaN();  // class 2, t 1, sample 1
  p.output = Array::from_floats(v, p.output.shape(), DType::f32, test::device());
  p.labels = {0, 2, 3};
  const DeviceLossResult r = run(p, LossKind::cross_entropy, p.output);
  EXPECT_TRUE(std::isnan(r.loss.to_doubles().at(0)));
  // Sample 1's argmax is the NaN's class, its label.
  const std::vector<double> rate = r.rate.to_doubles();
  std::int64_t expected_correct = 1;  // sample 1
  for (std::int64_t i : {0, 2}) {
    std::int64_t best = 0;
    for (std::int64_t c = 1; c < 4; ++c)
      if (rate[static_cast<std::size_t>(c * 3 + i)] > rate[static_cast<std::size_t>(best * 3 + i)])
        best = c;
    expected_correct += best == p.labels[static_cast<std::size_t>(i)];
  }
  EXPECT_EQ(r.correct.to_doubles().at(0), static_cast<double>(expected_correct));
}

// CUDA's bits are the CPU's: every rate, gradient element, the loss and the count.
TEST(RateLoss, CudaEqualsCpuBitForBit) {
  if (!test::device().is_cuda()) GTEST_SKIP() << "compares a CUDA run with the CPU's";
  unsigned seed = 40;
  for (DType dtype : {DType::u8, DType::f32, DType::flex16})
    for (LossKind kind : {LossKind::cross_entropy, LossKind::mse}) {
      const Problem p = make_problem(dtype, 10, 4, 1000, seed++);
      const DeviceLossResult gpu = run(p, kind, p.output);
      const DeviceLossResult cpu = run(p, kind, p.output.copy_to(Device::cpu()));
      EXPECT_EQ(gpu.loss.to_floats(), cpu.loss.to_floats()) << dtype_name(dtype);
      EXPECT_EQ(gpu.correct.to_floats(), cpu.correct.to_floats()) << dtype_name(dtype);
      EXPECT_EQ(gpu.rate.to_floats(), cpu.rate.to_floats()) << dtype_name(dtype);
      EXPECT_EQ(gpu.grad_output.to_floats(), cpu.grad_output.to_floats()) << dtype_name(dtype);
    }
  // Rates read back from global memory (more classes than shared memory keeps).
  const Problem p = make_problem(DType::f32, 60, 3, 700, 50);
  const DeviceLossResult gpu = run(p, LossKind::cross_entropy, p.output);
  const DeviceLossResult cpu = run(p, LossKind::cross_entropy, p.output.copy_to(Device::cpu()));
  EXPECT_EQ(gpu.loss.to_floats(), cpu.loss.to_floats());
  EXPECT_EQ(gpu.rate.to_floats(), cpu.rate.to_floats());
  EXPECT_EQ(gpu.grad_output.to_floats(), cpu.grad_output.to_floats());
}

}  // namespace
}  // namespace flexkit::nn
