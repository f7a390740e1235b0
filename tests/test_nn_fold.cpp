// A BatchNorm folded into the spiking layer after it (Sequential in training): the forward and
// backward of the pair against an independent float64 model (batch statistics, normalisation and
// affine written out here, the neuron from neuron_reference), against the same layers run one by
// one (unfused), and on CUDA against the CPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "flexkit/flexkit.hpp"
#include "flexkit/nn.hpp"
#include "neuron_reference.hpp"
#include "support/test_device.hpp"

namespace flexkit::nn {
namespace {

// Activations (C, H, W, T, N), as the layers lay them out.
constexpr std::int64_t C = 3, H = 2, W = 3, T = 4, N = 8;
constexpr std::int64_t kPerChannel = H * W * N;  // neurons of one channel
constexpr std::int64_t kNeurons = C * kPerChannel;
constexpr double kEps = 1e-5;

struct Case {
  std::string name;
  std::string neuron;  // built-in
  std::vector<std::pair<std::string, std::string>> settings;
  neuronref::LifOptions reference;
  double w = 0;  // PLIF's learnable w
};

std::vector<Case> cases() {
  neuronref::LifOptions lif;  // the built-in LIF: tau 2, hard reset to 0, sigmoid(4)
  neuronref::LifOptions if_atan;
  if_atan.charge = neuronref::LifOptions::Charge::integrate;
  if_atan.surrogate = neuronref::Surrogate::atan;
  if_atan.alpha = 2.0;
  neuronref::LifOptions plif;
  plif.charge = neuronref::LifOptions::Charge::parametric;
  return {{"lif", "lif", {}, lif},
          {"if_atan", "if", {{"surrogate", "atan(2)"}}, if_atan},
          {"plif", "plif", {}, plif, -0.3}};
}

// Element (c, h, w, t, n) of activations with `steps` steps <-> step t of reference neuron
// ((c * H + h) * W + w) * N + n: both are [outer, steps, inner] with inner = N.
std::int64_t element(std::int64_t neuron, std::int64_t t, std::int64_t steps = T) {
  return (neuron / N) * steps * N + t * N + neuron % N;
}

struct Model {  // what a run gives, as doubles
  std::vector<double> spikes, grad_x, grad_gamma, grad_beta, grad_w;
};

struct Inputs {
  std::int64_t steps = T;                 // of x: T, or 1 (the same input at every step)
  std::vector<double> x, gamma, beta, r;  // r: dL/ds, T steps
};

Inputs make_inputs(std::uint64_t seed, std::int64_t steps = T) {
  neuronref::Rng rng(seed);
  Inputs in;
  in.steps = steps;
  in.x.resize(static_cast<std::size_t>(kNeurons * steps));
  // Channels far from zero mean, with their own spread: the centred form must not cancel.
  const double offset[C] = {3.0, -2.0, 0.5}, spread[C] = {1.0, 0.25, 2.0};
  for (std::size_t e = 0; e < in.x.size(); ++e) {
    const std::size_t c = e / static_cast<std::size_t>(H * W * steps * N);
    in.x[e] = static_cast<float>(offset[c] + spread[c] * rng.uniform(-1, 1));
  }
  in.gamma = rng.uniform(C, 0.5, 1.5);
  in.beta = rng.uniform(C, 0.4, 0.9);  // enough input for the neurons to fire
  in.r = rng.uniform(static_cast<std::size_t>(kNeurons * T), -1, 1);
  return in;
}

// The float64 model: batch statistics (biased variance), the normalisation and affine, the neuron
// through neuron_reference, and BatchNorm's backward from dL/dy.
Model reference(const Case& k, const Inputs& in, double* min_margin) {
  const std::int64_t m = kPerChannel * in.steps, all = kNeurons * in.steps;
  std::vector<double> mean(C, 0), var(C, 0);
  for (std::int64_t e = 0; e < all; ++e) mean[e / m] += in.x[e] / static_cast<double>(m);
  for (std::int64_t e = 0; e < all; ++e) {
    const double d = in.x[e] - mean[e / m];
    var[e / m] += d * d / static_cast<double>(m);
  }
  std::vector<double> x_hat(in.x.size());
  for (std::int64_t e = 0; e < all; ++e)
    x_hat[e] = (in.x[e] - mean[e / m]) / std::sqrt(var[e / m] + kEps);
  neuronref::Problem p;
  p.T = T;
  p.N = kNeurons;
  p.inputs.assign(1, std::vector<double>(static_cast<std::size_t>(kNeurons * T)));
  p.grad_outputs.assign(1, std::vector<double>(static_cast<std::size_t>(kNeurons * T)));
  for (std::int64_t n = 0; n < kNeurons; ++n)
    for (std::int64_t t = 0; t < T; ++t) {
      const std::int64_t e = element(n, in.steps == 1 ? 0 : t, in.steps), c = n / kPerChannel;
      p.inputs[0][t * kNeurons + n] = x_hat[e] * in.gamma[c] + in.beta[c];
      p.grad_outputs[0][t * kNeurons + n] = in.r[element(n, t)];
    }
  if (k.reference.charge == neuronref::LifOptions::Charge::parametric) p.params = {{k.w}};
  const auto model = neuronref::make_lif(k.reference);
  const neuronref::Result res = neuronref::run(*model, p);
  *min_margin = *std::min_element(res.margin.begin(), res.margin.end());

  Model out;
  out.spikes.resize(static_cast<std::size_t>(kNeurons * T));
  std::vector<double> gy(in.x.size(), 0.0);  // summed over the steps for a one-step input
  for (std::int64_t n = 0; n < kNeurons; ++n)
    for (std::int64_t t = 0; t < T; ++t) {
      out.spikes[element(n, t)] = res.outputs[0][t * kNeurons + n];
      gy[element(n, in.steps == 1 ? 0 : t, in.steps)] += res.grad_inputs[0][t * kNeurons + n];
    }
  std::vector<double> sum_g(C, 0), sum_g_xhat(C, 0);
  for (std::size_t e = 0; e < gy.size(); ++e) {
    sum_g[e / m] += gy[e];
    sum_g_xhat[e / m] += gy[e] * x_hat[e];
  }
  out.grad_x.resize(in.x.size());
  for (std::size_t e = 0; e < gy.size(); ++e) {
    const std::size_t c = e / m;
    out.grad_x[e] = in.gamma[c] / std::sqrt(var[c] + kEps) *
                    (gy[e] - sum_g[c] / m - x_hat[e] * sum_g_xhat[c] / m);
  }
  out.grad_gamma = sum_g_xhat;
  out.grad_beta = sum_g;
  if (!res.grad_params.empty()) out.grad_w = res.grad_params[0];
  return out;
}

Neuron make_neuron(const Case& k) {
  Neuron neuron = Neuron::builtin(k.neuron);
  for (const auto& [name, value] : k.settings) neuron = neuron.with_setting(name, value);
  return neuron;
}

Array to_device(const std::vector<double>& v, const Shape& shape, Device device) {
  return Array::from_vector(std::vector<float>(v.begin(), v.end()), shape, device);
}

// The pair on `device`, folded (through Sequential) or layer by layer.
Model run_flexkit(const Case& k, const Inputs& in, Device device, bool folded) {
  Sequential net;
  net.add(std::make_unique<BatchNorm>(C));
  net.add(std::make_unique<Spiking>(make_neuron(k), T));
  net.to(device);
  for (auto& [name, p] : net.named_parameters()) {
    if (name == "0.weight") p->value = to_device(in.gamma, {C}, device);
    if (name == "0.bias") p->value = to_device(in.beta, {C}, device);
    if (name == "1.w") p->value = Array::full({}, k.w, DType::f32, device);
  }
  net.zero_grad();
  const Array x = to_device(in.x, {C, H, W, in.steps, N}, device);
  const Array r = to_device(in.r, {C, H, W, T, N}, device);
  Array s, gx;
  if (folded) {
    s = net.forward(x);
    gx = net.backward(r);
  } else {
    s = net[1].forward(net[0].forward(x));
    gx = net[0].backward(net[1].backward(r));
  }
  Model out;
  out.spikes = s.to_doubles();
  out.grad_x = gx.to_doubles();
  for (auto& [name, p] : net.named_parameters()) {
    if (name == "0.weight") out.grad_gamma = p->grad.to_doubles();
    if (name == "0.bias") out.grad_beta = p->grad.to_doubles();
    if (name == "1.w") out.grad_w = p->grad.to_doubles();
  }
  return out;
}

// |a - b| <= rtol * max |b| elementwise (the gradients' scale: they cancel to near zero at
// places).
void expect_close(const std::string& what, const std::vector<double>& a,
                  const std::vector<double>& b, double rtol) {
  ASSERT_EQ(a.size(), b.size()) << what;
  double scale = 0;
  for (double v : b) scale = std::max(scale, std::abs(v));
  ASSERT_GT(scale, 0) << what << " is all zero: a vacuous comparison";
  int bad = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!(std::abs(a[i] - b[i]) <= rtol * scale) && bad++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: " << a[i] << " against " << b[i] << " (scale "
                    << scale << ")";
}

class Fold : public ::testing::TestWithParam<std::tuple<Case, std::int64_t>> {};

// The pair fed all T steps, or one step that the neuron reads at every step (the csnn preset's
// first block: the image is the same input at each step).
TEST_P(Fold, MatchesFloat64AndTheUnfusedLayers) {
  const Case& k = std::get<0>(GetParam());
  const Inputs in = make_inputs(7, std::get<1>(GetParam()));
  double margin = 0;
  const Model ref = reference(k, in, &margin);
  // float32 inputs put z within ~1e-6 of the float64 one; a spike that close could flip.
  ASSERT_GT(margin, 1e-4) << "the data puts a neuron at its threshold; pick another seed";
  double fired = 0;
  for (double s : ref.spikes) fired += s;
  ASSERT_GT(fired, 0.1 * static_cast<double>(ref.spikes.size())) << "too few spikes to test";
  ASSERT_LT(fired, 0.9 * static_cast<double>(ref.spikes.size())) << "too many spikes to test";

  const Model folded = run_flexkit(k, in, test::device(), true);
  const Model unfused = run_flexkit(k, in, test::device(), false);
  for (const Model* m : {&folded, &unfused}) {
    const std::string which = m == &folded ? "folded " : "unfused ";
    EXPECT_EQ(m->spikes, ref.spikes) << which << "spikes";
    expect_close(which + "grad x", m->grad_x, ref.grad_x, 2e-5);
    expect_close(which + "grad gamma", m->grad_gamma, ref.grad_gamma, 2e-5);
    expect_close(which + "grad beta", m->grad_beta, ref.grad_beta, 2e-5);
    if (!ref.grad_w.empty()) expect_close(which + "grad w", m->grad_w, ref.grad_w, 2e-5);
  }
  expect_close("folded against unfused grad x", folded.grad_x, unfused.grad_x, 2e-5);

  if (test::device().is_cuda()) {  // and the same on the CPU
    const Model cpu = run_flexkit(k, in, Device::cpu(), true);
    EXPECT_EQ(folded.spikes, cpu.spikes);
    expect_close("cuda against cpu grad x", folded.grad_x, cpu.grad_x, 1e-5);
    expect_close("cuda against cpu grad gamma", folded.grad_gamma, cpu.grad_gamma, 1e-5);
    expect_close("cuda against cpu grad beta", folded.grad_beta, cpu.grad_beta, 1e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(Neurons, Fold,
                         ::testing::Combine(::testing::ValuesIn(cases()),
                                            ::testing::Values(std::int64_t{T}, std::int64_t{1})),
                         [](const auto& info) {
                           return std::get<0>(info.param).name +
                                  (std::get<1>(info.param) == 1 ? "_one_step" : "_all_steps");
                         });

TEST(Fold, OnlyInTraining) {
  // Evaluation runs the layers one by one (running statistics).
  const Case k = cases()[0];
  const Inputs in = make_inputs(11);
  Sequential net;
  net.add(std::make_unique<BatchNorm>(C));
  net.add(std::make_unique<Spiking>(make_neuron(k), T));
  net.to(test::device());
  const Array x = to_device(in.x, {C, H, W, T, N}, test::device());
  net.forward(x);  // training: moves the running statistics
  net.set_training(false);
  const std::vector<double> eval = net.forward(x).to_doubles();
  const std::vector<double> by_layer = net[1].forward(net[0].forward(x)).to_doubles();
  EXPECT_EQ(eval, by_layer);
  double fired = 0;
  for (double v : eval) fired += v;
  EXPECT_GT(fired, 0);
}

TEST(Fold, ChannelAffineNeuronChecksItsParameters) {
  const Neuron folded = Neuron::builtin("lif").with_channel_affine();
  EXPECT_EQ(folded.residual_plan().size(), 1u);  // h only: the input is kept, not stored
  const Array x = Array::zeros({C, T, N}, DType::f32, test::device());
  NeuronStorage storage;
  storage.time_axis = 1;
  EXPECT_THROW(
      neuron_forward(folded, NeuronKernelKind::training_forward, {{"x", x}}, {}, {}, storage),
      ValueError);  // per-channel parameters have no default
  const Array wrong = Array::zeros({C + 1}, DType::f32, test::device());
  const Array right = Array::zeros({C}, DType::f32, test::device());
  EXPECT_THROW(
      neuron_forward(folded, NeuronKernelKind::training_forward, {{"x", x}}, {},
                     {{"bn_center", wrong}, {"bn_scale", right}, {"bn_shift", right}}, storage),
      ShapeError);
  EXPECT_THROW(folded.with_channel_affine(), ValueError);
}

// The folded neuron keeps its input, so its training forward stores no residual (up to 16
// steps, from the initial states): the backward replays the steps. Given initial states it
// stores them; both backwards must give the same bits.
class Replay : public ::testing::TestWithParam<std::tuple<Case, std::int64_t>> {};

TEST_P(Replay, GivesTheStoredResidualsGradientsBitForBit) {
  const Case& k = std::get<0>(GetParam());
  const std::int64_t steps = std::get<1>(GetParam());
  const Device device = test::device();
  const Inputs in = make_inputs(5, steps);
  const Neuron folded = make_neuron(k).with_channel_affine();
  std::vector<double> shift = in.beta;  // leaky neurons need more input to fire as often
  if (k.neuron != "if")
    for (double& v : shift) v += 0.8;
  NeuronStorage storage;
  storage.time_axis = 3;  // (C, H, W, T, N)
  if (steps == 1) storage.repeat_steps = T;
  const NamedArrays params = {{"bn_center", to_device({3.0, -2.0, 0.5}, {C}, device)},
                              {"bn_scale", to_device({1.1, 3.0, 0.6}, {C}, device)},
                              {"bn_shift", to_device(shift, {C}, device)},
                              {"w", Array::full({}, k.w, DType::f32, device)}};
  NamedArrays learnable = params;
  if (k.neuron != "plif") learnable.erase("w");
  const Array x = to_device(in.x, {C, H, W, steps, N}, device);
  const Array r = to_device(in.r, {C, H, W, T, N}, device);
  const NamedArrays zero_state = {{"v", Array::zeros({C, H, W, N}, DType::f32, device)}};

  const NeuronForward replayed = neuron_forward(folded, NeuronKernelKind::training_forward,
                                                {{"x", x}}, {}, learnable, storage);
  const NeuronForward stored = neuron_forward(folded, NeuronKernelKind::training_forward,
                                              {{"x", x}}, zero_state, learnable, storage);
  EXPECT_EQ(residual_bytes(*replayed.residuals), 0u);
  EXPECT_EQ(residual_bytes(*stored.residuals), static_cast<std::size_t>(kNeurons * T * 4));
  const std::vector<double> spikes = replayed.outputs.at("s").to_doubles();
  EXPECT_EQ(spikes, stored.outputs.at("s").to_doubles());
  double fired = 0;
  for (double v : spikes) fired += v;
  ASSERT_GT(fired, 0.1 * static_cast<double>(spikes.size())) << "too few spikes to test";
  ASSERT_LT(fired, 0.9 * static_cast<double>(spikes.size())) << "too many spikes to test";

  const NeuronGradients a = neuron_backward(folded, *replayed.residuals, {{"s", r}});
  EXPECT_EQ(a.initial_states.size(), 1u);
  // Without the initial states' gradient: nothing else changes.
  const NeuronGradients c = neuron_backward(folded, *replayed.residuals, {{"s", r}}, {}, {},
                                            /*initial_state_gradients=*/false);
  EXPECT_TRUE(c.initial_states.empty());
  EXPECT_EQ(c.inputs.at("x").to_doubles(), a.inputs.at("x").to_doubles());
  const NeuronGradients b = neuron_backward(folded, *stored.residuals, {{"s", r}});
  const std::vector<double> gx = a.inputs.at("x").to_doubles();
  double largest = 0;
  for (double v : gx) largest = std::max(largest, std::abs(v));
  ASSERT_GT(largest, 0) << "a zero input gradient compares nothing";
  EXPECT_EQ(gx, b.inputs.at("x").to_doubles());
  ASSERT_EQ(a.params.size(), b.params.size());
  for (const auto& [name, grad] : a.params)
    EXPECT_EQ(grad.to_doubles(), b.params.at(name).to_doubles()) << name;
}

INSTANTIATE_TEST_SUITE_P(Neurons, Replay,
                         ::testing::Combine(::testing::ValuesIn(cases()),
                                            ::testing::Values(std::int64_t{T}, std::int64_t{1})),
                         [](const auto& info) {
                           return std::get<0>(info.param).name +
                                  (std::get<1>(info.param) == 1 ? "_one_step" : "_all_steps");
                         });

// The per-channel gradients (bn_scale, bn_shift) come from partials summed in groups of 32
// neurons where the groups tile the rows (here N = 64): against float64 sums of the input
// gradient the call returns (dL/dx = dL/dx' · scale, so dL/dx' = dL/dx / scale).
TEST(Fold, ChannelSumsOverGroupsOfNeurons) {
  constexpr std::int64_t kC = 2, kH = 2, kW = 3, kT = 3, kN = 64;
  const Device device = test::device();
  neuronref::Rng rng(21);
  const std::vector<double> x =
      rng.uniform(static_cast<std::size_t>(kC * kH * kW * kT * kN), -1, 3);
  const std::vector<double> r = rng.uniform(x.size(), -1, 1);
  const std::vector<double> center{0.5, 1.0}, scale{1.25, 0.75}, shift{0.25, 0.5};
  const Neuron folded = make_neuron(cases()[1]).with_channel_affine();  // IF, atan
  NeuronStorage storage;
  storage.time_axis = 3;
  const Shape shape{kC, kH, kW, kT, kN};
  const NeuronForward f = neuron_forward(folded, NeuronKernelKind::training_forward,
                                         {{"x", to_device(x, shape, device)}}, {},
                                         {{"bn_center", to_device(center, {kC}, device)},
                                          {"bn_scale", to_device(scale, {kC}, device)},
                                          {"bn_shift", to_device(shift, {kC}, device)}},
                                         storage);
  const NeuronGradients g =
      neuron_backward(folded, *f.residuals, {{"s", to_device(r, shape, device)}});
  const std::vector<double> gx = g.inputs.at("x").to_doubles();
  const std::int64_t per_channel = x.size() / kC;
  for (std::int64_t c = 0; c < kC; ++c) {
    double sum_centered = 0, sum = 0, scale_of_terms = 0;
    for (std::int64_t e = c * per_channel; e < (c + 1) * per_channel; ++e) {
      const double gy = gx[e] / scale[c];
      sum_centered += gy * (static_cast<float>(x[e]) - center[c]);
      sum += gy;
      scale_of_terms += std::abs(gy) * (1 + std::abs(x[e] - center[c]));
    }
    ASSERT_GT(scale_of_terms, 1.0) << "too few nonzero gradients to test";
    EXPECT_NEAR(g.params.at("bn_scale").to_doubles().at(c), sum_centered, 1e-6 * scale_of_terms);
    EXPECT_NEAR(g.params.at("bn_shift").to_doubles().at(c), sum, 1e-6 * scale_of_terms);
  }
}

// Up to 16 steps the residuals are replayed (one lane a thread on CUDA from 8 steps: the
// replay's other path), past them stored; replayed or stored, the same gradients.
TEST(Replay, LongRunsStoreTheirResiduals) {
  constexpr std::int64_t kLong = 17;
  const Device device = test::device();
  const Neuron folded = Neuron::builtin("lif").with_channel_affine();
  NeuronStorage storage;
  storage.time_axis = 1;
  neuronref::Rng rng(9);
  const NamedArrays params = {{"bn_center", to_device({0.5, -0.5, 0.0}, {C}, device)},
                              {"bn_scale", to_device({1.0, 2.0, 0.5}, {C}, device)},
                              {"bn_shift", to_device({1.5, 1.0, 1.25}, {C}, device)}};
  const NamedArrays zero_state = {{"v", Array::zeros({C, N}, DType::f32, device)}};
  for (const std::int64_t steps : {std::int64_t{16}, kLong}) {
    SCOPED_TRACE(::testing::Message() << steps << " steps");
    const auto count = static_cast<std::size_t>(C * steps * N);
    const Array x = to_device(rng.uniform(count, -1, 2), {C, steps, N}, device);
    const Array r = to_device(rng.uniform(count, -1, 1), {C, steps, N}, device);
    const NeuronForward f =
        neuron_forward(folded, NeuronKernelKind::training_forward, {{"x", x}}, {}, params, storage);
    const NeuronForward stored = neuron_forward(folded, NeuronKernelKind::training_forward,
                                                {{"x", x}}, zero_state, params, storage);
    EXPECT_EQ(residual_bytes(*f.residuals), steps == kLong ? count * 4 : 0u);
    const std::vector<double> spikes = f.outputs.at("s").to_doubles();
    double fired = 0;
    for (double v : spikes) fired += v;
    ASSERT_GT(fired, 0.1 * static_cast<double>(count)) << "too few spikes to test";
    ASSERT_LT(fired, 0.9 * static_cast<double>(count)) << "too many spikes to test";
    const NeuronGradients a = neuron_backward(folded, *f.residuals, {{"s", r}});
    const NeuronGradients b = neuron_backward(folded, *stored.residuals, {{"s", r}});
    EXPECT_EQ(a.inputs.at("x").to_doubles(), b.inputs.at("x").to_doubles());
    for (const auto& [name, grad] : a.params)
      EXPECT_EQ(grad.to_doubles(), b.params.at(name).to_doubles()) << name;
  }
}

}  // namespace
}  // namespace flexkit::nn
