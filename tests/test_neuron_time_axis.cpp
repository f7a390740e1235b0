// FlexSN sequences with T at another axis than the leading one (NeuronStorage::time_axis): every
// result of a call on (F, T, N) or (C, H, W, T, N) data is bit for bit the result of moving T to
// the front (a contiguous copy), running with time_axis 0 and moving it back. States, final
// states, per-neuron parameters and their gradients keep the neuron shape in both.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "flexkit/error.hpp"
#include "flexkit/neuron.hpp"
#include "support/random_arrays.hpp"
#include "support/test_device.hpp"

namespace flexkit {
namespace {

// T (at `axis`) moved to the front, as a contiguous copy.
Array to_leading(const Array& a, int axis) {
  std::vector<int> perm{axis};
  for (int d = 0; d < a.rank(); ++d)
    if (d != axis) perm.push_back(d);
  return a.transpose(perm).contiguous();
}

// The inverse: T from the front back to `axis`.
Array from_leading(const Array& a, int axis) {
  std::vector<int> perm;
  for (int d = 1; d <= axis; ++d) perm.push_back(d);
  perm.push_back(0);
  for (int d = axis + 1; d < a.rank(); ++d) perm.push_back(d);
  return a.transpose(perm).contiguous();
}

Shape without_axis(Shape shape, int axis) {
  shape.erase(shape.begin() + axis);
  return shape;
}

std::vector<std::uint32_t> bits(const Array& a) {
  std::vector<std::uint32_t> out;
  for (float v : a.to_floats()) out.push_back(std::bit_cast<std::uint32_t>(v));
  return out;
}

void expect_same_bits(const Array& got, const Array& want, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  ASSERT_TRUE(want.defined()) << what;
  EXPECT_EQ(got.shape(), want.shape()) << what;
  EXPECT_EQ(got.dtype(), want.dtype()) << what;
  EXPECT_EQ(bits(got), bits(want)) << what;
}

// Sequences from the leading-T run are moved to `axis` before the comparison.
void expect_same(const NamedArrays& got, const NamedArrays& leading, bool sequences, int axis,
                 const std::string& what) {
  ASSERT_EQ(got.size(), leading.size()) << what;
  for (const auto& [name, array] : leading) {
    ASSERT_TRUE(got.count(name)) << what << " " << name;
    expect_same_bits(got.at(name), sequences ? from_leading(array, axis) : array,
                     what + " " + name);
  }
}

// A neuron with two inputs and a learnable per-neuron parameter, so that several sequences and
// the per-neuron indexing are covered as well.
constexpr const char* kGainNeuron = R"(
neuron gain_lif(x, y; v) -> s {
  learnable param g[] = 0.5;
  h = v + (g * x + 0.25 * y - v) / 2.0;
  s = spike(h - 1.0, atan(2));
  v = h * (1 - s);
}
)";

struct Case {
  Shape shape;  // with T
  int axis;
};

// (F, T, N), (C, H, W, T, N), rows of 300 neurons (one lane block and part of another; T past
// one load batch), [N, T] (one neuron per row) and T last over two dims.
const std::vector<Case> kCases = {
    {{5, 3, 7}, 1}, {{3, 2, 2, 4, 6}, 3}, {{2, 11, 300}, 1}, {{9, 5}, 1}, {{3, 4, 6}, 2},
};

struct Call {
  NamedArrays inputs, initial_states, params;  // inputs at the case's axis
  NamedArrays grad_outputs, grad_state_sequences, grad_final_states;
};

Call random_call(const Neuron& n, const Case& c, unsigned seed) {
  const Shape shape = without_axis(c.shape, c.axis);
  Call call;
  for (const std::string& input : n.inputs())
    call.inputs.emplace(input, test::uniform_array(c.shape, seed++, 0.0f, 1.5f));
  for (const std::string& state : n.states()) {
    call.initial_states.emplace(state, test::uniform_array(shape, seed++, -0.5f, 0.5f));
    call.grad_state_sequences.emplace(state, test::uniform_array(c.shape, seed++, -1.0f, 1.0f));
    call.grad_final_states.emplace(state, test::uniform_array(shape, seed++, -1.0f, 1.0f));
  }
  for (const NeuronParamInfo& p : n.params()) {
    if (!p.learnable && !p.per_neuron) continue;
    call.params.emplace(p.name, p.per_neuron ? test::uniform_array(shape, seed++, 0.25f, 1.0f)
                                             : test::uniform_array({}, seed++, -0.5f, 0.5f));
  }
  for (const std::string& output : n.outputs())
    call.grad_outputs.emplace(output, test::uniform_array(c.shape, seed++, -1.0f, 1.0f));
  return call;
}

NamedArrays moved_to_leading(const NamedArrays& sequences, int axis) {
  NamedArrays out;
  for (const auto& [name, array] : sequences) out.emplace(name, to_leading(array, axis));
  return out;
}

void check_neuron(const Neuron& n, unsigned seed) {
  for (const Case& c : kCases) {
    const std::string what =
        n.name() + " " + shape_str(c.shape) + " axis " + std::to_string(c.axis);
    SCOPED_TRACE(what);
    const Call call = random_call(n, c, seed);
    const NamedArrays leading_inputs = moved_to_leading(call.inputs, c.axis);

    NeuronStorage at_axis{.keep_state_sequences = true, .time_axis = c.axis};
    NeuronStorage leading{.keep_state_sequences = true};

    // Inference: outputs, state sequences and final states.
    for (NeuronKernelKind kind :
         {NeuronKernelKind::inference, NeuronKernelKind::inference_final_state}) {
      NeuronForward f =
          neuron_forward(n, kind, call.inputs, call.initial_states, call.params, at_axis);
      NeuronForward r =
          neuron_forward(n, kind, leading_inputs, call.initial_states, call.params, leading);
      const std::string k(to_string(kind));
      expect_same(f.outputs, r.outputs, true, c.axis, what + " " + k + " output");
      expect_same(f.state_sequences, r.state_sequences, true, c.axis, what + " " + k + " state");
      expect_same(f.final_states, r.final_states, false, c.axis, what + " " + k + " final");
    }

    // Training forward and backward.
    NeuronForward f = neuron_forward(n, NeuronKernelKind::training_forward, call.inputs,
                                     call.initial_states, call.params, at_axis);
    NeuronForward r = neuron_forward(n, NeuronKernelKind::training_forward, leading_inputs,
                                     call.initial_states, call.params, leading);
    expect_same(f.outputs, r.outputs, true, c.axis, what + " training output");
    expect_same(f.state_sequences, r.state_sequences, true, c.axis, what + " training state");
    expect_same(f.final_states, r.final_states, false, c.axis, what + " training final");
    ASSERT_EQ(residual_bytes(*f.residuals), residual_bytes(*r.residuals));

    NeuronGradients g = neuron_backward(n, *f.residuals, call.grad_outputs,
                                        call.grad_state_sequences, call.grad_final_states);
    NeuronGradients h = neuron_backward(
        n, *r.residuals, moved_to_leading(call.grad_outputs, c.axis),
        moved_to_leading(call.grad_state_sequences, c.axis), call.grad_final_states);
    expect_same(g.inputs, h.inputs, true, c.axis, what + " dL/dx");
    expect_same(g.initial_states, h.initial_states, false, c.axis, what + " dL/dv0");
    expect_same(g.params, h.params, false, c.axis, what + " dL/dparam");

    // Only some gradients given: the absent ones are zero in either layout.
    g = neuron_backward(n, *f.residuals, call.grad_outputs);
    h = neuron_backward(n, *r.residuals, moved_to_leading(call.grad_outputs, c.axis));
    expect_same(g.inputs, h.inputs, true, c.axis, what + " dL/dx (outputs only)");
    expect_same(g.params, h.params, false, c.axis, what + " dL/dparam (outputs only)");
  }
}

TEST(NeuronTimeAxis, LifMatchesTheLeadingLayoutExactly) {
  check_neuron(Neuron::builtin("lif"), 10);
}

TEST(NeuronTimeAxis, PlifWithLearnableWMatchesTheLeadingLayoutExactly) {
  const Neuron plif = Neuron::builtin("plif");
  bool learnable_w = false;
  for (const NeuronParamInfo& p : plif.params())
    learnable_w = learnable_w || (p.name == "w" && p.learnable);
  ASSERT_TRUE(learnable_w);
  check_neuron(plif, 20);
}

TEST(NeuronTimeAxis, TwoStateAlifMatchesTheLeadingLayoutExactly) {
  const Neuron alif = Neuron::builtin("alif");
  ASSERT_EQ(alif.states().size(), 2u);
  check_neuron(alif, 30);
}

TEST(NeuronTimeAxis, PerNeuronParamsAndTwoInputsMatchTheLeadingLayoutExactly) {
  check_neuron(Neuron::parse(kGainNeuron), 40);
}

TEST(NeuronTimeAxis, LayoutAndShapesOfTheResults) {
  const Neuron alif = Neuron::builtin("alif");
  const Shape full{3, 2, 2, 4, 6};
  NeuronStorage storage{.keep_state_sequences = true, .time_axis = 3};
  NeuronForward f =
      neuron_forward(alif, NeuronKernelKind::training_forward,
                     {{"x", test::uniform_array(full, 1, 0.0f, 1.5f)}}, {}, {}, storage);
  EXPECT_EQ(f.outputs.at("s").shape(), full);
  EXPECT_EQ(f.state_sequences.at("a").shape(), full);
  EXPECT_EQ(f.final_states.at("v").shape(), (Shape{3, 2, 2, 6}));
  // One residual value per neuron-step, whatever the layout.
  EXPECT_EQ(residual_bytes(*f.residuals) % static_cast<std::size_t>(shape_numel(full) * 4), 0u);
  NeuronGradients g =
      neuron_backward(alif, *f.residuals, {{"s", test::uniform_array(full, 2, -1.0f, 1.0f)}});
  EXPECT_EQ(g.inputs.at("x").shape(), full);
  EXPECT_EQ(g.initial_states.at("a").shape(), (Shape{3, 2, 2, 6}));
}

TEST(NeuronTimeAxis, LayerPassesTheLayoutThrough) {
  // Two chunks of a (F, T, N) sequence through a layer carry the state across the call, as the
  // same chunks in [T, F, N] do.
  const Neuron lif = Neuron::builtin("lif");
  NeuronLayer at_axis(lif, {.time_axis = 1});
  NeuronLayer leading(lif);
  for (unsigned chunk = 0; chunk < 2; ++chunk) {
    const Array x = test::uniform_array({4, 3, 10}, 50 + chunk, 0.0f, 1.5f);
    const Array gs = test::uniform_array({4, 3, 10}, 60 + chunk, -1.0f, 1.0f);
    const NamedArrays s = at_axis.forward({{"x", x}});
    const NamedArrays r = leading.forward({{"x", to_leading(x, 1)}});
    expect_same(s, r, true, 1, "layer output");
    expect_same(at_axis.states(), leading.states(), false, 1, "layer states");
    const NeuronGradients g = at_axis.backward({{"s", gs}});
    const NeuronGradients h = leading.backward({{"s", to_leading(gs, 1)}});
    expect_same(g.inputs, h.inputs, true, 1, "layer dL/dx");
    expect_same(g.initial_states, h.initial_states, false, 1, "layer dL/dv0");
  }
}

template <class E>
std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "no exception";
}

TEST(NeuronTimeAxis, BadTimeAxesAndLayoutsAreRefused) {
  const Neuron lif = Neuron::builtin("lif");
  const Array x = test::uniform_array({5, 3, 7}, 70, 0.0f, 1.5f);
  for (int axis : {3, 7, -1}) {
    const std::string message = error_of<ValueError>([&] {
      neuron_forward(lif, NeuronKernelKind::inference, {{"x", x}}, {}, {}, {.time_axis = axis});
    });
    EXPECT_NE(message.find("time_axis"), std::string::npos) << axis << ": " << message;
    EXPECT_NE(message.find(std::to_string(axis)), std::string::npos) << axis << ": " << message;
    EXPECT_NE(message.find("'x'"), std::string::npos) << axis << ": " << message;
  }
  // The states keep the neuron shape: with T at axis 1 that is (5, 7), not (3, 7).
  EXPECT_THROW(
      neuron_forward(lif, NeuronKernelKind::inference, {{"x", x}},
                     {{"v", test::uniform_array({3, 7}, 71, 0.0f, 1.0f)}}, {}, {.time_axis = 1}),
      ShapeError);
  EXPECT_NO_THROW(neuron_forward(lif, NeuronKernelKind::inference, {{"x", x}},
                                 {{"v", test::uniform_array({5, 7}, 72, 0.0f, 1.0f)}}, {},
                                 {.time_axis = 1}));
  // Two inputs must have the same full shape (not only the same T and neuron count).
  const Neuron two = Neuron::parse(kGainNeuron);
  EXPECT_THROW(neuron_forward(two, NeuronKernelKind::inference,
                              {{"x", x}, {"y", test::uniform_array({3, 5, 7}, 73, 0.0f, 1.0f)}}, {},
                              {}, {.time_axis = 1}),
               ShapeError);
  // Backward takes gradients in the forward's layout.
  NeuronForward f =
      neuron_forward(lif, NeuronKernelKind::training_forward, {{"x", x}}, {}, {}, {.time_axis = 1});
  const std::string message = error_of<ShapeError>([&] {
    neuron_backward(lif, *f.residuals, {{"s", to_leading(x, 1)}});
  });
  EXPECT_NE(message.find("(5, 3, 7)"), std::string::npos) << message;
  EXPECT_THROW(
      neuron_backward(lif, *f.residuals, {{"s", test::uniform_array({5, 3}, 74, 0.f, 1.f)}}),
      ShapeError);
}

}  // namespace
}  // namespace flexkit
