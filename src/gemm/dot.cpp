// dot(): checks a matrix product's operands, normalises them into a GemmProblem (strides, not
// copies) and runs it on the operands' device through that problem class's plan. The exact `iwl`
// policy runs the product twice: once measuring the result's range, once storing at the exponent
// that range asks for. dot_kernel_name() makes the same checks and problem, and names the plan.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "backend/cpu/gemm_cpu.hpp"
#include "backend/cuda/gemm_cuda_calls.hpp"
#include "backend/heavy_op_plan.hpp"
#include "core/flex16_write.hpp"
#include "core/text.hpp"
#include "flexkit/cuda.hpp"
#include "flexkit/error.hpp"
#include "flexkit/gemm.hpp"
#include "gemm/exact_output.hpp"

namespace flexkit {
namespace {

using gemm::ElementKind;
using gemm::GemmProblem;
using gemm::kind_of;
using portable::GemmStats;

const char* const kCombinations =
    "f32 × f32, flex16 × flex16, flex16 × u8 or u8 × flex16, into f32 (or flex16 for the "
    "integer products)";

std::string operands_text(const Array& a, const Array& b, const Array& out) {
  return detail::cat("A ", a.describe(), ", B ", b.describe(), ", out ", out.describe());
}

struct Shapes {
  std::int64_t batch, m, n, k;
};

// Checks ranks, shapes, dtypes, devices, overlaps and the options; returns the problem's sizes.
Shapes check_call(const Array& a, const Array& b, const Array& out, const DotOptions& options) {
  if (!a.defined() || !b.defined() || !out.defined())
    throw ValueError("dot: an operand is an empty Array handle");
  auto rank_ok = [](const Array& x) { return x.rank() == 2 || x.rank() == 3; };
  if (!rank_ok(a) || !rank_ok(b) || !rank_ok(out))
    throw ShapeError(
        detail::cat("dot: operands must be matrices (rank 2) or batches of matrices "
                    "(rank 3); got ",
                    operands_text(a, b, out)));
  std::int64_t m = a.dim(a.rank() - 2), k = a.dim(a.rank() - 1);
  std::int64_t kb = b.dim(b.rank() - 2), n = b.dim(b.rank() - 1);
  if (k != kb)
    throw ShapeError(detail::cat("dot: inner dimensions differ: A has ", k, " columns, B has ", kb,
                                 " rows (", operands_text(a, b, out), ")"));
  bool batched = a.rank() == 3 || b.rank() == 3;
  std::int64_t batch = a.rank() == 3 ? a.dim(0) : (b.rank() == 3 ? b.dim(0) : 1);
  if (a.rank() == 3 && b.rank() == 3 && a.dim(0) != b.dim(0))
    throw ShapeError(detail::cat("dot: batch sizes differ: A has ", a.dim(0), ", B has ", b.dim(0),
                                 " (", operands_text(a, b, out), ")"));
  Shape expected = batched ? Shape{batch, m, n} : Shape{m, n};
  if (out.shape() != expected)
    throw ShapeError(detail::cat("dot: out must have shape ", shape_str(expected), "; got ",
                                 operands_text(a, b, out)));
  if (!(a.device() == out.device()) || !(b.device() == out.device()))
    throw DeviceError(
        detail::cat("dot: operands are on different devices: ", operands_text(a, b, out)));
  DType ta = a.dtype(), tb = b.dtype(), to = out.dtype();
  bool float_product = ta == DType::f32 && tb == DType::f32 && to == DType::f32;
  bool integer_inputs = (ta == DType::flex16 && (tb == DType::flex16 || tb == DType::u8)) ||
                        (ta == DType::u8 && tb == DType::flex16);
  bool integer_product = integer_inputs && (to == DType::flex16 || to == DType::f32);
  if (!float_product && !integer_product)
    throw DTypeError(detail::cat("dot: unsupported types ", dtype_name(ta), " × ", dtype_name(tb),
                                 " → ", dtype_name(to), "; supported: ", kCombinations));
  gemm::check_output_owns_elements("dot", "out", out);
  if (gemm::overlaps(out, a) || gemm::overlaps(out, b))
    throw ValueError(detail::cat("dot: out overlaps an input (", operands_text(a, b, out),
                                 "); the product would read what it writes — pass a separate "
                                 "output array"));
  gemm::check_options("dot", "out", out, options);
  return {batch, m, n, k};
}

// The output takes the operands' form.
gemm::OutputRef output_ref(const Array& x) {
  const gemm::MatrixRef r = gemm::matrix_ref(x);
  return {x.data(), r.kind, r.row_stride, r.col_stride, r.batch_stride};
}

// The problem of a checked call with something to multiply (integer products see A flex16); its
// epilogue is set per pass.
GemmProblem problem_of(const Array& a, const Array& b, const Array& out, const DotOptions& options,
                       const Shapes& s) {
  GemmProblem p;
  p.batch = s.batch;
  p.m = s.m;
  p.n = s.n;
  p.k = s.k;
  p.a = gemm::matrix_ref(a);
  p.b = gemm::matrix_ref(b);
  p.c = output_ref(out);
  p.alpha = static_cast<float>(options.alpha);
  p.beta = static_cast<float>(options.beta);
  if (a.dtype() == DType::u8) gemm::transpose_problem(p);
  return p;
}

gemm::ExactStats run_problem(const GemmProblem& p, Device device) {
  if (device.is_cpu()) {
    const backend::cpu::GemmCpuPlan& plan = backend::cpu::gemm_cpu_plan(p);
    return gemm::known_stats(backend::cpu::run_gemm_cpu(plan, p));
  }
  void* stream = cuda::current_stream(device.index);
  if (p.a.kind == ElementKind::f32) {
    gemm::gemm_f32_cuda(p, device.index, stream);
    return gemm::known_stats(portable::gemm_stats_identity());
  }
  return gemm::gemm_integer_cuda_stats(p, device.index, stream);
}

// cuBLAS needs one unit stride per matrix: other f32 views go through contiguous copies (the
// output's old values too when beta accumulates), then the result is written back.
void run_f32_staged(const Array& a, const Array& b, const Array& out, const DotOptions& options) {
  Array staged_out =
      options.beta != 0.0 ? out.clone() : Array::empty(out.shape(), out.dtype(), out.device());
  dot(a.contiguous(), b.contiguous(), staged_out, options);
  Array target = out;
  target.assign(staged_out);
}

void dot_resolved(const Array& a, const Array& b, const Array& out, const DotOptions& options,
                  const Shapes& s);

}  // namespace

void dot(const Array& a, const Array& b, const Array& out, const DotOptions& options) {
  const Shapes s = check_call(a, b, out, options);
  const detail::Flex16WritePlan write =
      detail::plan_flex16_write(out, options.iwl_policy, options.iwl, "dot");
  detail::prepare_flex16_write(out, write, false);
  dot_resolved(a, b, out, gemm::resolved_options(options, write), s);
  detail::finish_flex16_write(out, write);
}

namespace {

void dot_resolved(const Array& a, const Array& b, const Array& out, const DotOptions& options,
                  const Shapes& s) {
  if (s.batch == 0 || s.m == 0 || s.n == 0) return;
  if (s.k == 0) {  // an empty sum: out = beta · out
    gemm::scale_output(out, options);
    return;
  }
  GemmProblem p = problem_of(a, b, out, options, s);
  if (a.dtype() == DType::f32) {
    if (out.device().is_cuda() && !gemm::cublas_accepts(p)) {
      gemm::gemm_cuda_plan(p, out.device().index);  // the staged class's plan (and log line)
      run_f32_staged(a, b, out, options);
      return;
    }
    run_problem(p, out.device());
    return;
  }
  const bool flex_out = out.dtype() == DType::flex16;
  const gemm::StoredResult result = gemm::run_exact_passes(
      p, gemm::exact_output(a, b, out, options.alpha, options.beta),
      gemm::fixed_out_iwl(out, options), flex_out && options.iwl_policy == IwlPolicy::exact,
      [&](const GemmProblem& pass) { return run_problem(pass, out.device()); });
  if (flex_out) gemm::record_flex16_result(out, result.out_iwl, result.stats);
}

}  // namespace

std::string dot_kernel_name(const Array& a, const Array& b, const Array& out,
                            const DotOptions& given) {
  const Shapes s = check_call(a, b, out, given);
  const DotOptions options = gemm::resolved_options(
      given, detail::plan_flex16_write(out, given.iwl_policy, given.iwl, "dot"));
  if (s.batch == 0 || s.m == 0 || s.n == 0 || s.k == 0) return "none";
  GemmProblem p = problem_of(a, b, out, options, s);
  if (a.dtype() != DType::f32) {
    // The storing pass at the fixed policy's exponent (the measuring pass plans alike).
    p.epilogue = gemm::make_epilogue(gemm::exact_output(a, b, out, options.alpha, options.beta),
                                     gemm::fixed_out_iwl(out, options));
    p.mode = gemm::EpilogueMode::store;
  }
  if (out.device().is_cpu()) return backend::cpu::gemm_cpu_plan(p).kernel_name;
  return gemm::gemm_cuda_plan(p, out.device().index).kernel_name;
}

Array dot(const Array& a, const Array& b, std::optional<DType> out_dtype) {
  if (!a.defined() || !b.defined()) throw ValueError("dot: an operand is an empty Array handle");
  bool integer = a.dtype() != DType::f32 || b.dtype() != DType::f32;
  DType dtype = out_dtype ? *out_dtype : (integer ? DType::flex16 : DType::f32);
  Shape shape;
  if (a.rank() == 3)
    shape.push_back(a.dim(0));
  else if (b.rank() == 3)
    shape.push_back(b.dim(0));
  shape.push_back(a.rank() >= 2 ? a.dim(a.rank() - 2) : 0);
  shape.push_back(b.rank() >= 2 ? b.dim(b.rank() - 1) : 0);
  Array out = Array::empty(shape, dtype, a.device());
  DotOptions options;
  if (dtype == DType::flex16) options.iwl_policy = IwlPolicy::exact;
  dot(a, b, out, options);
  return out;
}

}  // namespace flexkit
