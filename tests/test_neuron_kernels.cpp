// FlexSN compilation properties: the residual plan, one compiled kernel serving every T, the
// C++ builder and plain text compiling to the same kernels as the built-ins, initial values and
// settings, introspection.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "flexkit/cuda.hpp"
#include "flexkit/neuron.hpp"
#include "snn/neuron_compiled.hpp"
#include "support/random_arrays.hpp"
#include "support/test_device.hpp"

namespace flexkit {
namespace {

TEST(NeuronKernels, LifAndIfStoreOneValuePerNeuronStep) {
  for (const char* name : {"lif", "if"}) {
    for (const char* reset : {"0", "none"}) {
      for (const char* detach : {"false", "true"}) {
        Neuron n = Neuron::builtin(name)
                       .with_setting("v_reset", reset)
                       .with_setting("detach_reset", detach);
        // One value: h, or h - v_threshold where h itself is not read (the cut nearest the
        // derivative is taken among equal-sized ones).
        ASSERT_EQ(n.residual_plan().size(), 1u) << name << " " << reset << " " << detach;
        EXPECT_EQ(n.residual_plan()[0].substr(0, 1), "h") << n.residual_plan()[0];
      }
    }
  }
  // And the training forward keeps exactly T * N values of 4 bytes (f32) or 2 (bf16).
  Neuron lif = Neuron::builtin("lif");
  Array x = test::uniform_array({5, 3, 7}, 1, 0.0f, 1.5f);
  NeuronForward f = neuron_forward(lif, NeuronKernelKind::training_forward, {{"x", x}});
  EXPECT_EQ(residual_bytes(*f.residuals), std::size_t{5 * 21 * 4});
  NeuronStorage half;
  half.residual_dtype = DType::bf16;
  f = neuron_forward(lif, NeuronKernelKind::training_forward, {{"x", x}}, {}, {}, half);
  EXPECT_EQ(residual_bytes(*f.residuals), std::size_t{5 * 21 * 2});
}

TEST(NeuronKernels, TwoStateNeuronPlansAtMostItsInputsAndStates) {
  // ALIF: the backward needs h, theta and the spike trace; never more values than the cut of
  // the step's inputs and states (x, v, a).
  Neuron alif = Neuron::builtin("alif");
  EXPECT_LE(alif.residual_plan().size(), 3u);
  EXPECT_GE(alif.residual_plan().size(), 1u);
}

TEST(NeuronKernels, OneCompiledKernelServesEveryT) {
  if (!test::device().is_cuda()) GTEST_SKIP() << "compilation is a CUDA matter";
  Neuron lif = Neuron::builtin("lif").with("tau", 3.0);
  Array x3 = test::uniform_array({3, 1000}, 2, 0.0f, 1.5f);
  Array x300 = test::uniform_array({300, 1000}, 3, 0.0f, 1.5f);
  neuron_forward(lif, NeuronKernelKind::inference, {{"x", x3}});
  const cuda::KernelCacheStats before = cuda::kernel_cache_stats();
  NeuronForward f = neuron_forward(lif, NeuronKernelKind::inference, {{"x", x300}});
  cuda::synchronize(0);
  const cuda::KernelCacheStats after = cuda::kernel_cache_stats();
  EXPECT_EQ(after.compiles, before.compiles);
  EXPECT_EQ(after.disk_hits, before.disk_hits);
  EXPECT_EQ(after.memory_hits, before.memory_hits + 1);
  EXPECT_EQ(f.outputs.at("s").shape(), (Shape{300, 1000}));
}

NamedArrays run_all(const Neuron& n, const Array& x, const Array& gs) {
  NeuronForward f = neuron_forward(n, NeuronKernelKind::training_forward, {{"x", x}}, {}, {},
                                   {.keep_state_sequences = true});
  NeuronGradients g = neuron_backward(n, *f.residuals, {{"s", gs}});
  return {{"s", f.outputs.at("s")},
          {"v", f.state_sequences.at("v")},
          {"gx", g.inputs.at("x")},
          {"gv0", g.initial_states.at("v")}};
}

TEST(NeuronKernels, BuilderTextAndBuiltinAgreeExactly) {
  NeuronBuilder b("built_lif");
  NeuronValue x = b.input("x");
  NeuronValue v = b.state("v");
  NeuronValue tau = b.param("tau", 2.0);
  NeuronValue h = b.let("h", v + (x - v) / tau);
  NeuronValue s = spike(h - 1.0, "sigmoid", 4.0);
  b.output("s", s);
  b.update("v", h * (1.0 - NeuronValue(neuron_value_from_text("s"))));
  Neuron built = b.build();
  Neuron text = Neuron::parse(R"(neuron plain(x; v) -> s {
    h = v + (x - v) / 2.0;
    s = spike(h - 1.0, sigmoid(4));
    v = h * (1 - s);
  })");
  Neuron builtin = Neuron::builtin("lif");
  EXPECT_EQ(built.residual_plan(), std::vector<std::string>{"h"});

  Array xs = test::uniform_array({16, 333}, 4, 0.0f, 1.5f);
  Array gs = test::uniform_array({16, 333}, 5, -1.0f, 1.0f);
  NamedArrays a = run_all(built, xs, gs), c = run_all(text, xs, gs), d = run_all(builtin, xs, gs);
  for (const char* k : {"s", "v", "gx", "gv0"}) {
    EXPECT_EQ(a.at(k).to_floats(), c.at(k).to_floats()) << k;
    // The built-in computes v' = s * v_reset + (1 - s) * h with v_reset = 0: the same values.
    EXPECT_EQ(a.at(k).to_floats(), d.at(k).to_floats()) << k;
  }
}

TEST(NeuronKernels, InitialValuesFollowSpikingJelly) {
  EXPECT_EQ(Neuron::builtin("lif").initial_state_value("v"), 0.0);
  EXPECT_EQ(Neuron::builtin("lif").with_setting("v_reset", "-0.2").initial_state_value("v"), -0.2);
  EXPECT_EQ(Neuron::builtin("lif").with_setting("v_reset", "none").initial_state_value("v"), 0.0);
  EXPECT_DOUBLE_EQ(Neuron::builtin("eif").initial_state_value("v"), -0.1);
  Neuron izh = Neuron::builtin("izhikevich").with("w_rest", 0.25);
  EXPECT_EQ(izh.initial_state_value("w"), 0.25);
  // Absent initial states start there.
  Array x = test::uniform_array({1, 4}, 6, 0.0f, 0.0f);
  NeuronForward f = neuron_forward(Neuron::builtin("lif").with_setting("v_reset", "-0.2"),
                                   NeuronKernelKind::inference, {{"x", x}});
  // One step of x = 0 from v0 = -0.2 with decay toward v_reset: h = -0.2 exactly.
  for (float v : f.state_sequences.at("v").to_floats()) EXPECT_FLOAT_EQ(v, -0.2f);
}

TEST(NeuronKernels, SettingsAndIntrospection) {
  Neuron plif = Neuron::builtin("plif").with_setting("init_tau", "3");
  double w = 0;
  for (const NeuronParamInfo& p : plif.params())
    if (p.name == "w") w = p.value;
  EXPECT_NEAR(w, -std::log(2.0), 1e-15);
  Neuron atan = Neuron::builtin("lif").with_setting("surrogate", "atan(3)");
  EXPECT_NE(atan.source().find("spike(h - v_threshold, atan(3))"), std::string::npos);
  EXPECT_THROW(Neuron::builtin("lif").with_setting("surrogate", "cosine"), ValueError);
  EXPECT_THROW(Neuron::builtin("lif").with_setting("decay_input", "maybe"), ValueError);
  EXPECT_THROW(Neuron::builtin("lif").with_setting("no_such", "1"), NeuronError);
  const Neuron lif = Neuron::builtin("lif");
  EXPECT_NE(lif.backward_program().find("spike_grad"), std::string::npos);
#if FLEXKIT_HAVE_CUDA
  EXPECT_NE(lif.cuda_source(NeuronKernelKind::backward).find("flexkit_step_kernel"),
            std::string::npos);
#else
  EXPECT_THROW(lif.cuda_source(NeuronKernelKind::backward), UnsupportedError);
#endif
  EXPECT_NE(lif.cpu_program(NeuronKernelKind::training_forward).find("residual h"),
            std::string::npos);
}

}  // namespace
}  // namespace flexkit
