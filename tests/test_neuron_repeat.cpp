// A one-step input read at every step (NeuronStorage::repeat_steps) against the same input
// repeated T times in memory: the forward results are bit for bit those of the repeated call, and
// the input gradient is its gradient summed over the steps (float64 sum on the host).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "flexkit/error.hpp"
#include "flexkit/expr.hpp"
#include "flexkit/neuron.hpp"
#include "support/random_arrays.hpp"
#include "support/test_device.hpp"

namespace flexkit {
namespace {

constexpr std::int64_t C = 3, H = 2, W = 5, T = 5, N = 4;  // T not a multiple of any batch

std::vector<std::uint32_t> bits(const Array& a) {
  std::vector<std::uint32_t> out;
  for (float v : a.to_floats()) out.push_back(std::bit_cast<std::uint32_t>(v));
  return out;
}

struct Case {
  std::string neuron;
  DType input_dtype;
};

class Repeat : public ::testing::TestWithParam<Case> {};

TEST_P(Repeat, MatchesTheInputRepeatedInMemory) {
  const Case& k = GetParam();
  const Neuron n = Neuron::builtin(k.neuron);
  Array x1 = test::uniform_array({C, H, W, 1, N}, 3, -0.5f, 2.5f);
  if (k.input_dtype == DType::u8)  // spikes
    x1 = evaluate(ge(Expr(x1), Expr(1.0)), DType::u8);
  else if (k.input_dtype != DType::f32)
    x1 = evaluate(Expr(x1), k.input_dtype);
  Array repeated = Array::empty({C, H, W, T, N}, x1.dtype(), test::device());
  assign(repeated, Expr(x1));  // broadcast along T
  NamedArrays params;
  for (const NeuronParamInfo& p : n.params())
    if (p.learnable)
      params.emplace(p.name, Array::full({}, p.value + 0.1, DType::f32, test::device()));

  NeuronStorage storage;
  storage.time_axis = 3;
  const NeuronForward want =
      neuron_forward(n, NeuronKernelKind::training_forward, {{"x", repeated}}, {}, params, storage);
  storage.repeat_steps = T;
  const NeuronForward got =
      neuron_forward(n, NeuronKernelKind::training_forward, {{"x", x1}}, {}, params, storage);
  const std::string out = n.outputs()[0];
  ASSERT_EQ(got.outputs.at(out).shape(), (Shape{C, H, W, T, N}));
  EXPECT_EQ(bits(got.outputs.at(out)), bits(want.outputs.at(out)));
  for (const auto& [state, v] : want.final_states)
    EXPECT_EQ(bits(got.final_states.at(state)), bits(v)) << state;
  double fired = 0;
  for (float s : got.outputs.at(out).to_floats()) fired += s;
  ASSERT_GT(fired, 0) << "no spikes: a vacuous comparison";

  const Array gs = test::uniform_array({C, H, W, T, N}, 5, -1, 1);
  const NeuronGradients gw = neuron_backward(n, *want.residuals, {{out, gs}});
  const NeuronGradients gg = neuron_backward(n, *got.residuals, {{out, gs}});
  const Array gx = gg.inputs.at("x");
  ASSERT_EQ(gx.shape(), x1.shape());
  // The repeated call's gradient summed over T, in float64.
  const std::vector<double> full = gw.inputs.at("x").to_doubles(), mine = gx.to_doubles();
  double scale = 0;
  for (double v : full) scale = std::max(scale, std::abs(v));
  ASSERT_GT(scale, 0);
  for (std::int64_t o = 0; o < C * H * W; ++o)
    for (std::int64_t i = 0; i < N; ++i) {
      double sum = 0;
      for (std::int64_t t = 0; t < T; ++t)
        sum += full[static_cast<std::size_t>((o * T + t) * N + i)];
      EXPECT_NEAR(mine[static_cast<std::size_t>(o * N + i)], sum, 1e-6 * scale * T)
          << "neuron " << o * N + i;
    }
  for (const auto& [name, g] : gw.params)  // the same accumulation, step by step
    EXPECT_EQ(bits(gg.params.at(name)), bits(g)) << name;
}

INSTANTIATE_TEST_SUITE_P(Neurons, Repeat,
                         ::testing::Values(Case{"lif", DType::f32}, Case{"plif", DType::f32},
                                           Case{"alif", DType::bf16}, Case{"if", DType::u8}),
                         [](const auto& info) {
                           return info.param.neuron + "_" +
                                  std::string(dtype_name(info.param.input_dtype));
                         });

TEST(Repeat, BadRequestsAreRefused) {
  const Neuron n = Neuron::builtin("lif");
  NeuronStorage storage;
  storage.time_axis = 1;
  storage.repeat_steps = 4;
  const Array multi = Array::zeros({3, 2, 4}, DType::f32, test::device());
  EXPECT_THROW(
      neuron_forward(n, NeuronKernelKind::training_forward, {{"x", multi}}, {}, {}, storage),
      ShapeError);
  storage.repeat_steps = -1;
  const Array one = Array::zeros({3, 1, 4}, DType::f32, test::device());
  EXPECT_THROW(neuron_forward(n, NeuronKernelKind::inference, {{"x", one}}, {}, {}, storage),
               ValueError);
}

}  // namespace
}  // namespace flexkit
