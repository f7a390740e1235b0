// flexkit::nn layers against central differences of their own forward (L = sum(y * R) for a
// fixed random R, accumulated in double), architecture strings, parameter names and the
// PyTorch-style initialisation. The layers and their arrays are on the --device the binary
// runs on; the differences read the values back to the host.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "flexkit/error.hpp"
#include "flexkit/flexkit.hpp"
#include "flexkit/nn.hpp"
#include "support/test_device.hpp"

namespace flexkit::nn {
namespace {

std::vector<float> uniform_values(std::size_t n, std::mt19937_64& gen, double lo, double hi) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(dist(gen));
  return v;
}

// On the test device, as every array the tests feed the layers.
Array uniform_array(const Shape& shape, std::mt19937_64& gen, double lo = -1.0, double hi = 1.0) {
  return Array::from_vector(
      uniform_values(static_cast<std::size_t>(shape_numel(shape)), gen, lo, hi), shape,
      test::device());
}

double weighted_sum(const Array& y, const std::vector<double>& r) {
  const std::vector<double> v = y.to_doubles();
  EXPECT_EQ(v.size(), r.size());
  double s = 0;
  for (std::size_t i = 0; i < v.size() && i < r.size(); ++i) s += v[i] * r[i];
  return s;
}

// |analytic - numeric| <= rtol (|numeric| + 0.1 max |numeric|) + atol: relative where the
// gradient is large, against the tensor's scale where it is near zero, and never below the
// differences' own noise (float32 outputs summed into L, divided by 2 eps). A gradient that is
// zero by construction (a bias before batch normalisation) must come out near zero.
void expect_gradients_close(const std::string& what, const std::vector<float>& analytic,
                            const std::vector<double>& numeric, double rtol, double atol) {
  ASSERT_EQ(analytic.size(), numeric.size()) << what;
  double scale = 0;
  for (double n : numeric) scale = std::max(scale, std::abs(n));
  int bad = 0;
  for (std::size_t i = 0; i < numeric.size(); ++i) {
    const double tol = rtol * (std::abs(numeric[i]) + 0.1 * scale) + atol;
    if (std::abs(analytic[i] - numeric[i]) > tol && bad++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: analytic " << analytic[i] << ", numeric "
                    << numeric[i] << ", tolerance " << tol;
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << numeric.size() << " elements off";
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// Central differences of L(v) where v is perturbed one element at a time; `evaluate` rebuilds
// whatever v feeds and returns L. The step is the one float32 actually represents.
template <class Evaluate>
std::vector<double> central_differences(std::vector<float> values, double eps,
                                        const Evaluate& evaluate) {
  std::vector<double> out(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    const float keep = values[i];
    const float plus = static_cast<float>(keep + eps), minus = static_cast<float>(keep - eps);
    values[i] = plus;
    const double lp = evaluate(values);
    values[i] = minus;
    const double lm = evaluate(values);
    values[i] = keep;
    out[i] = (lp - lm) / (static_cast<double>(plus) - static_cast<double>(minus));
  }
  return out;
}

// The analytic grad_x and parameter gradients of `model` (a Layer or a Sequential, in training
// mode) against central differences of its forward.
template <class Model>
void check_gradients(Model& model, const std::vector<Parameter*>& params, const Array& x,
                     std::uint64_t seed, double eps = 1e-2, double rtol = 2e-2,
                     double atol = 1e-4) {
  std::mt19937_64 gen(seed);
  const Device device = x.device();
  for (Parameter* p : params) {
    ASSERT_EQ(p->value.device().str(), device.str()) << p->name;
    p->grad = Array::zeros(p->value.shape(), DType::f32, device);
  }
  const Array y = model.forward(x);
  ASSERT_EQ(y.device().str(), device.str());
  const std::vector<float> r = uniform_values(static_cast<std::size_t>(y.size()), gen, -1, 1);
  const std::vector<double> rd(r.begin(), r.end());
  const Array grad_x = model.backward(Array::from_vector(r, y.shape(), device));
  ASSERT_EQ(grad_x.shape(), x.shape());
  ASSERT_EQ(grad_x.device().str(), device.str());

  const Shape x_shape = x.shape();
  const std::vector<double> numeric_x =
      central_differences(x.to_floats(), eps, [&](const std::vector<float>& v) {
        return weighted_sum(model.forward(Array::from_vector(v, x_shape, device)), rd);
      });
  ASSERT_GT(max_abs(numeric_x), 100 * atol) << "a vacuous check: L does not depend on x";
  expect_gradients_close("grad_x", grad_x.to_floats(), numeric_x, rtol, atol);

  for (Parameter* p : params) {
    const std::vector<float> analytic = p->grad.to_floats();
    const Array original = p->value;
    const Shape shape = original.shape();
    const std::vector<double> numeric =
        central_differences(original.to_floats(), eps, [&](const std::vector<float>& v) {
          p->value = Array::from_vector(v, shape, device);
          return weighted_sum(model.forward(x), rd);
        });
    p->value = original;
    expect_gradients_close("grad " + p->name, analytic, numeric, rtol, atol);
  }
}

std::vector<Parameter*> trainable(Layer& layer) {
  std::vector<Parameter*> out;
  for (Parameter* p : layer.parameters())
    if (p->trainable) out.push_back(p);
  return out;
}

void randomise(Layer& layer, std::uint64_t seed) {
  Rng rng(seed);
  layer.reset_parameters(rng);
}

// ---- finite differences ------------------------------------------------------------------------

TEST(NnGradients, LinearWithBias) {
  std::mt19937_64 gen(1);
  Linear layer(5, 4, true);
  layer.to(test::device());
  randomise(layer, 11);
  // Kaiming init leaves the bias small; a larger one makes its gradient check meaningful too.
  layer.bias().value = uniform_array({4}, gen);
  check_gradients(layer, trainable(layer), uniform_array({5, 2, 3}, gen), 2);
}

TEST(NnGradients, LinearWithoutBias) {
  std::mt19937_64 gen(3);
  Linear layer(6, 3, false);
  layer.to(test::device());
  randomise(layer, 12);
  EXPECT_EQ(layer.parameters().size(), 1u);
  check_gradients(layer, trainable(layer), uniform_array({6, 1, 4}, gen), 4);
}

TEST(NnGradients, ConvStride1Padding1) {
  std::mt19937_64 gen(5);
  Conv2d layer(2, 3, 3, 1, 1, true);
  layer.to(test::device());
  randomise(layer, 13);
  layer.bias().value = uniform_array({3}, gen);
  check_gradients(layer, trainable(layer), uniform_array({2, 5, 4, 2, 2}, gen), 6);
}

TEST(NnGradients, ConvStride2NoBias) {
  std::mt19937_64 gen(7);
  Conv2d layer(3, 2, 3, 2, 0, false);
  layer.to(test::device());
  randomise(layer, 14);
  check_gradients(layer, trainable(layer), uniform_array({3, 7, 6, 1, 3}, gen), 8);
}

TEST(NnGradients, BatchNormImages) {
  std::mt19937_64 gen(9);
  BatchNorm layer(3);
  layer.to(test::device());
  for (Parameter* p : layer.parameters()) {
    if (p->name == "weight") p->value = uniform_array({3}, gen, 0.5, 1.5);
    if (p->name == "bias") p->value = uniform_array({3}, gen);
  }
  check_gradients(layer, trainable(layer), uniform_array({3, 2, 3, 2, 2}, gen, -2, 2), 10);
}

TEST(NnGradients, BatchNormFeatures) {
  std::mt19937_64 gen(15);
  BatchNorm layer(4);
  layer.to(test::device());
  for (Parameter* p : layer.parameters()) {
    if (p->name == "weight") p->value = uniform_array({4}, gen, 0.5, 1.5);
    if (p->name == "bias") p->value = uniform_array({4}, gen);
  }
  check_gradients(layer, trainable(layer), uniform_array({4, 3, 5}, gen, -2, 2), 16);
}

TEST(NnGradients, AvgPool) {
  std::mt19937_64 gen(17);
  Pool2d pool(Pool2d::Mode::average, 2);
  pool.to(test::device());
  check_gradients(pool, {}, uniform_array({2, 6, 4, 2, 2}, gen), 18);
  Pool2d overlapping(Pool2d::Mode::average, 3, 2);
  overlapping.to(test::device());
  check_gradients(overlapping, {}, uniform_array({2, 7, 5, 1, 2}, gen), 19);
}

// Distinct values 0.05 apart, so that a step of 0.01 never changes which element is the maximum.
Array distinct_values(const Shape& shape, std::mt19937_64& gen) {
  std::vector<float> v(static_cast<std::size_t>(shape_numel(shape)));
  std::vector<int> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), gen);
  const double centre = 0.5 * static_cast<double>(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(0.05 * (order[i] - centre));
  return Array::from_vector(v, shape, test::device());
}

TEST(NnGradients, MaxPool) {
  std::mt19937_64 gen(21);
  Pool2d pool(Pool2d::Mode::max, 2);
  pool.to(test::device());
  check_gradients(pool, {}, distinct_values({2, 6, 4, 2, 2}, gen), 22);
  Pool2d overlapping(Pool2d::Mode::max, 3, 2);
  overlapping.to(test::device());
  check_gradients(overlapping, {}, distinct_values({2, 7, 7, 1, 2}, gen), 23);
}

// flex16 pooling of flex16 activations (the maximum recomputed from the input in the backward):
// with tiling windows every gradient element is a copy of one of grad_y's or 0 (max) or
// grad_y / k² (average, k² a power of two here), so the flex16 layer's gradient equals the f32
// layer's on the same values; overlapping windows' sums are that rounded once.
Array converted(const Array& a, DType dtype) {
  Array out = Array::empty(a.shape(), dtype, a.device());
  assign(out, Expr(a), {.iwl_policy = IwlPolicy::exact});  // flex16: the finest iwl holding a
  return out;
}

TEST(NnGradients, Flex16PoolingMatchesF32OnTheSameValues) {
  std::mt19937_64 gen(24);
  for (auto [mode, kernel, stride, shape] :
       {std::tuple{Pool2d::Mode::max, 2, 2, Shape{3, 6, 8, 2, 2}},
        std::tuple{Pool2d::Mode::max, 3, 3, Shape{2, 6, 9, 1, 3}},
        std::tuple{Pool2d::Mode::max, 3, 2, Shape{2, 7, 7, 2, 1}},
        std::tuple{Pool2d::Mode::average, 2, 2, Shape{3, 6, 8, 2, 2}}}) {
    SCOPED_TRACE(testing::Message() << "kernel " << kernel << " stride " << stride);
    Pool2d f32_pool(mode, kernel, stride), flex_pool(mode, kernel, stride);
    f32_pool.to(test::device());
    flex_pool.to(test::device());
    flex_pool.set_precision({DType::flex16, false});
    f32_pool.set_training(true);
    flex_pool.set_training(true);
    const Array x_flex = converted(distinct_values(shape, gen), DType::flex16);
    const Array x = converted(x_flex, DType::f32);
    const Array y = f32_pool.forward(x);
    const Array y_flex = flex_pool.forward(x_flex);
    ASSERT_EQ(y_flex.dtype(), DType::flex16);
    const Array g_flex = converted(uniform_array(y.shape(), gen), DType::flex16);
    const Array g = converted(g_flex, DType::f32);
    const std::vector<float> want = f32_pool.backward(g).to_floats();
    const Array got = flex_pool.backward(g_flex);
    ASSERT_EQ(got.dtype(), DType::flex16);
    ASSERT_EQ(got.shape(), x.shape());
    // Overlapping windows add up copies: their sum, rounded once at the gradient's iwl.
    std::vector<float> rounded(want.size());
    for (std::size_t i = 0; i < want.size(); ++i)
      rounded[i] = static_cast<float>(
          std::ldexp(std::nearbyint(std::ldexp(static_cast<double>(want[i]), 15 - got.iwl())),
                     got.iwl() - 15));
    EXPECT_EQ(got.to_floats(), rounded);
    if (stride == kernel) {
      EXPECT_EQ(rounded, want);  // tiled: nothing to round
    }
    if (mode == Pool2d::Mode::max) {  // one nonzero a window, each a copy of grad_y's
      double sum_got = 0, sum_g = 0;
      for (float v : want) sum_got += v;
      for (float v : g.to_floats()) sum_g += v;
      EXPECT_NEAR(sum_got, sum_g, 1e-9 * static_cast<double>(want.size()));
    }
  }
}

TEST(NnGradients, Flatten) {
  std::mt19937_64 gen(25);
  Flatten flatten;
  flatten.to(test::device());
  const Array x = uniform_array({2, 3, 4, 2, 3}, gen);
  const Array y = flatten.forward(x);
  EXPECT_EQ(y.shape(), (Shape{24, 2, 3}));
  EXPECT_EQ(y.to_floats(), x.to_floats());
  check_gradients(flatten, {}, x, 26);
}

TEST(NnGradients, SequentialLinearBatchNormLinear) {
  std::mt19937_64 gen(27);
  Sequential net = parse_architecture("linear(6) bn linear(3)", {5});
  net.to(test::device());
  Rng rng(28);
  net.reset_parameters(rng);
  for (auto& [name, p] : net.named_parameters()) {
    if (name == "1.weight") p->value = uniform_array({6}, gen, 0.5, 1.5);
    if (name == "1.bias") p->value = uniform_array({6}, gen);
  }
  net.set_training(true);
  check_gradients(net, net.parameters(), uniform_array({5, 2, 4}, gen, -2, 2), 29);
}

// Training needs no gradient for the network's input: with it off, the layers in front of the
// first trainable parameter skip their input gradients (here the convolution's bprop, and the
// flatten before the linear layer in the second network) and backward returns an undefined Array,
// while every parameter gradient is bit for bit what it is with the input gradient on.
TEST(NnGradients, SequentialWithoutTheInputGradientKeepsTheParameterGradients) {
  for (const auto& [architecture, features] :
       {std::pair<std::string, Shape>{"conv(4, 3, padding=1) bn flatten linear(3)", {2, 5, 5}},
        std::pair<std::string, Shape>{"flatten linear(6) bn linear(3)", {2, 3, 2}}}) {
    SCOPED_TRACE(architecture);
    std::mt19937_64 gen(41);
    Sequential net = parse_architecture(architecture, features);
    net.to(test::device());
    Rng rng(42);
    net.reset_parameters(rng);
    net.set_training(true);
    Shape x_shape = features;
    x_shape.insert(x_shape.end(), {1, 6});
    const Array x = uniform_array(x_shape, gen, -2, 2);
    auto gradients = [&](bool input_gradient, Array& grad_x) {
      net.zero_grad();
      net.set_input_gradient(input_gradient);
      const Array y = net.forward(x);
      std::mt19937_64 g_gen(43);
      grad_x = net.backward(uniform_array(y.shape(), g_gen));
      std::vector<std::vector<float>> out;
      for (Parameter* p : net.parameters()) out.push_back(p->grad.to_floats());
      return out;
    };
    Array with_x, without_x;
    const auto with = gradients(true, with_x);
    const auto without = gradients(false, without_x);
    ASSERT_TRUE(with_x.defined());
    EXPECT_EQ(with_x.shape(), x.shape());
    EXPECT_FALSE(without_x.defined());
    ASSERT_EQ(with.size(), without.size());
    for (std::size_t i = 0; i < with.size(); ++i) {
      double magnitude = 0;
      for (float v : with[i]) magnitude = std::max(magnitude, std::abs(double{v}));
      EXPECT_GT(magnitude, 0.0) << "parameter " << i << " has no gradient to compare";
      EXPECT_EQ(with[i], without[i]) << "parameter " << i;
    }
    Array again;
    gradients(true, again);  // switched back on, the input gradient is there again
    ASSERT_TRUE(again.defined());
    EXPECT_EQ(again.to_floats(), with_x.to_floats());
  }
}

// zero_grad lets a layer write its parameters' gradients instead of adding them to the zeros it
// left (no read of the zeros): the same bits as adding, in f32 and flex16 (value and exponent, the
// Autoflex history alike), while a second backward without zero_grad still adds to the first.
TEST(NnGradients, ZeroedGradientsAreWrittenAsIfAddedTo) {
  for (const DType dtype : {DType::f32, DType::flex16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    const std::string architecture = "conv(4, 3, padding=1) bn flatten linear(3)";
    auto make = [&] {
      Sequential net = parse_architecture(architecture, {2, 5, 5});
      net.to(test::device());
      Rng rng(52);
      net.reset_parameters(rng);
      net.set_precision({dtype, false});
      net.set_training(true);
      return net;
    };
    Sequential written = make(), added = make();
    auto step = [&](Sequential& net, bool zero, bool add_to_zeros, std::uint64_t seed) {
      if (zero) net.zero_grad();
      if (add_to_zeros)
        for (Parameter* p : net.parameters()) p->grad_zeroed = false;
      std::mt19937_64 gen(seed);
      const Array y = net.forward(uniform_array({2, 5, 5, 2, 3}, gen, -2, 2));
      Array g = uniform_array(y.shape(), gen);
      if (dtype == DType::flex16) g = converted(g, DType::flex16);
      net.backward(g);
    };
    auto gradients = [](Sequential& net) {
      std::vector<std::pair<std::vector<float>, int>> out;
      for (Parameter* p : net.parameters())
        out.emplace_back(p->grad.to_floats(), p->grad.dtype() == DType::flex16 ? p->grad.iwl() : 0);
      return out;
    };
    for (std::uint64_t seed : {61, 62, 63}) {
      step(written, true, false, seed);
      step(added, true, true, seed);
      const auto w = gradients(written), a = gradients(added);
      ASSERT_EQ(w.size(), a.size());
      for (std::size_t i = 0; i < w.size(); ++i) {
        double magnitude = 0;
        for (float v : w[i].first) magnitude = std::max(magnitude, std::abs(double{v}));
        EXPECT_GT(magnitude, 0.0) << "parameter " << i << " has no gradient to compare";
        EXPECT_EQ(w[i], a[i]) << "parameter " << i << ", step seed " << seed;
      }
    }
    // Again on the last step's input, without zero_grad: every gradient is twice the last one
    // (exactly in f32, to the new exponent's rounding in flex16, where a value Autoflex saturated
    // the first time is left out).
    const auto once = gradients(written);
    step(written, false, false, 63);
    const auto twice = gradients(written);
    std::size_t compared = 0, total = 0;
    for (std::size_t i = 0; i < once.size(); ++i) {
      const bool flex = dtype == DType::flex16;
      const double once_max = flex ? std::ldexp(32767.0, once[i].second - 15) : INFINITY;
      const double unit = flex ? std::ldexp(1.0, twice[i].second - 15) : 0.0;
      for (std::size_t j = 0; j < once[i].first.size(); ++j, ++total) {
        if (std::abs(once[i].first[j]) >= once_max) continue;
        ++compared;
        ASSERT_LE(std::abs(twice[i].first[j] - 2.0 * once[i].first[j]), 0.5 * unit)
            << "parameter " << i << "[" << j << "]";
      }
    }
    EXPECT_GE(compared, total * 9 / 10);
  }
}

// The layers in front of the first trainable one get no backward without the input gradient;
// what their training forward kept goes with the step instead of being held to the next forward.
TEST(NnGradients, SequentialDropsWhatSkippedLayersKept) {
  std::mt19937_64 gen(45);
  Sequential net = parse_architecture("maxpool(2) flatten linear(3)", {2, 4, 4});
  net.to(test::device());
  Rng rng(46);
  net.reset_parameters(rng);
  net.set_training(true);
  net.set_input_gradient(false);
  const Array x = uniform_array({2, 4, 4, 1, 5}, gen, -2, 2);
  const Array y = net.forward(x);
  std::mt19937_64 g_gen(47);
  const Array g = uniform_array(y.shape(), g_gen);
  EXPECT_FALSE(net.backward(g).defined());
  // The pool's saved input is gone: a backward through it has nothing left to work from.
  EXPECT_THROW(net[0].backward(uniform_array({2, 2, 2, 1, 5}, g_gen)), ValueError);
  // The next step trains as before.
  net.forward(x);
  EXPECT_FALSE(net.backward(g).defined());
}

TEST(NnGradients, AccumulateOverBackwardCalls) {
  std::mt19937_64 gen(31);
  Linear layer(3, 2, true);
  layer.to(test::device());
  randomise(layer, 32);
  const Array x = uniform_array({3, 1, 4}, gen);
  const Array g = uniform_array({2, 1, 4}, gen);
  layer.weight().grad = Array::zeros({2, 3}, DType::f32, test::device());
  layer.bias().grad = Array::zeros({2}, DType::f32, test::device());
  layer.forward(x);
  layer.backward(g);
  const std::vector<float> once = layer.weight().grad.to_floats();
  layer.forward(x);
  layer.backward(g);
  const std::vector<float> twice = layer.weight().grad.to_floats();
  for (std::size_t i = 0; i < once.size(); ++i) EXPECT_FLOAT_EQ(twice[i], 2 * once[i]);
}

// Every layer takes strided views (here the batch axis outermost in memory) as well as
// contiguous arrays, with the same results.
TEST(NnLayers, StridedInputsGiveTheContiguousResults) {
  std::mt19937_64 gen(35);
  // (N, C, H, W, T) in memory, viewed as (C, H, W, T, N).
  const Array image = uniform_array({2, 3, 6, 6, 2}, gen).transpose({1, 2, 3, 4, 0});
  const Array flat = uniform_array({2, 5, 3}, gen).transpose({1, 2, 0});  // (5, T=3, N=2)
  ASSERT_FALSE(image.is_contiguous());
  ASSERT_FALSE(flat.is_contiguous());
  std::vector<std::pair<std::unique_ptr<Layer>, const Array*>> cases;
  cases.emplace_back(std::make_unique<Linear>(5, 4), &flat);
  cases.emplace_back(std::make_unique<Conv2d>(3, 4, 3, 1, 1), &image);
  cases.emplace_back(std::make_unique<BatchNorm>(3), &image);
  cases.emplace_back(std::make_unique<Pool2d>(Pool2d::Mode::max, 2), &image);
  cases.emplace_back(std::make_unique<Pool2d>(Pool2d::Mode::average, 3, 2), &image);
  cases.emplace_back(std::make_unique<Flatten>(), &image);
  cases.emplace_back(std::make_unique<Spiking>(Neuron::builtin("lif"), 2), &image);
  for (auto& [layer, x] : cases) {
    SCOPED_TRACE(layer->describe());
    layer->to(test::device());
    Rng rng(36);
    layer->reset_parameters(rng);
    const Array contiguous = x->clone();
    const Array y = layer->forward(contiguous);
    const Array gy = uniform_array(y.shape(), gen);
    const std::vector<float> want_grad = layer->backward(gy).to_floats();
    try {
      EXPECT_EQ(layer->forward(*x).to_floats(), y.to_floats());
      EXPECT_EQ(layer->backward(gy).to_floats(), want_grad);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "a strided input throws: " << e.what();
    }
  }
}

TEST(NnLayers, DropoutIsTheIdentityInEvaluation) {
  std::mt19937_64 gen(37);
  const Array x = uniform_array({4, 3, 2}, gen);
  Dropout dropout(0.5, 9);
  dropout.to(test::device());
  dropout.set_training(false);
  EXPECT_EQ(dropout.forward(x).to_floats(), x.to_floats());
  EXPECT_EQ(dropout.backward(x).to_floats(), x.to_floats());
}

TEST(NnLayers, SpikingRejectsAnotherNumberOfSteps) {
  Spiking lif(Neuron::builtin("lif"), 4);
  lif.to(test::device());
  EXPECT_THROW(lif.forward(Array::zeros({3, 2, 5}, DType::f32, test::device())), ShapeError);
  // T = 1 is the repeated input.
  EXPECT_EQ(lif.forward(Array::zeros({3, 1, 5}, DType::f32, test::device())).shape(),
            (Shape{3, 4, 5}));
}

// ---- architecture strings ----------------------------------------------------------------------

template <class Error>
std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw the wrong type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "did not throw";
  return "";
}

TEST(NnArchitecture, BuildsTheLayersItNames) {
  Sequential net = parse_architecture(
      "conv(8, 3, padding=1) bn lif maxpool(2) dropout(0.25) flatten linear(10, bias=false) plif",
      {1, 8, 8}, {.time_steps = 3});
  const std::vector<std::string> want = {"conv(1, 8, 3, stride=1, padding=1, bias=true)",
                                         "bn(8)",
                                         "lif",
                                         "maxpool(2, stride=2)",
                                         "dropout(0.25)",
                                         "flatten",
                                         "linear(128, 10, bias=false)",
                                         "plif"};
  ASSERT_EQ(net.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_EQ(net[i].describe(), want[i]) << i;
  EXPECT_EQ(net[0].kind(), "conv");
  EXPECT_EQ(net[2].kind(), "lif");
  EXPECT_EQ(net[3].kind(), "maxpool");
  EXPECT_EQ(net.check_shapes({1, 8, 8}), (Shape{10}));
  const auto* spiking = dynamic_cast<const Spiking*>(&net[2]);
  ASSERT_NE(spiking, nullptr);
  EXPECT_EQ(spiking->time_steps(), 3);

  // The input with T = 1 runs once through conv and bn; the spiking layer repeats it.
  net.to(test::device());
  std::mt19937_64 gen(41);
  const Array out = net.forward(uniform_array({1, 8, 8, 1, 2}, gen));
  EXPECT_EQ(out.shape(), (Shape{10, 3, 2}));
  for (float s : out.to_floats()) EXPECT_TRUE(s == 0.0f || s == 1.0f) << s;
}

TEST(NnArchitecture, SeparatorsAndAliases) {
  Sequential net = parse_architecture("flatten-fc(4)|linear(2),if", {2, 3});
  ASSERT_EQ(net.size(), 4u);
  EXPECT_EQ(net[1].describe(), "linear(6, 4, bias=true)");
  EXPECT_EQ(net[2].describe(), "linear(4, 2, bias=true)");
  EXPECT_EQ(net[3].kind(), "if");
}

TEST(NnArchitecture, SyntaxErrorsGiveThePosition) {
  std::string m = message_of<ValueError>([] { parse_architecture("flatten linear(10) @", {4}); });
  EXPECT_NE(m.find("position 20"), std::string::npos) << m;
  m = message_of<ValueError>([] { parse_architecture("flatten linear(10", {4}); });
  EXPECT_NE(m.find("position 9"), std::string::npos) << m;
  EXPECT_NE(m.find("never closed"), std::string::npos) << m;
  m = message_of<ValueError>([] { parse_architecture("flatten linear(ten)", {4}); });
  EXPECT_NE(m.find("position 16"), std::string::npos) << m;
  EXPECT_NE(m.find("integer"), std::string::npos) << m;
  m = message_of<ValueError>([] { parse_architecture("flatten linear(10, bais=false)", {4}); });
  EXPECT_NE(m.find("position 20"), std::string::npos) << m;
  EXPECT_NE(m.find("bais"), std::string::npos) << m;
  m = message_of<ValueError>([] { parse_architecture("  ", {4}); });
  EXPECT_NE(m.find("empty"), std::string::npos) << m;
}

TEST(NnArchitecture, UnknownLayer) {
  const std::string m =
      message_of<ValueError>([] { parse_architecture("flatten frobnicate(3) lif", {4}); });
  EXPECT_NE(m.find("unknown layer 'frobnicate'"), std::string::npos) << m;
  EXPECT_NE(m.find("position 9"), std::string::npos) << m;
}

TEST(NnArchitecture, ShapesThatDoNotChainNameTheLayer) {
  // 6x6 -> conv 3: 4x4 -> maxpool 2: 2x2, too small for a 5x5 filter.
  std::string m = message_of<ShapeError>([] {
    parse_architecture("conv(4, 3) bn maxpool(2) conv(8, 5)", {1, 6, 6});
  });
  EXPECT_NE(m.find("layer 3"), std::string::npos) << m;
  EXPECT_NE(m.find("conv(8, 5)"), std::string::npos) << m;
  // linear needs flat features.
  m = message_of<ShapeError>([] { parse_architecture("bn lif linear(3)", {2, 4, 4}); });
  EXPECT_NE(m.find("layer 2"), std::string::npos) << m;
  EXPECT_NE(m.find("flatten"), std::string::npos) << m;

  // A hand-built Sequential reports the same through check_shapes.
  Sequential net;
  net.add(std::make_unique<Flatten>());
  net.add(std::make_unique<Linear>(16, 8));
  net.add(std::make_unique<BatchNorm>(8));
  net.add(std::make_unique<Linear>(7, 2));
  m = message_of<ShapeError>([&] { net.check_shapes({1, 4, 4}); });
  EXPECT_NE(m.find("layer 3"), std::string::npos) << m;
  EXPECT_NE(m.find("linear(7, 2, bias=true)"), std::string::npos) << m;
}

TEST(NnArchitecture, ZeroTimeStepsRejected) {
  EXPECT_THROW(parse_architecture("flatten linear(3) lif", {4}, {.time_steps = 0}), ValueError);
  EXPECT_THROW(parse_architecture("flatten", {4}, {.time_steps = -2}), ValueError);
  EXPECT_THROW(Spiking(Neuron::builtin("lif"), 0), ValueError);
}

TEST(NnArchitecture, NamedParameters) {
  Sequential net = parse_architecture("linear(4) bn linear(2, bias=false) plif", {3});
  net.to(test::device());
  std::vector<std::string> names;
  for (const auto& [name, p] : net.named_parameters()) names.push_back(name);
  const std::vector<std::string> want = {"0.weight",       "0.bias",        "1.weight", "1.bias",
                                         "1.running_mean", "1.running_var", "2.weight", "3.w"};
  EXPECT_EQ(names, want);
  for (const auto& [name, p] : net.named_parameters()) {
    EXPECT_EQ(p->trainable, name.find("running") == std::string::npos) << name;
    EXPECT_EQ(p->value.device().str(), test::device().str()) << name;
  }
  EXPECT_EQ(net.parameters().size(), 6u);  // the running statistics are buffers
  EXPECT_EQ(net.named_parameters()[0].second->value.shape(), (Shape{4, 3}));
  EXPECT_EQ(net.named_parameters()[4].second->value.to_floats(), std::vector<float>(4, 0.0f));
  EXPECT_EQ(net.named_parameters()[5].second->value.to_floats(), std::vector<float>(4, 1.0f));
}

// ---- initialisation
// ------------------------------------------------------------------------------

void expect_uniform(const std::vector<float>& v, double bound, const std::string& what) {
  ASSERT_FALSE(v.empty());
  double sum = 0, sum_sq = 0, lo = bound, hi = -bound;
  for (float x : v) {
    EXPECT_LE(std::abs(x), bound) << what;
    sum += x;
    lo = std::min(lo, static_cast<double>(x));
    hi = std::max(hi, static_cast<double>(x));
  }
  const double n = static_cast<double>(v.size());
  const double mean = sum / n;
  for (float x : v) sum_sq += (x - mean) * (x - mean);
  const double var = sum_sq / n;
  const double want_var = bound * bound / 3;
  // Standard errors: bound/sqrt(3n) for the mean, about 0.9 var/sqrt(n) for the variance.
  EXPECT_LT(std::abs(mean), 5 * bound / std::sqrt(3 * n)) << what;
  EXPECT_NEAR(var, want_var, 5 * 0.9 * want_var / std::sqrt(n)) << what;
  // The extremes reach close to the bound.
  EXPECT_GT(hi, bound * (1 - 20 / n)) << what;
  EXPECT_LT(lo, -bound * (1 - 20 / n)) << what;
}

TEST(NnInit, LinearKaimingUniform) {
  Linear layer(400, 300);
  layer.to(test::device());
  Rng rng(5);
  layer.reset_parameters(rng);
  EXPECT_EQ(layer.weight().value.device().str(), test::device().str());
  EXPECT_EQ(layer.bias().value.device().str(), test::device().str());
  const double bound = 1.0 / std::sqrt(400.0);
  expect_uniform(layer.weight().value.to_floats(), bound, "weight");
  expect_uniform(layer.bias().value.to_floats(), bound, "bias");

  Linear again(400, 300);
  again.to(test::device());
  Rng same(5);
  again.reset_parameters(same);
  EXPECT_EQ(again.weight().value.to_floats(), layer.weight().value.to_floats());
  Rng other(6);
  again.reset_parameters(other);
  EXPECT_NE(again.weight().value.to_floats(), layer.weight().value.to_floats());
}

TEST(NnInit, ConvKaimingUniform) {
  Conv2d layer(16, 32, 3);
  layer.to(test::device());
  Rng rng(7);
  layer.reset_parameters(rng);
  EXPECT_EQ(layer.weight().value.shape(), (Shape{16, 3, 3, 32}));
  EXPECT_EQ(layer.weight().value.device().str(), test::device().str());
  EXPECT_EQ(layer.bias().value.device().str(), test::device().str());
  const double bound = 1.0 / std::sqrt(16.0 * 9.0);
  expect_uniform(layer.weight().value.to_floats(), bound, "weight");
  expect_uniform(layer.bias().value.to_floats(), bound, "bias");
}

// The loss without a read: written into slots of a larger record on the device, checked
// against float64 on the host (both losses, the correct count, the gradient).
TEST(NnLoss, OnDeviceIntoSlotsMatchesFloat64) {
  std::mt19937_64 gen(11);
  const std::int64_t classes = 10, steps = 4, n = 37;
  const Array out = uniform_array({classes, steps, n}, gen, 0.0, 1.0);
  std::vector<std::int32_t> labels(static_cast<std::size_t>(n));
  for (auto& l : labels) l = static_cast<std::int32_t>(gen() % classes);
  const Array label_array = Array::from_vector(labels, {n}, test::device());
  const std::vector<double> o = out.to_doubles();
  std::vector<double> rate(static_cast<std::size_t>(classes * n), 0.0);
  for (std::int64_t c = 0; c < classes; ++c)
    for (std::int64_t t = 0; t < steps; ++t)
      for (std::int64_t i = 0; i < n; ++i)
        rate[c * n + i] += o[(c * steps + t) * n + i] / static_cast<double>(steps);
  double mse = 0, ce = 0, correct = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t label = labels[static_cast<std::size_t>(i)];
    double top = -1e300, log_sum = 0;
    std::int64_t best = 0;
    for (std::int64_t c = 0; c < classes; ++c) {
      const double r = rate[c * n + i];
      mse += (r - (c == label)) * (r - (c == label));
      if (r > top) top = r, best = c;
    }
    for (std::int64_t c = 0; c < classes; ++c) log_sum += std::exp(rate[c * n + i] - top);
    ce += std::log(log_sum) + top - rate[label * n + i];
    correct += best == label;
  }
  mse /= static_cast<double>(n * classes);
  ce /= static_cast<double>(n);

  Array record = Array::full({3, 4}, -7.0, DType::f32, test::device());
  const DeviceLossResult m = rate_loss_on_device(out, label_array, LossKind::mse,
                                                 record(1, slice(0, 1)), record(1, slice(3, 4)));
  const DeviceLossResult e = rate_loss_on_device(out, label_array, LossKind::cross_entropy,
                                                 record(2, slice(1, 2)), record(2, slice(2, 3)));
  const std::vector<double> r = record.to_doubles();
  EXPECT_NEAR(r[4], mse, 1e-6 * mse);
  EXPECT_EQ(r[7], correct);
  EXPECT_NEAR(r[9], ce, 1e-6 * ce);
  EXPECT_EQ(r[10], correct);
  for (std::size_t i : {0, 1, 2, 3, 5, 6, 8, 11}) EXPECT_EQ(r[i], -7.0) << i;  // untouched
  // The mse gradient: 2 (rate − one-hot) / (N · classes · T) at every step.
  const std::vector<double> g = m.grad_output.to_doubles();
  for (std::int64_t c = 0; c < classes; ++c)
    for (std::int64_t t = 0; t < steps; ++t)
      for (std::int64_t i = 0; i < n; ++i) {
        const double want = 2.0 * (rate[c * n + i] - (c == labels[static_cast<std::size_t>(i)])) /
                            static_cast<double>(n * classes * steps);
        ASSERT_NEAR(g[(c * steps + t) * n + i], want, 1e-7) << c << " " << t << " " << i;
      }
  // The reading form agrees with the slots.
  const LossResult read = rate_loss(out, label_array, LossKind::cross_entropy);
  EXPECT_NEAR(read.loss, ce, 1e-6 * ce);
  EXPECT_EQ(static_cast<double>(read.correct), correct);
  EXPECT_EQ(e.rate.shape(), (Shape{classes, n}));
  // A slot that is not one f32 element is refused.
  EXPECT_THROW(rate_loss_on_device(out, label_array, LossKind::mse, record(0, slice(0, 2))),
               ShapeError);
  // A shard of a global batch of 3N: the same loss, the gradient of the global mean.
  const std::int64_t global = 3 * n;
  const DeviceLossResult shard =
      rate_loss_on_device(out, label_array, LossKind::mse, {}, {}, global);
  EXPECT_NEAR(shard.loss.to_doubles().at(0), mse, 1e-6 * mse);
  const std::vector<double> gs = shard.grad_output.to_doubles();
  for (std::int64_t c = 0; c < classes; ++c)
    for (std::int64_t i = 0; i < n; ++i) {
      const double want = 2.0 * (rate[c * n + i] - (c == labels[static_cast<std::size_t>(i)])) /
                          static_cast<double>(global * classes * steps);
      ASSERT_NEAR(gs[(c * steps) * n + i], want, 1e-8) << c << " " << i;
    }
  const DeviceLossResult ce_shard =
      rate_loss_on_device(out, label_array, LossKind::cross_entropy, {}, {}, global);
  const std::vector<double> ge = e.grad_output.to_doubles(),
                            ges = ce_shard.grad_output.to_doubles();
  for (std::size_t i = 0; i < ge.size(); ++i) ASSERT_NEAR(ges[i], ge[i] / 3.0, 1e-8) << i;
  EXPECT_THROW(rate_loss_on_device(out, label_array, LossKind::mse, {}, {}, n - 1), ValueError);
}

}  // namespace
}  // namespace flexkit::nn
