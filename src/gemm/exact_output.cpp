// Host-side helpers shared by the exact products; see exact_output.hpp.
#include "gemm/exact_output.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <utility>
#include <vector>

#include "core/storage.hpp"
#include "core/text.hpp"
#include "flexkit/error.hpp"
#include "flexkit/expr.hpp"
#include "flexkit/flex16.hpp"

namespace flexkit::gemm {
namespace {

using portable::GemmEpilogue;

// The lowest and highest element offsets a view reaches, for overlap checks.
std::pair<std::int64_t, std::int64_t> element_span(const Array& x) {
  std::int64_t lo = x.offset(), hi = x.offset();
  for (int i = 0; i < x.rank(); ++i) {
    std::int64_t reach = (x.dim(i) - 1) * x.strides()[i];
    (reach < 0 ? lo : hi) += reach;
  }
  return {lo, hi};
}

}  // namespace

ElementKind kind_of(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return ElementKind::f32;
    case DType::flex16:
      return ElementKind::flex16;
    default:
      return ElementKind::u8;
  }
}

MatrixRef matrix_ref(const Array& x) {
  MatrixRef r;
  r.data = x.data();
  r.kind = kind_of(x.dtype());
  int rank = x.rank();
  r.row_stride = x.strides()[rank - 2];
  r.col_stride = x.strides()[rank - 1];
  r.batch_stride = rank == 3 ? x.strides()[0] : 0;
  return r;
}

void transpose_problem(GemmProblem& p) {
  std::swap(p.m, p.n);
  MatrixRef a = p.a, b = p.b;
  p.a = {b.data, b.kind, b.col_stride, b.row_stride, b.batch_stride};
  p.b = {a.data, a.kind, a.col_stride, a.row_stride, a.batch_stride};
  std::swap(p.c.row_stride, p.c.col_stride);
}

int operand_iwl(const Array& x) {
  return x.dtype() == DType::u8 ? 15 : x.iwl();
}

ExactOutput exact_output(const Array& a, const Array& b, const Array& out, double alpha,
                         double beta) {
  ExactOutput o;
  o.iwl_ab = operand_iwl(a) + operand_iwl(b);
  o.flex_out = out.dtype() == DType::flex16;
  o.old_iwl = o.flex_out ? out.iwl() : 0;
  o.alpha = alpha;
  o.beta = beta;
  return o;
}

GemmEpilogue make_epilogue(const ExactOutput& o, int out_iwl) {
  GemmEpilogue e{};
  e.out_kind = o.flex_out ? portable::GemmOutKind::flex16 : portable::GemmOutKind::f32;
  e.integer_only = o.flex_out && o.alpha == 1.0 && o.beta == 0.0;
  e.scale = 15 + out_iwl - o.iwl_ab;
  e.alpha = o.alpha;
  e.beta = o.beta;
  e.acc_unit = portable::pow2d(o.iwl_ab - 30);
  e.old_unit = o.flex_out ? portable::pow2d(o.old_iwl - 15) : 1.0;
  e.out_inv_unit = portable::pow2d(15 - out_iwl);
  e.reads_old = o.beta != 0.0;
  return e;
}

int exact_iwl(const portable::GemmStats& s, const ExactOutput& o) {
  for (int iwl = kFlex16MinIwl; iwl <= kFlex16MaxIwl; ++iwl) {
    GemmEpilogue e = make_epilogue(o, iwl);
    bool fits;
    if (e.integer_only) {
      if (s.acc_max == 0 && s.acc_min == 0) return 0;
      fits = !portable::gemm_round_shift(s.acc_max, e.scale).saturated &&
             !portable::gemm_round_shift(s.acc_min, e.scale).saturated;
    } else {
      double hi = portable::gemm_from_order_key(s.value_max_key);
      double lo = portable::gemm_from_order_key(s.value_min_key);
      if (hi == 0.0 && lo == 0.0) return 0;
      auto saturates = [&](double v) {
        return portable::saturate_rounded(
                   portable::round_half_even(portable::mul_rn(v, e.out_inv_unit)))
            .saturated;
      };
      fits = !saturates(hi) && !saturates(lo);
    }
    if (fits) return iwl;
  }
  return kFlex16MaxIwl;
}

void record_flex16_result(const Array& out, int out_iwl, const ExactStats& stats) {
  detail::Storage& storage = ArrayAccess::storage(out);
  storage.iwl = out_iwl;
  storage.set_stats({stats.value.max_abs_m, stats.value.saturated, 0});
  if (stats.pending) storage.set_pending_stats(stats.pending);
}

void check_options(const char* operation, const char* out_name, const Array& out,
                   const HeavyOpOptions& o) {
  if (out.dtype() != DType::flex16 && (o.iwl || o.iwl_policy != IwlPolicy::fixed))
    throw DTypeError(detail::cat(operation, ": an iwl or iwl policy was given but ", out_name, " ",
                                 out.describe(), " is not flex16"));
  if (o.iwl) check_iwl(*o.iwl, operation);
  if (!std::isfinite(o.alpha) || !std::isfinite(o.beta))
    throw ValueError(detail::cat(operation, ": alpha and beta must be finite; got alpha ", o.alpha,
                                 ", beta ", o.beta));
}

void check_output_owns_elements(const char* operation, const char* out_name, const Array& out) {
  if (!out.writable() || self_overlapping(out))
    throw ValueError(detail::cat(operation, ": ", out_name, " ", out.describe(),
                                 " is a read-only or broadcast view (several of its elements "
                                 "share memory); pass an array that owns each element"));
}

HeavyOpOptions resolved_options(const HeavyOpOptions& options,
                                const detail::Flex16WritePlan& write) {
  HeavyOpOptions r = options;
  r.iwl_policy = write.policy;
  r.iwl = write.iwl;
  return r;
}

void scale_output(const Array& out, const HeavyOpOptions& o) {
  Array target = out;  // a handle: writes go through to the caller's elements
  if (out.dtype() == DType::flex16 && o.iwl) target.set_iwl(*o.iwl);
  if (o.beta == 0.0) {
    target.fill(0.0);
  } else {
    assign(out, Expr(out) * o.beta);
  }
}

int fixed_out_iwl(const Array& out, const HeavyOpOptions& o) {
  if (out.dtype() != DType::flex16) return 0;
  return o.iwl ? *o.iwl : out.iwl();
}

bool overlaps(const Array& out, const Array& in) {
  if (!out.shares_storage(in) || out.size() == 0 || in.size() == 0) return false;
  // Byte ranges, since the two views may have different element sizes.
  auto [olo, ohi] = element_span(out);
  auto [ilo, ihi] = element_span(in);
  std::int64_t os = static_cast<std::int64_t>(itemsize(out.dtype()));
  std::int64_t is = static_cast<std::int64_t>(itemsize(in.dtype()));
  return olo * os <= ihi * is + is - 1 && ilo * is <= ohi * os + os - 1;
}

bool self_overlapping(const Array& x) {
  // Sorted by |stride|, each stride must step past everything the smaller axes span.
  std::vector<std::pair<std::int64_t, std::int64_t>> axes;  // (|stride|, extent)
  for (int i = 0; i < x.rank(); ++i)
    if (x.dim(i) > 1) axes.emplace_back(std::llabs(x.strides()[i]), x.dim(i));
  std::sort(axes.begin(), axes.end());
  std::int64_t covered = 1;  // elements spanned by the smaller axes
  for (auto [stride, extent] : axes) {
    if (stride < covered) return true;
    covered = stride * (extent - 1) + covered;
  }
  return false;
}

}  // namespace flexkit::gemm
