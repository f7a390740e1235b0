// Bad arguments to the FlexSN calls (include/flexkit/neuron.hpp) give typed errors whose message
// names the argument: sequences of mismatched shape or length, unknown names, states for a
// stateless neuron, wrong dtypes, fixed parameters passed as runtime values, foreign residuals,
// missing inputs. The names used here (drive, gate, vmem, trace, spk, gain, tau_m) are distinctive,
// so finding one in a message means the message names that argument.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "flexkit/flexkit.hpp"
#include "flexkit/neuron.hpp"
#include "flexkit/neuron_language.hpp"

namespace flexkit {
namespace {

constexpr const char* kNeuronText = R"(
neuron probe(drive, gate; vmem, trace) -> spk {
  learnable param gain = 0.5;
  param tau_m = 2.0;
  h = vmem + (gain * drive * sig(gate) - vmem) / tau_m;
  spk = spike(h - 1, sigmoid(4));
  vmem = h * (1 - spk);
  trace = 0.5 * trace + spk;
}
)";

constexpr const char* kStatelessText = R"(
neuron stateless(drive) -> spk {
  spk = spike(drive - 0.5, atan(2));
}
)";

Array f32(const Shape& shape, double value = 0.25, Device device = Device::cpu()) {
  return Array::full(shape, value, DType::f32, device);
}

// Runs `call`, expects exception E whose message contains every string of `names`.
template <class E>
void expect_error(const std::function<void()>& call, const std::vector<std::string>& names,
                  const std::string& what) {
  try {
    call();
    ADD_FAILURE() << what << ": no exception";
  } catch (const E& e) {
    const std::string message = e.what();
    for (const std::string& name : names)
      EXPECT_NE(message.find(name), std::string::npos)
          << what << ": the message does not name '" << name << "': " << message;
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": wrong exception type: " << e.what();
  }
}

class NeuronErrors : public ::testing::Test {
 protected:
  const Neuron neuron = Neuron::parse(kNeuronText);
  const Shape shape{3};
  const Shape seq{4, 3};
  NamedArrays inputs{{"drive", f32(seq)}, {"gate", f32(seq)}};

  NeuronForward forward(const NamedArrays& in, const NamedArrays& states = {},
                        const NamedArrays& params = {},
                        NeuronKernelKind kind = NeuronKernelKind::training_forward) {
    return neuron_forward(neuron, kind, in, states, params);
  }
};

TEST_F(NeuronErrors, TheValidCallWorks) {
  NeuronForward f;
  ASSERT_NO_THROW(
      f = forward(inputs, {{"vmem", f32(shape)}, {"trace", f32(shape)}}, {{"gain", f32({})}}));
  EXPECT_EQ(f.outputs.at("spk").shape(), seq);
  NeuronGradients g;
  ASSERT_NO_THROW(g = neuron_backward(neuron, *f.residuals, {{"spk", f32(seq, 1.0)}},
                                      {{"trace", f32(seq)}}, {{"vmem", f32(shape)}}));
  EXPECT_EQ(g.params.at("gain").shape(), Shape{});
}

TEST_F(NeuronErrors, InputSequencesOfMismatchedShapeOrLength) {
  NamedArrays bad = inputs;
  bad["gate"] = f32({4, 5});
  expect_error<ShapeError>([&] { forward(bad); }, {"gate"}, "gate [4, 5] vs drive [4, 3]");
  bad["gate"] = f32({5, 3});
  expect_error<ShapeError>([&] { forward(bad); }, {"gate"}, "gate T = 5 vs drive T = 4");
  bad["gate"] = f32({4, 3, 1});
  expect_error<ShapeError>([&] { forward(bad); }, {"gate"}, "gate of another rank");
  // A sequence needs its time axis.
  bad = {{"drive", f32({})}, {"gate", f32({})}};
  expect_error<ShapeError>([&] { forward(bad); }, {"drive"}, "rank-0 sequences");
}

TEST_F(NeuronErrors, StatesAndParametersOfTheWrongShape) {
  expect_error<ShapeError>(
      [&] {
        forward(inputs, {{"vmem", f32({4})}});
      },
      {"vmem"}, "initial state [4] for neurons [3]");
  expect_error<ShapeError>(
      [&] {
        forward(inputs, {{"trace", f32({4, 3})}});
      },
      {"trace"}, "a sequence given as initial state");
  expect_error<ShapeError>(
      [&] {
        forward(inputs, {}, {{"gain", f32({2})}});
      },
      {"gain"}, "scalar parameter as [2]");
}

TEST_F(NeuronErrors, GradientsOfTheWrongShape) {
  const NeuronForward f = forward(inputs);
  expect_error<ShapeError>(
      [&] {
        neuron_backward(neuron, *f.residuals, {{"spk", f32({4, 2})}});
      },
      {"spk"}, "output gradient [4, 2]");
  expect_error<ShapeError>(
      [&] {
        neuron_backward(neuron, *f.residuals, {{"spk", f32({5, 3})}});
      },
      {"spk"}, "output gradient of another T");
  expect_error<ShapeError>(
      [&] {
        neuron_backward(neuron, *f.residuals, {}, {{"vmem", f32({3})}});
      },
      {"vmem"}, "state-sequence gradient without its time axis");
  expect_error<ShapeError>(
      [&] {
        neuron_backward(neuron, *f.residuals, {}, {}, {{"trace", f32({4, 3})}});
      },
      {"trace"}, "final-state gradient with a time axis");
}

TEST_F(NeuronErrors, UnknownNames) {
  NamedArrays bad = inputs;
  bad["bogus_input"] = f32(seq);
  expect_error<ValueError>([&] { forward(bad); }, {"bogus_input"}, "unknown input");
  expect_error<ValueError>(
      [&] {
        forward(inputs, {{"bogus_state", f32(shape)}});
      },
      {"bogus_state"}, "unknown state");
  expect_error<ValueError>(
      [&] {
        forward(inputs, {}, {{"bogus_param", f32({})}});
      },
      {"bogus_param"}, "unknown parameter");
  const NeuronForward f = forward(inputs);
  expect_error<ValueError>(
      [&] {
        neuron_backward(neuron, *f.residuals, {{"bogus_output", f32(seq)}});
      },
      {"bogus_output"}, "unknown output gradient");
  expect_error<ValueError>(
      [&] {
        neuron_backward(neuron, *f.residuals, {}, {{"bogus_seq", f32(seq)}});
      },
      {"bogus_seq"}, "unknown state-sequence gradient");
  expect_error<ValueError>(
      [&] {
        neuron_backward(neuron, *f.residuals, {}, {}, {{"bogus_final", f32(shape)}});
      },
      {"bogus_final"}, "unknown final-state gradient");
  // An output name is not a state name and the other way round.
  expect_error<ValueError>(
      [&] {
        neuron_backward(neuron, *f.residuals, {{"vmem", f32(seq)}});
      },
      {"vmem"}, "a state given as an output gradient");
  expect_error<ValueError>(
      [&] {
        forward(inputs, {{"spk", f32(shape)}});
      },
      {"spk"}, "an output given as an initial state");
}

TEST_F(NeuronErrors, MissingInput) {
  expect_error<ValueError>([&] { forward({{"drive", f32(seq)}}); }, {"gate"}, "gate missing");
  expect_error<ValueError>([&] { forward({}); }, {"drive"}, "no inputs at all");
}

TEST_F(NeuronErrors, StateForANeuronWithoutStates) {
  const Neuron stateless = Neuron::parse(kStatelessText);
  EXPECT_NO_THROW(neuron_forward(stateless, NeuronKernelKind::inference, {{"drive", f32(seq)}}));
  expect_error<ValueError>(
      [&] {
        neuron_forward(stateless, NeuronKernelKind::inference, {{"drive", f32(seq)}},
                       {{"vmem", f32(shape)}});
      },
      {"vmem"}, "initial state for a stateless neuron");
  const NeuronForward f =
      neuron_forward(stateless, NeuronKernelKind::training_forward, {{"drive", f32(seq)}});
  expect_error<ValueError>(
      [&] {
        neuron_backward(stateless, *f.residuals, {}, {}, {{"vmem", f32(shape)}});
      },
      {"vmem"}, "final-state gradient for a stateless neuron");
}

// Inputs: f32, bf16, flex16, u8, or f64 converted to f32 (neuron.hpp); initial states: any
// float dtype.
TEST_F(NeuronErrors, WrongDtypes) {
  NamedArrays bad = inputs;
  bad["gate"] = Array::zeros(seq, DType::i32);
  expect_error<DTypeError>([&] { forward(bad); }, {"gate"}, "i32 input");
  // f64 is accepted and converted to f32 first: the same result as the f32 values.
  const std::vector<double> g64{0.5, -1, 2, 0.25, 3, -0.5, 1, 1, 2, -2, 0.75, 4};
  const std::vector<float> g32(g64.begin(), g64.end());
  NamedArrays as_f64 = inputs, as_f32 = inputs;
  as_f64["gate"] = Array::from_vector(g64, seq);
  as_f32["gate"] = Array::from_vector(g32, seq);
  NeuronForward f64_result, f32_result;
  ASSERT_NO_THROW(f64_result = forward(as_f64, {}, {}, NeuronKernelKind::inference));
  f32_result = forward(as_f32, {}, {}, NeuronKernelKind::inference);
  EXPECT_EQ(f64_result.state_sequences.at("vmem").to_doubles(),
            f32_result.state_sequences.at("vmem").to_doubles());
  for (const DType ok : {DType::bf16, DType::flex16, DType::u8}) {
    bad["gate"] = Array::zeros(seq, ok);
    EXPECT_NO_THROW(forward(bad)) << dtype_name(ok) << " input";
  }
  expect_error<DTypeError>(
      [&] {
        forward(inputs, {{"vmem", Array::zeros(shape, DType::i32)}});
      },
      {"vmem"}, "i32 initial state");
  expect_error<DTypeError>(
      [&] {
        forward(inputs, {{"vmem", Array::zeros(shape, DType::u8)}});
      },
      {"vmem"}, "u8 initial state (not a float dtype)");
  // f64 is a float dtype: allowed for an initial state, with the result of its f32 value.
  const std::vector<double> v0{0.5, -0.25, 0.75};
  const NeuronForward from_f64 =
      forward(inputs, {{"vmem", Array::from_vector(v0, shape)}}, {}, NeuronKernelKind::inference);
  const std::vector<float> v0f{0.5f, -0.25f, 0.75f};
  const NeuronForward from_f32 =
      forward(inputs, {{"vmem", Array::from_vector(v0f, shape)}}, {}, NeuronKernelKind::inference);
  EXPECT_EQ(from_f64.state_sequences.at("vmem").to_doubles(),
            from_f32.state_sequences.at("vmem").to_doubles());
  expect_error<DTypeError>(
      [&] {
        forward(inputs, {}, {{"gain", Array::zeros({}, DType::i32)}});
      },
      {"gain"}, "i32 parameter");
  const NeuronForward f = forward(inputs);
  expect_error<DTypeError>(
      [&] {
        neuron_backward(neuron, *f.residuals, {{"spk", Array::zeros(seq, DType::i32)}});
      },
      {"spk"}, "i32 output gradient");
}

TEST_F(NeuronErrors, FixedParameterPassedAsARuntimeValue) {
  expect_error<ValueError>(
      [&] {
        forward(inputs, {}, {{"tau_m", f32({})}});
      },
      {"tau_m"}, "fixed parameter in params");
  const Neuron lif = Neuron::builtin("lif");
  expect_error<ValueError>(
      [&] {
        neuron_forward(lif, NeuronKernelKind::inference, {{"x", f32(seq)}}, {}, {{"tau", f32({})}});
      },
      {"tau"}, "lif's fixed tau in params");
}

TEST_F(NeuronErrors, ForwardRejectsTheBackwardKind) {
  expect_error<ValueError>([&] { forward(inputs, {}, {}, NeuronKernelKind::backward); },
                           {"backward"}, "neuron_forward with kind backward");
}

TEST_F(NeuronErrors, ResidualsFromAnotherNeuron) {
  const Neuron lif = Neuron::builtin("lif");
  const Neuron if_neuron = Neuron::builtin("if");
  const NeuronForward f =
      neuron_forward(lif, NeuronKernelKind::training_forward, {{"x", f32(seq)}});
  // Same signature (x; v) -> s, another body.
  expect_error<ValueError>(
      [&] {
        neuron_backward(if_neuron, *f.residuals, {{"s", f32(seq)}});
      },
      {"residuals"}, "lif residuals into if's backward");
  // Another signature altogether.
  expect_error<ValueError>(
      [&] {
        neuron_backward(neuron, *f.residuals, {{"spk", f32(seq)}});
      },
      {"residuals"}, "lif residuals into probe's backward");
  // The same built-in with another fixed parameter is another kernel.
  expect_error<ValueError>(
      [&] {
        neuron_backward(lif.with("tau", 5.0), *f.residuals, {{"s", f32(seq)}});
      },
      {"residuals"}, "lif(tau 2) residuals into lif(tau 5)'s backward");
}

// Arrays on two devices, and residuals on a device the gradients are not on. Needs a GPU.
TEST_F(NeuronErrors, DevicesMustAgree) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const Device gpu = Device::cuda(0);
  NamedArrays mixed = inputs;
  mixed["gate"] = f32(seq, 0.25, gpu);
  expect_error<DeviceError>([&] { forward(mixed); }, {"gate"}, "inputs on cpu and cuda");
  const NamedArrays on_gpu{{"drive", f32(seq, 0.25, gpu)}, {"gate", f32(seq, 0.25, gpu)}};
  expect_error<DeviceError>(
      [&] {
        forward(on_gpu, {{"vmem", f32(shape)}});
      },
      {"vmem"}, "initial state on cpu, inputs on cuda");
  const NeuronForward f = forward(on_gpu);
  expect_error<DeviceError>(
      [&] {
        neuron_backward(neuron, *f.residuals, {{"spk", f32(seq)}});
      },
      {"spk"}, "cuda residuals, cpu gradient");
}

TEST_F(NeuronErrors, ErrorsComeBeforeAnyWork) {
  // A layer whose call fails keeps its state.
  NeuronLayer layer(neuron);
  layer(inputs);
  const std::vector<double> before = layer.states().at("vmem").to_doubles();
  NamedArrays bad = inputs;
  bad["gate"] = f32({5, 3});
  EXPECT_THROW(layer(bad), ShapeError);
  EXPECT_EQ(layer.states().at("vmem").to_doubles(), before);
}

// Each built-in's parameters have a domain; a value outside it is a ValueError stating it.
TEST(BuiltinNeuronParameters, OutsideTheirDomainAreRefused) {
  auto message = [](const char* neuron, const char* param, double value) -> std::string {
    try {
      check_builtin_parameter(neuron, param, value);
    } catch (const ValueError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(message("lif", "tau", -3), "neuron lif: tau must be > 0 (got -3)");
  EXPECT_EQ(message("lif", "tau", 0), "neuron lif: tau must be > 0 (got 0)");
  EXPECT_EQ(message("alif", "tau_a", 0), "neuron alif: tau_a must be > 0 (got 0)");
  EXPECT_EQ(message("izhikevich", "tau_w", -1), "neuron izhikevich: tau_w must be > 0 (got -1)");
  EXPECT_EQ(message("eif", "delta_T", 0), "neuron eif: delta_T must be > 0 (got 0)");
  EXPECT_EQ(message("if", "v_threshold", std::numeric_limits<double>::infinity()),
            "neuron if: v_threshold must be finite (got inf)");
  EXPECT_EQ(message("lif", "soft_reset", 2), "neuron lif: soft_reset must be 0 or 1 (got 2)");
  // Inside the domain, another neuron's parameter, and a file's neuron all pass.
  EXPECT_EQ(message("lif", "tau", 0.5), "");
  EXPECT_EQ(message("lif", "v_threshold", -2), "");
  EXPECT_EQ(message("if", "tau", -3), "");
  EXPECT_EQ(message("probe", "tau_m", -3), "");
}

}  // namespace
}  // namespace flexkit
