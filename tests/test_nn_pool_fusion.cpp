// A max pool's gradient read by the backward of the neuron before it: neuron_backward given the
// pooled gradient (PooledGradient) against neuron_backward given the full, routed gradient built
// here on the host (the first tap holding the window's maximum takes the window's gradient);
// the routing rule against a direct reference; and Sequential's fused backward of a spiking
// layer and a max pool against the two layers run one at a time.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "flexkit/flexkit.hpp"
#include "flexkit/nn.hpp"
#include "flexkit/portable/neuron_ops.hpp"
#include "support/test_device.hpp"

namespace flexkit {
namespace {

// Activations (C, H, W, T, B), T at axis 3, as the network layers lay them out.
struct Geometry {
  std::int64_t c = 2, h = 4, w = 6, t = 4, b = 8, k = 2;
  Shape full() const { return {c, h, w, t, b}; }
  Shape pooled() const { return {c, h / k, w / k, t, b}; }
  std::int64_t size() const { return c * h * w * t * b; }
  std::int64_t pooled_size() const { return size() / (k * k); }
};

struct Case {
  std::string neuron;  // built-in
  DType grad_dtype;
  Geometry g;
  std::string name;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  // B = 8 and T = 4: four neurons a thread on CUDA; B = 5: one; T = 9: one, more than a batch.
  const std::vector<std::pair<Geometry, std::string>> shapes = {
      {{2, 4, 6, 4, 8, 2}, "k2"},
      {{2, 6, 3, 4, 5, 3}, "k3_odd_batch"},
      {{1, 4, 4, 9, 4, 4}, "k4_long"},
      {{3, 2, 2, 3, 4, 1}, "k1"}};
  for (const std::string neuron : {"if", "lif", "plif"})
    for (const auto& [g, shape] : shapes)
      for (DType d : {DType::f32, DType::flex16, DType::bf16})
        if (neuron == "if" || d != DType::bf16)
          out.push_back({neuron, d, g, neuron + "_" + shape + "_" + std::string(dtype_name(d))});
  return out;
}

// The gradient at neuron element e of the full layout, from the pooled one: the window's value
// where e's tap is the first to hold the window's maximum of `spikes`, else 0.
std::vector<float> route(const Geometry& g, const std::vector<float>& spikes,
                         const std::vector<float>& pooled, std::int64_t* ties) {
  std::vector<float> full(static_cast<std::size_t>(g.size()), 0.0f);
  const std::int64_t tb = g.t * g.b;
  for (std::int64_t c = 0; c < g.c; ++c)
    for (std::int64_t p = 0; p < g.h / g.k; ++p)
      for (std::int64_t q = 0; q < g.w / g.k; ++q)
        for (std::int64_t j = 0; j < tb; ++j) {
          auto at = [&](std::int64_t r, std::int64_t s) {
            return ((c * g.h + p * g.k + r) * g.w + q * g.k + s) * tb + j;
          };
          float top = spikes[static_cast<std::size_t>(at(0, 0))];
          for (std::int64_t u = 0; u < g.k * g.k; ++u)
            top = std::max(top, spikes[static_cast<std::size_t>(at(u / g.k, u % g.k))]);
          int holding = 0;
          bool routed = false;
          for (std::int64_t u = 0; u < g.k * g.k; ++u) {
            const std::int64_t e = at(u / g.k, u % g.k);
            if (spikes[static_cast<std::size_t>(e)] != top) continue;
            ++holding;
            if (!routed)
              full[static_cast<std::size_t>(e)] = pooled[static_cast<std::size_t>(
                  ((c * (g.h / g.k) + p) * (g.w / g.k) + q) * tb + j)];
            routed = true;
          }
          if (holding > 1) ++*ties;
        }
  return full;
}

// Host values in `dtype`, exactly: flex16 mantissas at `iwl`, bf16-representable floats.
Array exact_array(const std::vector<float>& v, const Shape& shape, DType dtype, int iwl,
                  Device device) {
  if (dtype == DType::flex16) {
    std::vector<std::int16_t> m(v.size());
    for (std::size_t i = 0; i < v.size(); ++i)
      m[i] = static_cast<std::int16_t>(std::ldexp(v[i], 15 - iwl));
    return Array::from_flex16(m, iwl, shape, device);
  }
  return Array::from_floats(v, shape, dtype, device);
}

void expect_same_bits(const std::string& what, const Array& a, const Array& b) {
  const std::vector<float> x = a.to_floats(), y = b.to_floats();
  ASSERT_EQ(x.size(), y.size()) << what;
  int bad = 0;
  for (std::size_t i = 0; i < x.size(); ++i)
    if (std::bit_cast<std::uint32_t>(x[i]) != std::bit_cast<std::uint32_t>(y[i]) && bad++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: " << x[i] << " against " << y[i];
}

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

class ThroughPool : public ::testing::TestWithParam<Case> {};

TEST_P(ThroughPool, MatchesTheRoutedFullGradientBitForBit) {
  const Case& k = GetParam();
  const Geometry& g = k.g;
  const Device device = test::device();
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(g.size()));
  // IF integrates the input; LIF and PLIF leak half of the way to it at each step.
  const float bias = k.neuron == "if" ? 0.4f : 1.3f;
  for (float& v : x) v = 1.6f * uniform(rng) + bias;
  // Gradient values every dtype holds exactly: multiples of 2^-7 below 2 (iwl 1 for flex16).
  std::vector<float> pooled(static_cast<std::size_t>(g.pooled_size()));
  for (float& v : pooled) v = std::round(uniform(rng) * 255.0f) / 128.0f;

  Neuron neuron = Neuron::builtin(k.neuron);
  NeuronStorage storage;
  storage.time_axis = 3;
  storage.spike_dtype = DType::u8;
  NamedArrays params;
  for (const NeuronParamInfo& p : neuron.params())
    if (p.learnable) params.emplace(p.name, Array::full({}, -0.4, DType::f32, device));
  const std::string in = neuron.inputs()[0], out = neuron.outputs()[0];
  const NeuronForward f =
      neuron_forward(neuron, NeuronKernelKind::training_forward,
                     {{in, Array::from_vector(x, g.full(), device)}}, {}, params, storage);
  const Array spikes = f.outputs.at(out);
  ASSERT_EQ(spikes.dtype(), DType::u8);
  const std::vector<float> s = spikes.to_floats();
  double fired = 0;
  for (float v : s) fired += v;
  ASSERT_GT(fired, 0.15 * static_cast<double>(s.size()));
  ASSERT_LT(fired, 0.85 * static_cast<double>(s.size()));

  std::int64_t ties = 0;
  const std::vector<float> full = route(g, s, pooled, &ties);
  if (g.k > 1) {  // windows where a later tap holding the maximum must get nothing
    ASSERT_GT(ties, g.pooled_size() / 4) << "too few ties to test the first-tap rule";
  }
  const Array pooled_array = exact_array(pooled, g.pooled(), k.grad_dtype, 1, device);
  const Array full_array = exact_array(full, g.full(), k.grad_dtype, 1, device);
  ASSERT_EQ(pooled_array.to_floats(), pooled);  // held exactly
  ASSERT_EQ(full_array.to_floats(), full);

  const NeuronGradients through_pool = neuron_backward(
      neuron, *f.residuals, {}, {}, {}, false, {{out, PooledGradient{pooled_array, spikes, g.k}}});
  const NeuronGradients routed = neuron_backward(neuron, *f.residuals, {{out, full_array}});
  expect_same_bits("dL/dx", through_pool.inputs.at(in), routed.inputs.at(in));
  double nonzero = 0;
  for (float v : routed.inputs.at(in).to_floats()) nonzero += v != 0 ? 1 : 0;
  EXPECT_GT(nonzero, 0.05 * static_cast<double>(g.size())) << "a vacuous comparison";
  EXPECT_TRUE(through_pool.initial_states.empty());
  for (const auto& [name, grad] : routed.params)
    expect_same_bits("d/d" + name, through_pool.params.at(name), grad);
}

INSTANTIATE_TEST_SUITE_P(Neurons, ThroughPool, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

TEST(ThroughPoolRouting, FirstMaximumOfAnyValues) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> small(0, 2);
  for (int count = 1; count <= 16; ++count)
    for (int trial = 0; trial < 200; ++trial) {
      float taps[16];
      for (int u = 0; u < count; ++u) taps[u] = static_cast<float>(small(rng)) - 0.5f;
      const int first = static_cast<int>(std::max_element(taps, taps + count) - taps);
      for (int self = 0; self < count; ++self)
        EXPECT_EQ(portable::pool_first_max_gradient(taps, count, self, 2.5f),
                  self == first ? 2.5f : 0.0f)
            << count << " taps, tap " << self;
    }
}

TEST(ThroughPool, BadArgumentsAreRefused) {
  const Device device = test::device();
  const Geometry g;
  Neuron neuron = Neuron::builtin("if");
  NeuronStorage storage;
  storage.time_axis = 3;
  storage.spike_dtype = DType::u8;
  const NeuronForward f =
      neuron_forward(neuron, NeuronKernelKind::training_forward,
                     {{"x", Array::full(g.full(), 1.0, DType::f32, device)}}, {}, {}, storage);
  const Array spikes = f.outputs.at("s");
  const Array pooled = Array::zeros(g.pooled(), DType::f32, device);
  auto call = [&](PooledGradient p, const NamedArrays& grads = {}) {
    neuron_backward(neuron, *f.residuals, grads, {}, {}, false, {{"s", std::move(p)}});
  };
  EXPECT_THROW(call({pooled, spikes, 5}), ValueError);  // window too large
  EXPECT_THROW(call({pooled, spikes, 4}), ShapeError);  // 4 does not tile 6
  EXPECT_THROW(call({Array::zeros(g.full(), DType::f32, device), spikes, 2}), ShapeError);
  EXPECT_THROW(call({pooled, Array::zeros(g.full(), DType::f32, device), 2}), ValueError);
  EXPECT_THROW(call({pooled, spikes, 2}, {{"s", Array::zeros(g.full(), DType::f32, device)}}),
               ValueError);  // both a gradient and a pooled one
  EXPECT_THROW(neuron_backward(neuron, *f.residuals, {}, {}, {}, false,
                               {{"v", PooledGradient{pooled, spikes, 2}}}),
               ValueError);  // not an output
}

// Sequential hands the pool's gradient to the spiking layer (with a BatchNorm folded into it, or
// not): the same bits as the pool's own backward followed by the spiking layer's (the same
// network without the pool, the pool run apart), in f32; in flex16 the pool's input gradient
// is then never written (its manager sees no write).
class ThroughPoolNetwork : public ::testing::TestWithParam<bool> {};

TEST_P(ThroughPoolNetwork, MatchesThePoolsOwnBackward) {
  const bool with_batch_norm = GetParam();
  const Device device = test::device();
  const Geometry g{3, 4, 4, 4, 8, 2};
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.3f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(g.size()));
  std::vector<float> r(static_cast<std::size_t>(g.pooled_size()));
  for (float& v : x) v = normal(rng);
  for (float& v : r) v = normal(rng);
  for (const DType precision : {DType::f32, DType::flex16}) {
    std::vector<std::vector<float>> grads;
    std::vector<std::int64_t> pool_writes;
    for (const bool fused : {true, false}) {
      nn::Sequential net;
      if (with_batch_norm) net.add(std::make_unique<nn::BatchNorm>(g.c));
      net.add(std::make_unique<nn::Spiking>(Neuron::builtin("if"), g.t));
      if (fused) net.add(std::make_unique<nn::Pool2d>(nn::Pool2d::Mode::max, g.k));
      nn::Pool2d apart(nn::Pool2d::Mode::max, g.k);
      net.set_precision({precision, false});
      apart.set_precision({precision, false});
      net.to(device);
      apart.to(device);
      net.zero_grad();
      const Array xs = Array::from_vector(x, g.full(), device);
      Array rs = Array::from_vector(r, g.pooled(), device);
      if (precision == DType::flex16) {  // as Sequential stores the loss gradient
        rs = Array::empty(g.pooled(), DType::flex16, device);
        assign(rs, Expr(Array::from_vector(r, g.pooled(), device)),
               {.iwl_policy = IwlPolicy::exact});
      }
      Array gx;
      std::int64_t writes = -1;
      if (fused) {
        net.forward(xs);
        gx = net.backward(rs);
        for (const nn::ManagedTensor& m : net.managed_tensors())
          if (m.name.find("maxpool.input gradient") != std::string::npos)
            writes = m.manager.report().writes;
      } else {
        apart.forward(net.forward(xs));
        gx = net.backward(apart.backward(rs));
        for (const nn::ManagedTensor& m : apart.managed_tensors())
          if (m.name == "input gradient") writes = m.manager.report().writes;
      }
      pool_writes.push_back(writes);
      ASSERT_TRUE(gx.defined()) << (fused ? "fused" : "apart");
      grads.push_back(gx.to_floats());
      for (auto& [name, p] : net.named_parameters()) {
        if (!p->trainable) continue;  // BatchNorm's running estimates
        ASSERT_TRUE(p->grad.defined()) << name << (fused ? " fused" : " apart");
        grads.push_back(p->grad.to_floats());
      }
    }
    const std::size_t half = grads.size() / 2;
    double scale = 0;
    for (float v : grads[half]) scale = std::max(scale, static_cast<double>(std::abs(v)));
    ASSERT_GT(scale, 0) << "a vacuous comparison";
    for (std::size_t i = 0; i < half; ++i) {
      if (precision == DType::f32) {
        EXPECT_EQ(grads[i], grads[half + i]) << "gradient " << i;
        continue;
      }
      // flex16: the pool run apart rounds its input gradient once more, under its own exponent.
      ASSERT_EQ(grads[i].size(), grads[half + i].size());
      double s = 0;
      for (float v : grads[half + i]) s = std::max(s, static_cast<double>(std::abs(v)));
      for (std::size_t e = 0; e < grads[i].size(); ++e)
        EXPECT_NEAR(grads[i][e], grads[half + i][e], 0.02 * s) << "gradient " << i;
    }
    if (precision == DType::flex16) {
      EXPECT_LE(pool_writes[0], 0) << "the fused backward wrote the pool's input gradient";
      EXPECT_EQ(pool_writes[1], 1) << "the pool run apart writes it once";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Blocks, ThroughPoolNetwork, ::testing::Values(false, true),
                         [](const auto& info) {
                           return info.param ? std::string("batch_norm_folded")
                                             : std::string("spiking_only");
                         });

}  // namespace
}  // namespace flexkit
