// The CUDA programs of FlexSN step kernels, without a GPU: every program NVRTC compiles for
// Hopper, programs differ exactly when what they compute differs (not when only a carried
// initial value does, which is a kernel argument), listings say what the kernel does, and
// kernels beyond the slot limits are refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "backend/cuda/kernel_cache.hpp"
#include "codegen/cuda_step_kernel_source.hpp"
#include "flexkit/error.hpp"
#include "ir/step_kernel.hpp"

namespace flexkit::snn {
namespace {

namespace fs = std::filesystem;
using backend::cuda::KernelCache;

// Compiles into a private cache directory, so a stale cubin from elsewhere cannot hide a
// compile error.
class StepKernelSource : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() /
           ("flexkit-step-kernel-source-test-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    setenv("FLEXKIT_CACHE_DIR", dir_.c_str(), 1);
  }
  static void TearDownTestSuite() {
    unsetenv("FLEXKIT_CACHE_DIR");
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  static void expect_compiles(const StepKernel& kernel, std::int64_t fixed_steps = 0) {
    const std::string source = cuda_step_kernel_source(kernel, fixed_steps);
    std::string cubin;
    ASSERT_NO_THROW(cubin = KernelCache::instance().cubin(
                        "step_test_" + kernel.name + std::to_string(fixed_steps), source, "sm_90a"))
        << source;
    ASSERT_GT(cubin.size(), 4u);
    EXPECT_EQ(cubin.substr(0, 4), std::string("\x7f"
                                              "ELF"));
  }

  static fs::path dir_;
};
fs::path StepKernelSource::dir_;

// Appends instructions and returns their value ids.
struct Program {
  StepKernel& k;
  int add(ir::Op op, int a = -1, int b = -1, int c = -1) {
    ir::Instr in;
    in.op = op;
    in.a = a;
    in.b = b;
    in.c = c;
    return push(in);
  }
  int leaf(ir::Op op, int slot) {
    ir::Instr in;
    in.op = op;
    in.slot = slot;
    return push(in);
  }
  int constant(float v) {
    ir::Instr in;
    in.op = ir::Op::constant;
    in.constant = v;
    return push(in);
  }
  int spike_grad(int z, Surrogate s, float alpha) {
    ir::Instr in;
    in.op = ir::Op::spike_grad;
    in.a = z;
    in.surrogate = s;
    in.alpha = alpha;
    return push(in);
  }
  int push(const ir::Instr& in) {
    k.body.instrs.push_back(in);
    return static_cast<int>(k.body.instrs.size()) - 1;
  }
};

// h = v + (x - v) * 0.5; s = spike(h - 1); v' = h * (1 - s).
StepKernel lif(DType in = DType::f32, DType out = DType::f32) {
  StepKernel k;
  k.name = "lif_forward";
  k.seq_in = {{"x", in}};
  k.seq_out = {{"s", out}};
  k.carried = {{"v", 0.0f}};
  Program p{k};
  const int x = p.leaf(ir::Op::seq_in, 0);                               // %0
  const int v = p.leaf(ir::Op::carried, 0);                              // %1
  const int d = p.add(ir::Op::sub, x, v);                                // %2
  const int half = p.constant(0.5f);                                     // %3
  const int h = p.add(ir::Op::add, v, p.add(ir::Op::mul, d, half));      // %4 mul, %5 add
  const int one = p.constant(1.0f);                                      // %6
  const int s = p.add(ir::Op::spike, p.add(ir::Op::sub, h, one));        // %7 sub, %8 spike
  const int v_next = p.add(ir::Op::mul, h, p.add(ir::Op::sub, one, s));  // %9 sub, %10 mul
  k.seq_out_value = {s};
  k.carried_next = {v_next};
  return k;
}

// Every op, every surrogate, every sequence dtype on both sides, scalar and per-neuron
// parameters, constants without a decimal literal, several flex16 outputs; t runs backwards.
StepKernel everything() {
  StepKernel k;
  k.name = "everything_backward";
  k.reverse = true;
  k.seq_in = {{"grad_s", DType::f32},
              {"h", DType::bf16},
              {"x", DType::flex16},
              {"mask", DType::u8},
              {"unused", DType::f32}};
  k.seq_out = {{"grad_x", DType::f32},
               {"grad_h", DType::flex16},
               {"mix", DType::bf16},
               {"count", DType::u8},
               {"grad_w", DType::flex16}};
  k.carried = {{"grad_v", 0.0f}, {"acc", 2.5f}};
  k.params = {{"w", false}, {"tau", true}};
  Program p{k};
  const int gs = p.leaf(ir::Op::seq_in, 0);
  const int h = p.leaf(ir::Op::seq_in, 1);
  const int x = p.leaf(ir::Op::seq_in, 2);
  const int mask = p.leaf(ir::Op::seq_in, 3);
  const int gv = p.leaf(ir::Op::carried, 0);
  const int acc = p.leaf(ir::Op::carried, 1);
  const int w = p.leaf(ir::Op::param, 0);
  const int tau = p.leaf(ir::Op::param, 1);
  int sum = p.add(ir::Op::add, gs, gv);
  for (ir::Op op :
       {ir::Op::neg, ir::Op::abs, ir::Op::sqr, ir::Op::sqrt, ir::Op::exp, ir::Op::exp2, ir::Op::log,
        ir::Op::log2, ir::Op::sig, ir::Op::sig2, ir::Op::tanh, ir::Op::tanh2, ir::Op::reciprocal,
        ir::Op::floor, ir::Op::ceil, ir::Op::sign, ir::Op::spike, ir::Op::detach})
    sum = p.add(ir::Op::add, sum, p.add(op, h));
  for (Surrogate s :
       {Surrogate::kSigmoid, Surrogate::kAtan, Surrogate::kPiecewiseQuadratic,
        Surrogate::kPiecewiseExp, Surrogate::kSoftSign, Surrogate::kSuperSpike, Surrogate::kErf})
    sum = p.add(ir::Op::add, sum, p.spike_grad(h, s, 0.5f + static_cast<float>(s)));
  for (ir::Op op :
       {ir::Op::sub, ir::Op::mul, ir::Op::div, ir::Op::pow, ir::Op::eq, ir::Op::ne, ir::Op::lt,
        ir::Op::le, ir::Op::gt, ir::Op::ge, ir::Op::maximum, ir::Op::minimum})
    sum = p.add(ir::Op::add, sum, p.add(op, x, tau));
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            -0.0f,
                            std::numeric_limits<float>::denorm_min(),
                            std::numeric_limits<float>::max(),
                            0.1f};
  int c = p.constant(0.0f);
  for (float v : specials) c = p.add(ir::Op::add, c, p.constant(v));
  const int picked = p.add(ir::Op::where, mask, sum, c);
  const int clipped = p.add(ir::Op::clip, picked, p.add(ir::Op::neg, w), w);
  k.seq_out_value = {clipped, p.add(ir::Op::mul, clipped, w), sum, mask, c};
  k.carried_next = {p.add(ir::Op::mul, clipped, tau), p.add(ir::Op::add, acc, clipped)};
  return k;
}

// A reverse IF kernel whose residual h is replayed from its flex16 input x:
// h = v + x, v' = h * (1 - spike(h - 1)); dL/dx = dL/ds * spike'(h - 1) + dL/dv.
StepKernel replayed_if() {
  StepKernel k;
  k.name = "if_replayed_backward";
  k.reverse = true;
  k.seq_in = {{"h", DType::f32}, {"x", DType::flex16}, {"grad_s", DType::f32}};
  k.seq_in[0].replayed = true;
  k.seq_out = {{"grad_x", DType::f32}};
  k.carried = {{"grad_v", 0.0f}};
  Program p{k};
  const int h = p.leaf(ir::Op::seq_in, 0);
  const int gs = p.leaf(ir::Op::seq_in, 2);
  const int gv = p.leaf(ir::Op::carried, 0);
  const int z = p.add(ir::Op::sub, h, p.constant(1.0f));
  const int g =
      p.add(ir::Op::add, p.add(ir::Op::mul, gs, p.spike_grad(z, Surrogate::kAtan, 2.0f)), gv);
  k.seq_out_value = {g};
  k.carried_next = {g};

  StepKernel forward;  // the replay's body is built as a kernel body, then moved
  Program q{forward};
  const int x = q.leaf(ir::Op::seq_in, 1);
  const int v = q.leaf(ir::Op::carried, 0);
  const int hr = q.add(ir::Op::add, v, x);
  const int one = q.constant(1.0f);
  const int s = q.add(ir::Op::spike, q.add(ir::Op::sub, hr, one));
  const int v_next = q.add(ir::Op::mul, hr, q.add(ir::Op::sub, one, s));
  StepReplay r;
  r.body = forward.body;
  r.carried = {{"v", 0.0f}};
  r.carried_next = {v_next};
  r.values = {hr};
  k.replay = r;
  return k;
}

// A replaying kernel can be built for its T: the step count becomes a constant of the program
// and the replayed values an array of exactly T steps (registers once the loops unroll).
TEST_F(StepKernelSource, ReplayIsBuiltForItsStepCount) {
  const StepKernel k = replayed_if();
  expect_compiles(k);
  const std::string general = cuda_step_kernel_source(k);
  EXPECT_NE(general.find("const int64_t steps = args.steps;"), std::string::npos);
  EXPECT_NE(general.find("float replayed[16]"), std::string::npos);
  EXPECT_NE(general.find("__launch_bounds__(256)"), std::string::npos);
  for (const std::int64_t steps : {std::int64_t{1}, std::int64_t{4}, std::int64_t{16}}) {
    SCOPED_TRACE(steps);
    const std::string src = cuda_step_kernel_source(k, steps);
    EXPECT_NE(src.find("constexpr int64_t steps = " + std::to_string(steps) + ";"),
              std::string::npos);
    EXPECT_EQ(src.find("args.steps"), std::string::npos);
    EXPECT_NE(src.find("float replayed[" + std::to_string(steps) + "]"), std::string::npos);
    EXPECT_NE(src.find("__launch_bounds__(256, 3)"), std::string::npos);  // registers to spare
    expect_compiles(k, steps);
  }
  EXPECT_THROW(cuda_step_kernel_source(k, 17), ValueError);  // past what a replay keeps
  EXPECT_THROW(cuda_step_kernel_source(k, -1), ValueError);
}

TEST_F(StepKernelSource, LifCompilesForHopperInEveryDType) {
  for (DType in : {DType::f32, DType::bf16, DType::flex16, DType::u8})
    for (DType out : {DType::f32, DType::bf16, DType::flex16, DType::u8}) {
      SCOPED_TRACE(std::string(dtype_name(in)) + " -> " + std::string(dtype_name(out)));
      expect_compiles(lif(in, out));
    }
}

TEST_F(StepKernelSource, EveryOpAndSurrogateCompilesBackwards) {
  const StepKernel k = everything();
  expect_compiles(k);
  const std::string src = cuda_step_kernel_source(k);
  EXPECT_NE(src.find("flexkit_step_kernel"), std::string::npos);
  EXPECT_NE(src.find("steps - 1 - step"), std::string::npos);
  for (const char* s : {"kSurrogateSigmoid",
                        "kSurrogateAtan",
                        "kSurrogatePiecewiseQuadratic",
                        "kSurrogatePiecewiseExp",
                        "kSurrogateSoftSign",
                        "kSurrogateSuperSpike",
                        "kSurrogateErf",
                        "load_bf16(",
                        "load_flex16(",
                        "load_u8(",
                        "store_bf16(",
                        "store_u8(",
                        "encode_flex16(",
                        "ew_where(",
                        "ew_clip(",
                        "ew_spike(",
                        "bits_to_float(0x7fc00000u)",
                        "bits_to_float(0x7f800000u)",
                        "bits_to_float(0xff800000u)",
                        "args.params[1] + i"})
    EXPECT_NE(src.find(s), std::string::npos) << s;
  // The scalar parameter is read at element 0 for every neuron.
  EXPECT_NE(src.find("__ldg(args.params[0]);"), std::string::npos);
  // Two flex16 outputs: two block-wide commits, kept apart by a barrier.
  EXPECT_NE(src.find("commit_stats(out1_stats, args.seq_out_stats[1]);"), std::string::npos);
  EXPECT_NE(src.find("__syncthreads();"), std::string::npos);
  EXPECT_NE(src.find("commit_stats(out4_stats, args.seq_out_stats[4]);"), std::string::npos);
  // A sequence the body never reads is never loaded.
  EXPECT_EQ(src.find("args.seq_in[4]"), std::string::npos);
}

TEST_F(StepKernelSource, KernelsWithoutSlotsOrInstructionsCompile) {
  StepKernel empty;
  empty.name = "empty";
  expect_compiles(empty);
  StepKernel counter;  // a carried value and nothing else
  counter.name = "counter";
  counter.carried = {{"n", 0.0f}};
  Program p{counter};
  counter.carried_next = {p.add(ir::Op::add, p.leaf(ir::Op::carried, 0), p.constant(1.0f))};
  expect_compiles(counter);
}

TEST_F(StepKernelSource, SourceFollowsDTypesAndOpsButNotInitialValues) {
  const std::string base = cuda_step_kernel_source(lif());
  EXPECT_NE(base, cuda_step_kernel_source(lif(DType::bf16)));
  EXPECT_NE(base, cuda_step_kernel_source(lif(DType::f32, DType::flex16)));
  EXPECT_NE(cuda_step_kernel_source(lif(DType::bf16)), cuda_step_kernel_source(lif(DType::flex16)));
  EXPECT_NE(cuda_step_kernel_source(lif(DType::u8)), cuda_step_kernel_source(lif(DType::bf16)));

  StepKernel other_op = lif();
  other_op.body.instrs[4].op = ir::Op::add;
  EXPECT_NE(base, cuda_step_kernel_source(other_op));
  StepKernel other_constant = lif();
  other_constant.body.instrs[3].constant = 0.25f;
  EXPECT_NE(base, cuda_step_kernel_source(other_constant));
  StepKernel reversed = lif();
  reversed.reverse = true;
  EXPECT_NE(base, cuda_step_kernel_source(reversed));
  StepKernel with_param = lif();
  with_param.params = {{"w", false}};
  StepKernel per_neuron = with_param;
  per_neuron.params[0].per_neuron = true;
  EXPECT_NE(cuda_step_kernel_source(with_param), cuda_step_kernel_source(per_neuron));
  EXPECT_NE(step_kernel_structure(with_param), step_kernel_structure(per_neuron));
  StepKernel per_channel = with_param;
  per_channel.params[0].per_channel = true;
  EXPECT_NE(cuda_step_kernel_source(with_param), cuda_step_kernel_source(per_channel));
  EXPECT_NE(cuda_step_kernel_source(per_neuron), cuda_step_kernel_source(per_channel));
  EXPECT_NE(step_kernel_structure(per_neuron), step_kernel_structure(per_channel));
  EXPECT_NE(cuda_step_kernel_source(per_channel).find("quotient(i, args.channel_neurons"),
            std::string::npos);

  StepKernel other_alpha = everything();
  for (ir::Instr& in : other_alpha.body.instrs)
    if (in.op == ir::Op::spike_grad) in.alpha = 7.0f;
  EXPECT_NE(cuda_step_kernel_source(everything()), cuda_step_kernel_source(other_alpha));

  // The initial value is a kernel argument: same program, same cache key; but the listing,
  // which says what the kernel computes, shows it.
  StepKernel other_init = lif();
  other_init.carried[0].init_value = -65.0f;
  EXPECT_EQ(base, cuda_step_kernel_source(other_init));
  EXPECT_EQ(step_kernel_structure(lif()), step_kernel_structure(other_init));
  EXPECT_NE(to_string(lif()), to_string(other_init));
}

TEST_F(StepKernelSource, ListingShowsTheProgram) {
  const std::string s = to_string(lif(DType::bf16, DType::flex16));
  for (const char* line :
       {"step_kernel lif_forward (forward)\n", "  seq_in 0 x: bf16\n", "  seq_out 0 s: flex16\n",
        "  carried 0 v (init 0)\n", "  %0 = seq_in x\n", "  %1 = carried v\n",
        "  %2 = sub %0, %1\n", "  %3 = const 0.5\n", "  %4 = mul %2, %3\n", "  %8 = spike %7\n",
        "  seq_out s = %8\n", "  carried_next v = %10\n"})
    EXPECT_NE(s.find(line), std::string::npos) << line << "\nin\n" << s;

  const std::string e = to_string(everything());
  for (const char* text :
       {"step_kernel everything_backward (reverse)\n", "  param 0 w: scalar\n",
        "  param 1 tau: per neuron\n", "  carried 1 acc (init 2.5)\n", " = param tau\n",
        " = spike_grad sigmoid(0.5) %1\n", " = spike_grad erf(6.5) %1\n", " = const nan\n",
        " = const inf\n", " = const -inf\n", " = const -0\n", " = const 1e-45\n", " = const 0.1\n",
        " = where %3, ", " = clip ", " = detach %1\n"})
    EXPECT_NE(e.find(text), std::string::npos) << text << "\nin\n" << e;
  // Every op has a name of its own.
  for (int a = 0; a <= static_cast<int>(ir::Op::argmin); ++a)
    for (int b = 0; b < a; ++b)
      EXPECT_NE(ir::op_info(static_cast<ir::Op>(a)).name, ir::op_info(static_cast<ir::Op>(b)).name);
  EXPECT_EQ(ir::op_info(ir::Op::param).arity, 0);
  EXPECT_EQ(ir::op_info(ir::Op::spike_grad).arity, 1);
  EXPECT_EQ(ir::op_info(ir::Op::maximum).arity, 2);
  EXPECT_EQ(ir::op_info(ir::Op::where).arity, 3);
}

TEST_F(StepKernelSource, ConstantsRoundTripExactly) {
  // The shortest decimal in the listing reads back as the same float.
  for (float v : {0.1f, 1.0f / 3.0f, 6.02214076e23f, -1.17549435e-38f, 3.4028235e38f}) {
    StepKernel k;
    k.name = "c";
    Program p{k};
    p.constant(v);
    const std::string s = to_string(k);
    const std::size_t at = s.find("const ");
    ASSERT_NE(at, std::string::npos) << s;
    EXPECT_EQ(std::strtof(s.c_str() + at + 6, nullptr), v) << s;
  }
}

TEST_F(StepKernelSource, SameNamedSlotsAreListedByIndex) {
  StepKernel k;
  k.name = "dup";
  k.seq_in = {{"x", DType::f32}, {"x", DType::f32}};
  k.seq_out = {{"y", DType::f32}};
  Program p{k};
  const int second = p.leaf(ir::Op::seq_in, 1);
  k.seq_out_value = {second};
  StepKernel first = k;
  first.body.instrs[0].slot = 0;
  EXPECT_NE(to_string(k).find("%0 = seq_in #1\n"), std::string::npos) << to_string(k);
  EXPECT_NE(to_string(k), to_string(first));
  EXPECT_NE(cuda_step_kernel_source(k), cuda_step_kernel_source(first));
}

TEST_F(StepKernelSource, TooManySlotsAreUnsupported) {
  const int over = codegen::kStepMaxSlots + 1;
  StepKernel many_in = lif();
  while (static_cast<int>(many_in.seq_in.size()) < over)
    many_in.seq_in.push_back({"x", DType::f32});
  EXPECT_THROW(cuda_step_kernel_source(many_in), UnsupportedError);

  StepKernel many_carried = lif();
  while (static_cast<int>(many_carried.carried.size()) < over) {
    many_carried.carried.push_back({"v", 0.0f});
    many_carried.carried_next.push_back(0);
  }
  EXPECT_THROW(cuda_step_kernel_source(many_carried), UnsupportedError);

  StepKernel many_params = lif();
  many_params.params.assign(static_cast<std::size_t>(over), {"w", false});
  EXPECT_THROW(cuda_step_kernel_source(many_params), UnsupportedError);

  StepKernel many_out = lif();
  many_out.seq_out.assign(static_cast<std::size_t>(over), {"s", DType::f32});
  many_out.seq_out_value.assign(static_cast<std::size_t>(over), 8);
  EXPECT_THROW(cuda_step_kernel_source(many_out), UnsupportedError);

  // Exactly at the limit is fine.
  StepKernel at_limit = lif();
  at_limit.seq_out.assign(static_cast<std::size_t>(codegen::kStepMaxSlots), {"s", DType::f32});
  at_limit.seq_out_value.assign(static_cast<std::size_t>(codegen::kStepMaxSlots), 8);
  EXPECT_NO_THROW(cuda_step_kernel_source(at_limit));
}

TEST_F(StepKernelSource, MalformedKernelsAreRefused) {
  StepKernel forward_ref = lif();
  forward_ref.body.instrs[2].b = 5;  // not an earlier instruction
  EXPECT_THROW(cuda_step_kernel_source(forward_ref), ValueError);
  StepKernel bad_slot = lif();
  bad_slot.body.instrs[0].slot = 1;
  EXPECT_THROW(cuda_step_kernel_source(bad_slot), ValueError);
  StepKernel missing_output = lif();
  missing_output.seq_out_value.clear();
  EXPECT_THROW(cuda_step_kernel_source(missing_output), ValueError);
  StepKernel bad_value = lif();
  bad_value.carried_next = {11};
  EXPECT_THROW(cuda_step_kernel_source(bad_value), ValueError);
  StepKernel f64_sequence = lif(DType::f64);
  EXPECT_THROW(cuda_step_kernel_source(f64_sequence), DTypeError);
}

}  // namespace
}  // namespace flexkit::snn
