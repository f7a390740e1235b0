// The unrounded sums of an integer product and their one rounding; see exact_sums.hpp.
#include "gemm/exact_sums.hpp"

#include "backend/cpu/gemm_cpu.hpp"
#include "core/flex16_write.hpp"
#include "core/text.hpp"
#include "flexkit/error.hpp"
#include "gemm/exact_output.hpp"

namespace flexkit::gemm {

using detail::cat;

ExactSums exact_sums(const Array& a_in, const Array& b_in) {
  if (!a_in.defined() || !b_in.defined())
    throw ValueError("exact_sums: an operand is an empty Array handle");
  const std::string operands = cat("A ", a_in.describe(), ", B ", b_in.describe());
  if (a_in.rank() != 2 || b_in.rank() != 2)
    throw ShapeError(cat("exact_sums: operands must be matrices (rank 2); got ", operands));
  if (a_in.dim(1) != b_in.dim(0))
    throw ShapeError(cat("exact_sums: inner dimensions differ: ", operands));
  const DType ta = a_in.dtype(), tb = b_in.dtype();
  if (!((ta == DType::flex16 && (tb == DType::flex16 || tb == DType::u8)) ||
        (ta == DType::u8 && tb == DType::flex16)))
    throw DTypeError(cat("exact_sums: integer products only (flex16 × flex16, flex16 × u8, ",
                         "u8 × flex16); got ", operands));
  if (!(a_in.device() == b_in.device()))
    throw DeviceError(cat("exact_sums: operands are on different devices: ", operands));
  // The CPU's kernels take the sums; GPU operands come to the host (with their exponents).
  const Array a = a_in.device().is_cpu() ? a_in : a_in.copy_to(Device::cpu());
  const Array b = b_in.device().is_cpu() ? b_in : b_in.copy_to(Device::cpu());
  ExactSums s;
  s.m = a.dim(0);
  s.n = b.dim(1);
  s.iwl_ab = operand_iwl(a) + operand_iwl(b);
  s.values.assign(static_cast<std::size_t>(s.m * s.n), 0);
  if (s.m == 0 || s.n == 0 || a.dim(1) == 0) return s;
  GemmProblem p;
  p.m = s.m;
  p.n = s.n;
  p.k = a.dim(1);
  p.a = matrix_ref(a);
  p.b = matrix_ref(b);
  p.c = {s.values.data(), ElementKind::flex16, s.n, 1, 0};
  p.mode = EpilogueMode::sums;
  if (ta == DType::u8) transpose_problem(p);
  backend::cpu::run_gemm_cpu(backend::cpu::gemm_cpu_plan(p), p);
  return s;
}

void store_exact_sums(const ExactSums& s, const Array& out, const HeavyOpOptions& options) {
  if (!out.defined()) throw ValueError("store_exact_sums: out is an empty Array handle");
  if (out.shape() != Shape{s.m, s.n})
    throw ShapeError(cat("store_exact_sums: out must have shape ", shape_str(Shape{s.m, s.n}),
                         "; got ", out.describe()));
  if (out.dtype() != DType::flex16 && out.dtype() != DType::f32)
    throw DTypeError(cat("store_exact_sums: out must be flex16 or f32; got ", out.describe()));
  if (s.values.size() != static_cast<std::size_t>(s.m * s.n))
    throw ValueError(
        cat("store_exact_sums: ", s.values.size(), " sums for a ", s.m, " × ", s.n, " output"));
  check_output_owns_elements("store_exact_sums", "out", out);
  check_options("store_exact_sums", "out", out, options);
  if (s.m == 0 || s.n == 0) return;
  const detail::Flex16WritePlan write =
      detail::plan_flex16_write(out, options.iwl_policy, options.iwl, "store_exact_sums");
  detail::prepare_flex16_write(out, write, false);
  const HeavyOpOptions o = resolved_options(options, write);
  const bool flex_out = out.dtype() == DType::flex16;
  ExactOutput exact;
  exact.iwl_ab = s.iwl_ab;
  exact.flex_out = flex_out;
  exact.old_iwl = flex_out ? out.iwl() : 0;
  exact.alpha = o.alpha;
  exact.beta = o.beta;
  // The elements row-major on the host (with their old values where beta reads them).
  const bool direct = out.device().is_cpu() && out.is_contiguous();
  Array work = direct          ? out
               : o.beta != 0.0 ? out.copy_to(Device::cpu())
                               : Array::empty(out.shape(), out.dtype(), Device::cpu());
  // The kernels' epilogue (backend/cpu/gemm_cpu.cpp), element by element: the same rounding
  // and the same record. (A policy other than fixed is refused for an f32 output, so only a
  // flex16 output is ever measured.)
  auto run_pass = [&](const GemmProblem& pass) {
    portable::GemmStats stats = portable::gemm_stats_identity();
    const portable::GemmEpilogue& e = pass.epilogue;
    const bool store = pass.mode == EpilogueMode::store;
    const std::size_t count = s.values.size();
    if (flex_out) {
      auto* m = static_cast<std::int16_t*>(work.data());
      for (std::size_t i = 0; i < count; ++i) {
        const std::int16_t old = e.reads_old ? m[i] : std::int16_t{0};
        if (store) {
          const portable::Flex16Code code = portable::gemm_flex16_result(e, s.values[i], old);
          m[i] = code.m;
          portable::gemm_stats_store(stats, code);
        } else {
          portable::gemm_stats_measure(stats, e, s.values[i], old);
        }
      }
    } else {
      auto* f = static_cast<float*>(work.data());
      for (std::size_t i = 0; i < count; ++i)
        f[i] = portable::gemm_f32_result(e, s.values[i], e.reads_old ? f[i] : 0.0f);
    }
    return known_stats(stats);
  };
  GemmProblem passes;  // only its epilogue and mode are read
  const StoredResult result = run_exact_passes(
      passes, exact, fixed_out_iwl(out, o), flex_out && o.iwl_policy == IwlPolicy::exact, run_pass);
  if (!direct) {
    Array target = out;  // a handle: writes go through to the caller's elements
    if (flex_out) {
      target.set_iwl(result.out_iwl);
      work.set_iwl(result.out_iwl);
    }
    target.assign(work);
  }
  if (flex_out) record_flex16_result(out, result.out_iwl, result.stats);
  detail::finish_flex16_write(out, write);
}

}  // namespace flexkit::gemm
