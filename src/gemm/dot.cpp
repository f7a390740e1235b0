// dot(): checks a matrix product's operands, normalises them into a GemmProblem (strides, not
// copies) and runs it on the operands' device. The exact `iwl` policy runs the product twice:
// once measuring the result's range, once storing at the exponent that range asks for.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <vector>

#include "backend/cpu/gemm_cpu.hpp"
#include "backend/cuda/gemm_cuda_calls.hpp"
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

// Checks ranks, shapes, dtypes, devices and overlaps; returns the problem's sizes.
Shapes check_operands(const Array& a, const Array& b, const Array& out) {
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
  if (!out.writable() || gemm::self_overlapping(out))
    throw ValueError(detail::cat("dot: out ", out.describe(),
                                 " is a read-only or broadcast view (several of its elements "
                                 "share memory); pass an array that owns each element"));
  if (gemm::overlaps(out, a) || gemm::overlaps(out, b))
    throw ValueError(detail::cat("dot: out overlaps an input (", operands_text(a, b, out),
                                 "); the product would read what it writes — pass a separate "
                                 "output array"));
  return {batch, m, n, k};
}

gemm::MatrixRef matrix_ref(const Array& x) {
  gemm::MatrixRef r;
  r.data = x.data();
  r.kind = kind_of(x.dtype());
  int rank = x.rank();
  r.row_stride = x.strides()[rank - 2];
  r.col_stride = x.strides()[rank - 1];
  r.batch_stride = rank == 3 ? x.strides()[0] : 0;
  return r;
}

gemm::OutputRef output_ref(const Array& x) {
  gemm::OutputRef r;
  r.data = x.data();
  r.kind = kind_of(x.dtype());
  int rank = x.rank();
  r.row_stride = x.strides()[rank - 2];
  r.col_stride = x.strides()[rank - 1];
  r.batch_stride = rank == 3 ? x.strides()[0] : 0;
  return r;
}

// C = A·B ⇔ Cᵀ = Bᵀ·Aᵀ: lets the kernels see every integer product with A flex16.
void transpose_problem(GemmProblem& p) {
  std::swap(p.m, p.n);
  gemm::MatrixRef a = p.a, b = p.b;
  p.a = {b.data, b.kind, b.col_stride, b.row_stride, b.batch_stride};
  p.b = {a.data, a.kind, a.col_stride, a.row_stride, a.batch_stride};
  std::swap(p.c.row_stride, p.c.col_stride);
}

gemm::ExactStats run_problem(const GemmProblem& p, Device device) {
  if (device.is_cpu()) return gemm::known_stats(gemm::gemm_cpu(p));
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

}  // namespace

void dot(const Array& a, const Array& b, const Array& out, const DotOptions& options) {
  Shapes s = check_operands(a, b, out);
  bool flex_out = out.dtype() == DType::flex16;
  if (!flex_out && (options.iwl || options.iwl_policy != IwlPolicy::fixed))
    throw DTypeError(detail::cat("dot: an iwl or iwl policy was given but out ", out.describe(),
                                 " is not flex16"));
  if (options.iwl) check_iwl(*options.iwl, "dot");
  if (!std::isfinite(options.alpha) || !std::isfinite(options.beta))
    throw ValueError(detail::cat("dot: alpha and beta must be finite; got alpha ", options.alpha,
                                 ", beta ", options.beta));
  if (s.batch == 0 || s.m == 0 || s.n == 0) return;
  if (s.k == 0) {        // an empty sum: out = beta · out
    Array target = out;  // a handle: writes go through to the caller's elements
    if (options.iwl) target.set_iwl(*options.iwl);
    if (options.beta == 0.0)
      target.fill(0.0);
    else
      assign(out, Expr(out) * options.beta);
    return;
  }

  GemmProblem p;
  p.batch = s.batch;
  p.m = s.m;
  p.n = s.n;
  p.k = s.k;
  p.a = matrix_ref(a);
  p.b = matrix_ref(b);
  p.c = output_ref(out);
  p.alpha = static_cast<float>(options.alpha);
  p.beta = static_cast<float>(options.beta);
  if (a.dtype() == DType::f32) {
    if (out.device().is_cuda() && !gemm::cublas_accepts(p)) {
      run_f32_staged(a, b, out, options);
      return;
    }
    run_problem(p, out.device());
    return;
  }
  if (a.dtype() == DType::u8) transpose_problem(p);

  const gemm::ExactOutput exact = gemm::exact_output(a, b, out, options.alpha, options.beta);
  int out_iwl = flex_out ? (options.iwl ? *options.iwl : out.iwl()) : 0;
  if (flex_out && options.iwl_policy == IwlPolicy::exact) {
    p.epilogue = gemm::make_epilogue(exact, out_iwl);
    p.mode = gemm::EpilogueMode::measure;
    out_iwl = gemm::exact_iwl(run_problem(p, out.device()).value, exact);
  }
  p.epilogue = gemm::make_epilogue(exact, out_iwl);
  p.mode = gemm::EpilogueMode::store;
  const gemm::ExactStats stats = run_problem(p, out.device());
  if (flex_out) gemm::record_flex16_result(out, out_iwl, stats);
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
