// Which kernel a convolution plans (docs/kernels.md), asked through ConvPlan::kernel_name and
// conv_kernel_name without running anything: the documented choice under the run's
// FLEXKIT_CONV_KERNEL and FLEXKIT_CONV_STREAM_K (CTest runs the test_conv binary under each forced
// setting) or FLEXKIT_GEMM_ISA, and the fall-backs where a forced kernel does not apply.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "flexkit/conv.hpp"
#include "flexkit/cuda.hpp"
#include "flexkit/error.hpp"
#include "support/kernel_names.hpp"
#include "support/test_device.hpp"

namespace flexkit {
namespace {

using Arr3 = std::array<std::int64_t, 3>;

// A 2-d geometry (the seed's layouts, batch innermost).
struct Geo {
  std::int64_t C = 1, K = 1, N = 1;
  Arr3 in{1, 1, 1}, flt{1, 1, 1}, pad{0, 0, 0}, up{1, 1, 1};
  Shape input_shape() const { return {C, in[1], in[2], N}; }
  Shape filter_shape() const { return {C, flt[1], flt[2], K}; }
  ConvParams params() const { return {{pad[1], pad[2]}, {}, {}, {up[1], up[2]}}; }
  Shape output_shape() const { return conv_output_shape(input_shape(), filter_shape(), params()); }
};

// The kernel the plan names for a call, checked without running it, against the documented
// choice (docs/kernels.md) under the forcing variables of the run: CTest runs this binary with
// FLEXKIT_CONV_KERNEL=direct, lean and lockstep and with FLEXKIT_CONV_STREAM_K=0, 4 and 2000 as
// well, so each forced kernel is seen planned where it applies and falling back where it does
// not.
TEST(Conv, PlannedKernelFollowsTheSetting) {
  const Device d = test::device();
  struct Layer {
    const char* what;
    Geo g;
    ConvDirection dir;
    bool spikes = false;   // a u8 input
    bool f32 = false;      // f32 operands
    bool f32_out = false;  // an integer product into f32
    int out_iwl = 0;       // the stored exponent: the shift is 15 + out_iwl − (iwl_x + iwl_y)
  };
  auto geo = [](std::int64_t C, std::int64_t K, std::int64_t N, Arr3 in, std::int64_t flt) {
    Geo g;
    g.C = C, g.K = K, g.N = N;
    g.in = in;
    g.flt = {1, flt, flt};
    g.pad = {0, flt / 2, flt / 2};
    return g;
  };
  Geo upscaled = geo(16, 16, 8, {1, 6, 6}, 3);
  upscaled.up = {1, 2, 2};
  const std::vector<Layer> layers = {
      {"3x3 fprop", geo(16, 16, 8, {1, 6, 6}, 3), ConvDirection::fprop},
      {"1x1 fprop, 256 rows over one stage, shift 16", geo(64, 256, 8, {1, 9, 10}, 1),
       ConvDirection::fprop, false, false, false, 2},
      {"1x1 fprop, shift 10", geo(64, 256, 8, {1, 9, 10}, 1), ConvDirection::fprop, false, false,
       false, -4},
      {"1x1 fprop, shift 9", geo(64, 256, 8, {1, 9, 10}, 1), ConvDirection::fprop, false, false,
       false, -5},
      {"1x1 fprop into f32", geo(64, 256, 8, {1, 9, 10}, 1), ConvDirection::fprop, false, false,
       true},
      {"1x1 fprop of u8 spikes over four stages", geo(200, 136, 16, {1, 10, 11}, 1),
       ConvDirection::fprop, true, false, false, 10},
      {"3x3 update", geo(16, 16, 8, {1, 17, 17}, 3), ConvDirection::update},
      {"1x1 update of 40 rows", geo(300, 40, 8, {1, 20, 21}, 1), ConvDirection::update},
      {"f32 3x3 fprop", geo(16, 16, 8, {1, 6, 6}, 3), ConvDirection::fprop, false, true},
      {"upscaled fprop", upscaled, ConvDirection::fprop},
      {"fprop of a batch of 4", geo(16, 16, 4, {1, 6, 6}, 3), ConvDirection::fprop},
  };
  auto name_of = [&](const Layer& l) {
    const Geo& g = l.g;
    auto make = [&](const Shape& shape, int iwl, bool u8) {
      if (l.f32) return Array::zeros(shape, DType::f32, d);
      if (u8) return Array::zeros(shape, DType::u8, d);
      Array a = Array::zeros(shape, DType::flex16, d);
      a.set_iwl(iwl);
      return a;
    };
    const Array I = make(g.input_shape(), 3, l.spikes), F = make(g.filter_shape(), -2, false);
    const Array E = make(g.output_shape(), 5, false);
    const Shape out_shape = l.dir == ConvDirection::fprop ? g.output_shape() : g.filter_shape();
    const Array out = l.f32 || l.f32_out ? Array::zeros(out_shape, DType::f32, d)
                                         : make(out_shape, l.out_iwl, false);
    ConvOptions o;
    if (out.dtype() == DType::flex16) o.iwl = l.out_iwl;
    const ConvPlan plan(g.input_shape(), g.filter_shape(), g.params());
    if (l.dir == ConvDirection::fprop) return plan.kernel_name(l.dir, I, F, out, o);
    return conv_kernel_name(l.dir, I, E, out, g.params(), o);
  };
  if (d.is_cpu()) {
    for (const Layer& l : layers) EXPECT_EQ(name_of(l), test::expected_cpu_kernel_name()) << l.what;
  } else {
    const cuda::DeviceInfo info = cuda::device_info(d.index);
    const bool sm90 = info.compute_major == 9 && info.compute_minor == 0;
    const std::string kernel = test::env_or_empty("FLEXKIT_CONV_KERNEL");
    const bool stream_k_off = test::env_or_empty("FLEXKIT_CONV_STREAM_K") == "0";
    const bool lean = kernel == "lean", lockstep = kernel == "lockstep";
    const bool direct = !sm90 || kernel == "direct";
    const std::string transposed = "cuda.implicit_gemm.shallow_transposed";
    const std::string shallow = "cuda.implicit_gemm.shallow";
    const std::string lean_kernel = "cuda.implicit_gemm.lean";
    const std::string stream_k = stream_k_off ? lean_kernel : "cuda.implicit_gemm.stream_k";
    const std::string one_stage = lean       ? lean_kernel
                                  : lockstep ? shallow
                                  : kernel == "specialized"
                                      ? "cuda.implicit_gemm.shallow_specialized"
                                      : transposed;
    const std::vector<std::string> want = {
        lean_kernel,                                  // 9 stages: past the shallow kernels
        one_stage,                                    //
        one_stage,                                    // the shallow range's lowest shift
        lean_kernel,                                  // a shift below the shallow range
        lean_kernel,                                  // not a flex16 store
        lean ? lean_kernel : shallow,                 // u8: the one-role form
        stream_k,                                     // 9 tiles: a partly empty round
        lean || lockstep ? stream_k : "cuda.deep_k",  // a small side, a long K
        "cuda.direct",                                // f32: no tensor-core kernel
        "cuda.direct",                                // no gather takes an upscale
        "cuda.direct",                                // n's 16-byte copies need 8 entries
    };
    for (std::size_t i = 0; i < layers.size(); ++i) {
      const std::string expected = direct ? "cuda.direct" : want[i];
      EXPECT_EQ(name_of(layers[i]), expected)
          << layers[i].what << " (FLEXKIT_CONV_KERNEL=" << kernel << ")";
    }
  }
  // An empty batch runs nothing; a mismatched operand is refused as the call refuses it.
  Geo empty = geo(16, 16, 0, {1, 6, 6}, 3);
  const Array I0 = Array::zeros(empty.input_shape(), DType::f32, d);
  const Array F0 = Array::zeros(empty.filter_shape(), DType::f32, d);
  const Array O0 = Array::zeros(empty.output_shape(), DType::f32, d);
  EXPECT_EQ(conv_kernel_name(ConvDirection::fprop, I0, F0, O0, empty.params()), "none");
  const ConvPlan plan(empty.input_shape(), empty.filter_shape(), empty.params());
  EXPECT_THROW(plan.kernel_name(ConvDirection::fprop, I0, F0, F0), ShapeError);
}

}  // namespace
}  // namespace flexkit
