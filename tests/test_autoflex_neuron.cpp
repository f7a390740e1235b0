// IwlPolicy::autoflex (and exact) for the flex16 sequences a neuron call writes: each sequence
// has its own manager in NeuronStorage::autoflex, the first write stores exactly, later ones at
// the prediction, and every stored mantissa is what the shared codec makes of the float32 run's
// value at that iwl.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "flexkit/autoflex.hpp"
#include "flexkit/error.hpp"
#include "flexkit/neuron.hpp"
#include "support/test_device.hpp"

namespace {

using namespace flexkit;
namespace portable = flexkit::portable;

Device dev() {
  return test::device();
}

// y = x + 1.5, one step, one neuron: the trace of the expression tests, through a neuron call.
TEST(AutoflexNeuron, PinnedTraceThroughANeuronOutput) {
  const Neuron shift = Neuron::parse("neuron shift(x) -> y {\n  y = x + 1.5;\n}\n");
  NeuronStorage storage;
  storage.sequence_dtype = DType::flex16;
  storage.iwl_policy = IwlPolicy::autoflex;
  std::vector<double> got;
  std::vector<int> iwls;
  for (double x : {0.0, 1.0, 2.0, 3.0}) {
    const Array xs = Array::full({1, 1}, x, DType::f32, dev());
    const NeuronForward f =
        neuron_forward(shift, NeuronKernelKind::inference, {{"x", xs}}, {}, {}, storage);
    const Array& y = f.outputs.at("y");
    got.push_back(static_cast<double>(y.to_floats().at(0)));
    iwls.push_back(y.iwl());
  }
  EXPECT_EQ(got, (std::vector<double>{1.5, 1.99993896484375, 3.5, 4.5}));
  EXPECT_EQ(iwls, (std::vector<int>{1, 1, 3, 3}));
  const AutoflexReport r = storage.autoflex["y"].report();
  EXPECT_EQ(r.writes, 4);
  EXPECT_EQ(r.overflow_writes, 1);
  EXPECT_EQ(r.saturated, 1u);
}

struct SequenceCheck {
  portable::AutoflexState host = portable::autoflex_initial();
  int saturating_writes = 0;
};

// One flex16 sequence against the float32 run's values: the iwl the host manager predicts (or
// the exact one on a first write), the codec's mantissas at it, the recorded statistics.
void expect_stored_like_the_codec(const std::string& label, const Array& stored,
                                  const Array& reference, SequenceCheck& check) {
  const std::vector<float> want = reference.to_floats();
  float top = 0;
  for (float v : want) top = std::max(top, std::fabs(v));
  const int iwl = portable::autoflex_wants_exact(check.host) ? portable::flex16_iwl_holding(top)
                                                             : check.host.iwl;
  ASSERT_EQ(stored.iwl(), iwl) << label;
  const std::vector<std::int16_t> bits = stored.to_vector<std::int16_t>();
  std::int32_t max_m = 0;
  std::uint64_t saturated = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const portable::Flex16Code c = portable::flex16_encode(want[i], iwl);
    ASSERT_EQ(bits[i], c.m) << label << " element " << i;
    max_m = std::max<std::int32_t>(max_m, std::abs(static_cast<std::int32_t>(c.m)));
    saturated += c.saturated ? 1 : 0;
  }
  EXPECT_EQ(stored.stats().saturated, saturated) << label;
  portable::autoflex_record(check.host, iwl, max_m, saturated, 0);
  if (saturated) ++check.saturating_writes;
}

// LIF's training forward (threshold 4), its inputs growing 6x at call 8: the output, state and
// residual sequences each follow their own manager, overflow once and settle; backward over the
// flex16 residuals stays close to backward over float32 ones.
TEST(AutoflexNeuron, EverySequenceFollowsItsOwnManager) {
  const Neuron lif = Neuron::builtin("lif").with("v_threshold", 4.0);
  const std::int64_t steps = 6, neurons = 200;
  NeuronStorage flex;
  flex.sequence_dtype = DType::flex16;
  flex.spike_dtype = DType::flex16;
  flex.residual_dtype = DType::flex16;
  flex.keep_state_sequences = true;
  flex.iwl_policy = IwlPolicy::autoflex;
  NeuronStorage wide;
  wide.keep_state_sequences = true;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  SequenceCheck v_check, s_check;
  for (int call = 0; call < 24; ++call) {
    const float scale = call < 8 ? 1.0f : 6.0f;
    std::vector<float> x(static_cast<std::size_t>(steps * neurons));
    for (float& value : x) value = unit(rng) * scale;
    const Array xs = Array::from_floats(x, {steps, neurons}, DType::f32, dev());
    const NeuronForward f =
        neuron_forward(lif, NeuronKernelKind::training_forward, {{"x", xs}}, {}, {}, flex);
    const NeuronForward r =
        neuron_forward(lif, NeuronKernelKind::training_forward, {{"x", xs}}, {}, {}, wide);
    const std::string at = " (call " + std::to_string(call) + ")";
    expect_stored_like_the_codec("v" + at, f.state_sequences.at("v"), r.state_sequences.at("v"),
                                 v_check);
    expect_stored_like_the_codec("s" + at, f.outputs.at("s"), r.outputs.at("s"), s_check);
    if (call >= 12) {
      EXPECT_EQ(f.state_sequences.at("v").stats().saturated, 0u) << "still saturating" << at;
    }
    const Array grad = Array::full({steps, neurons}, 1.0, DType::f32, dev());
    const std::vector<float> gf =
        neuron_backward(lif, *f.residuals, {{"s", grad}}).inputs.at("x").to_floats();
    const std::vector<float> gr =
        neuron_backward(lif, *r.residuals, {{"s", grad}}).inputs.at("x").to_floats();
    // Spikes recomputed from rounded residuals may flip right at the threshold, so the check is
    // on the whole gradient (relative L1), and not in the call whose residuals saturated.
    double diff = 0, total = 0;
    for (std::size_t i = 0; i < gr.size(); ++i) {
      diff += std::fabs(static_cast<double>(gf[i]) - gr[i]);
      total += std::fabs(static_cast<double>(gr[i]));
    }
    if (call != 8) {
      EXPECT_LE(diff, 1e-2 * total) << "backward over flex16 residuals" << at;
    }
  }
  EXPECT_EQ(v_check.saturating_writes, 1);
  const AutoflexReport v = flex.autoflex["v"].report();
  EXPECT_EQ(v.writes, 24);
  EXPECT_EQ(v.overflow_writes, v_check.saturating_writes);
  EXPECT_EQ(v.next_iwl, v_check.host.iwl);
  int residual_managers = 0;
  for (const auto& [name, manager] : flex.autoflex.entries()) {
    if (name.rfind("residual ", 0) != 0) continue;
    ++residual_managers;
    EXPECT_EQ(manager.report().writes, 24) << name;
    EXPECT_LE(manager.report().overflow_writes, 1) << name;
  }
  EXPECT_GE(residual_managers, 1);
}

// exact gives each sequence the smallest iwl that holds it (the spikes stay at iwl 1, the state
// takes its own range); fixed stores all at flex16_iwl and saturates.
TEST(AutoflexNeuron, ExactIsPerSequenceAndFixedSaturates) {
  const Neuron if_neuron = Neuron::builtin("if").with("v_threshold", 1000.0);
  const std::int64_t steps = 40;
  const Array x = Array::full({steps, 3}, 0.5, DType::f32, dev());
  NeuronStorage storage;
  storage.sequence_dtype = DType::flex16;
  storage.spike_dtype = DType::flex16;
  storage.iwl_policy = IwlPolicy::exact;
  const NeuronForward f =
      neuron_forward(if_neuron, NeuronKernelKind::inference, {{"x", x}}, {}, {}, storage);
  EXPECT_EQ(f.state_sequences.at("v").iwl(), 5);  // 20 < 32
  EXPECT_EQ(f.outputs.at("s").iwl(), portable::flex16_iwl_holding(0.0f));
  const std::vector<float> v = f.state_sequences.at("v").to_floats();
  for (std::int64_t t = 0; t < steps; ++t)
    EXPECT_EQ(v[static_cast<std::size_t>(t * 3)], 0.5f * (t + 1));
  EXPECT_EQ(f.state_sequences.at("v").stats().saturated, 0u);
  storage.iwl_policy = IwlPolicy::fixed;
  const NeuronForward g =
      neuron_forward(if_neuron, NeuronKernelKind::inference, {{"x", x}}, {}, {}, storage);
  EXPECT_EQ(g.state_sequences.at("v").iwl(), 4);
  EXPECT_EQ(g.state_sequences.at("v").stats().saturated, 3u * 9);  // v = 16 ... 20 clip
}

}  // namespace
