// Describing one expression stage for a CUDA launch: the kernel kind, the coalesced layouts, each
// operand's access class, index width and whether vector access is allowed, then the structural
// key. Cheap, since it runs on every assignment; the source is generated only on a cache miss.
#include "codegen/cuda_expr_source.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/storage.hpp"
#include "core/text.hpp"
#include "flexkit/error.hpp"

namespace flexkit::codegen {

using detail::cat;
using ir::Op;

namespace {

// ---- layout facts -------------------------------------------------------------------------------

constexpr std::int64_t kIndex32Limit = std::int64_t{1} << 31;

// Largest |offset| a layout reaches from element 0.
std::int64_t offset_extent(const StridedLayout& l) {
  std::int64_t e = 0;
  for (int d = 0; d < l.rank; ++d) e += (l.shape[d] - 1) * std::llabs(l.strides[d]);
  return e;
}

bool all_zero_strides(const StridedLayout& l) {
  for (int d = 0; d < l.rank; ++d)
    if (l.strides[d] != 0) return false;
  return true;
}

Access access_of_stride(std::int64_t stride) {
  return stride == 1 ? Access::unit : (stride == 0 ? Access::zero : Access::other);
}

// Whether vector access of `elements` elements works at `data` plus any multiple of the first
// `dims` strides (and of `extra_stride`).
bool vector_aligned(const void* data, DType dtype, int elements, const StridedLayout& l, int dims,
                    std::int64_t extra_stride = 0) {
  const auto size = static_cast<std::int64_t>(itemsize(dtype));
  const std::int64_t align = std::min<std::int64_t>(16, elements * size);
  if (reinterpret_cast<std::uintptr_t>(data) % static_cast<std::uintptr_t>(align) != 0)
    return false;
  for (int d = 0; d < dims; ++d)
    if ((l.strides[d] * size) % align != 0) return false;
  return (extra_stride * size) % align == 0;
}

ExprOperand operand_of(const Array& a, const StridedLayout& layout) {
  ExprOperand op{};
  op.data = a.data();
  op.iwl = a.dtype() == DType::flex16 ? a.iwl() : 0;
  op.layout = layout;
  return op;
}

// The layout without axis `axis`.
StridedLayout drop_axis(const StridedLayout& l, int axis) {
  StridedLayout out{};
  for (int d = 0; d < l.rank; ++d) {
    if (d == axis) continue;
    out.shape[out.rank] = l.shape[d];
    out.strides[out.rank] = l.strides[d];
    ++out.rank;
  }
  return out;
}

StridedLayout contiguous_layout(const Shape& shape) {
  StridedLayout l{};
  l.rank = static_cast<std::int32_t>(shape.size());
  std::int64_t stride = 1;
  for (int d = l.rank - 1; d >= 0; --d) {
    l.shape[d] = shape[d];
    l.strides[d] = stride;
    stride *= shape[d];
  }
  return l;
}

void set_space(ExprArgs& args, const StridedLayout& l) {
  args.rank = l.rank;
  for (int d = 0; d < l.rank; ++d) args.shape[d] = l.shape[d];
  set_shape_dividers(args);
}

std::string stage_name(const ir::Stage& stage) {
  return cat("expression stage writing ", stage.target.describe());
}

void describe_elementwise(const ir::Stage& stage, ExprKernel& k) {
  const ir::Program& body = stage.body;
  if (stage.target.shape() != body.shape)
    throw ShapeError(cat(stage_name(stage), ": the target shape differs from the iteration shape ",
                         shape_str(body.shape)));
  const std::size_t n_ops = body.operands.size();
  std::vector<StridedLayout> layouts;
  layouts.reserve(n_ops + 1);
  layouts.push_back(ArrayAccess::layout(stage.target));
  for (const Array& a : body.operands) layouts.push_back(ArrayAccess::layout(a));
  portable::coalesce_layouts(layouts.data(), static_cast<int>(layouts.size()));
  const StridedLayout& tl = layouts[0];
  const int rank = tl.rank;
  const std::int64_t n = shape_numel(body.shape);

  k.target = operand_of(stage.target, tl);
  for (std::size_t i = 0; i < n_ops; ++i)
    k.operands.push_back(operand_of(body.operands[i], layouts[i + 1]));

  bool fits32 = n < kIndex32Limit;
  for (const StridedLayout& l : layouts) fits32 = fits32 && offset_extent(l) < kIndex32Limit;
  k.index64 = !fits32;

  bool contiguous = rank == 0 || tl.strides[0] == 1;
  for (std::size_t i = 0; contiguous && i < n_ops; ++i)
    contiguous = layouts[i + 1].rank == 0 || layouts[i + 1].strides[0] == 0 ||
                 layouts[i + 1].strides[0] == 1;
  contiguous = contiguous && rank <= 1;
  const int ept = k.elements_per_thread;
  k.kind = contiguous ? KernelKind::ew_contiguous : KernelKind::ew_strided;
  k.target_access = rank == 0 || tl.strides[rank - 1] == 1 ? Access::unit : Access::other;
  k.vector_extent = rank == 0 ? 1 : tl.shape[rank - 1];
  const int outer = std::max(0, rank - 1);
  bool ok = k.vector_extent % ept == 0 || contiguous;
  if (k.target_access == Access::unit)
    ok = ok && vector_aligned(k.target.data, k.target_dtype, ept, tl, outer);
  for (std::size_t i = 0; i < n_ops; ++i) {
    const StridedLayout& l = layouts[i + 1];
    Access a = all_zero_strides(l) ? Access::uniform : access_of_stride(l.strides[rank - 1]);
    k.access.push_back(a);
    if (a == Access::unit)
      ok = ok && vector_aligned(k.operands[i].data, k.operand_dtypes[i], ept, l, outer);
  }
  k.vector_ok = ok;
  k.args.n = n;
  k.args.vec = ok ? n / ept : 0;
  set_space(k.args, tl);
}

void describe_reduction(const ir::Stage& stage, ExprKernel& k) {
  const ir::Program& body = stage.body;
  const Shape& shape = body.shape;
  const Op op = *stage.reduce;
  if (op_info(op).kind != ir::OpKind::reduction)
    throw ValueError(cat(stage_name(stage), ": ", op_info(op).name, " is not a reduction"));
  const int r = static_cast<int>(shape.size());
  const bool all = stage.axis == ir::kAllAxes;
  if (!all && (stage.axis < 0 || stage.axis >= r))
    throw IndexError(cat(stage_name(stage), ": reduction axis ", stage.axis,
                         " is out of range for the iteration shape ", shape_str(shape)));
  Shape expected = shape;
  for (int d = 0; d < r; ++d)
    if (all || d == stage.axis) expected[d] = 1;
  if (stage.target.shape() != expected)
    throw ShapeError(cat(stage_name(stage), ": a reduction of ", shape_str(shape),
                         " must write the shape ", shape_str(expected)));
  if (shape_numel(shape) == 0)
    throw ShapeError(cat(stage_name(stage), ": cannot reduce the empty shape ", shape_str(shape)));
  k.reduce = op;
  k.reduce_all = all;
  const std::size_t n_ops = body.operands.size();
  const std::int64_t total = shape_numel(shape);
  bool fits32 = total < kIndex32Limit;

  if (all) {
    // A contiguous layout of the shape first: it never blocks a merge and carries the shape
    // when there are no operands. Coalescing keeps row-major order, so position k of the
    // coalesced space is the flat index argmax reports.
    std::vector<StridedLayout> layouts{contiguous_layout(shape)};
    for (const Array& a : body.operands) layouts.push_back(ArrayAccess::layout(a));
    portable::coalesce_layouts(layouts.data(), static_cast<int>(layouts.size()));
    const int rr = layouts[0].rank;
    k.kind = KernelKind::reduce_rows;
    k.red_general = rr > 1;
    k.target = operand_of(stage.target, StridedLayout{});
    k.args.n = 1;
    k.args.k = total;
    for (std::size_t i = 0; i < n_ops; ++i) {
      const StridedLayout& l = layouts[i + 1];
      fits32 = fits32 && offset_extent(l) < kIndex32Limit;
      if (k.red_general) {
        k.operands.push_back(operand_of(body.operands[i], l));
        k.access.push_back(all_zero_strides(l) ? Access::uniform : Access::other);
      } else {
        ExprOperand o = operand_of(body.operands[i], StridedLayout{});
        o.red_stride = rr == 1 ? l.strides[0] : 0;
        k.operands.push_back(o);
        k.access.push_back(o.red_stride == 0 ? Access::uniform : access_of_stride(o.red_stride));
      }
    }
    if (k.red_general) set_space(k.args, layouts[0]);
    bool ok = !k.red_general;
    for (std::size_t i = 0; ok && i < n_ops; ++i)
      if (k.access[i] == Access::unit)
        ok = vector_aligned(k.operands[i].data, k.operand_dtypes[i], k.elements_per_thread,
                            StridedLayout{}, 0);
    k.vector_ok = ok;
    k.vector_extent = total;
    k.index64 = !fits32;
    return;
  }

  // One axis: outputs span the other axes (coalesced together with the target's layout);
  // each operand walks the reduced axis with its own stride.
  const int axis = stage.axis;
  std::vector<StridedLayout> layouts{drop_axis(ArrayAccess::layout(stage.target), axis)};
  std::vector<std::int64_t> red_strides;
  for (const Array& a : body.operands) {
    StridedLayout l = ArrayAccess::layout(a);
    red_strides.push_back(l.strides[axis]);
    layouts.push_back(drop_axis(l, axis));
  }
  portable::coalesce_layouts(layouts.data(), static_cast<int>(layouts.size()));
  const StridedLayout& out = layouts[0];
  const int ro = out.rank;
  const std::int64_t rows = total / shape[axis];
  k.target = operand_of(stage.target, out);
  k.args.n = rows;
  k.args.k = shape[axis];
  set_space(k.args, out);
  fits32 = fits32 && offset_extent(out) < kIndex32Limit;

  bool any_red_other = false;
  std::vector<Access> red_access, out_access;
  for (std::size_t i = 0; i < n_ops; ++i) {
    const StridedLayout& l = layouts[i + 1];
    ExprOperand o = operand_of(body.operands[i], l);
    o.red_stride = red_strides[i];
    k.operands.push_back(o);
    fits32 =
        fits32 && offset_extent(l) + (shape[axis] - 1) * std::llabs(o.red_stride) < kIndex32Limit;
    const bool uniform = all_zero_strides(l) && o.red_stride == 0;
    red_access.push_back(uniform ? Access::uniform : access_of_stride(o.red_stride));
    out_access.push_back(uniform   ? Access::uniform
                         : ro == 0 ? Access::zero
                                   : access_of_stride(l.strides[ro - 1]));
    any_red_other = any_red_other || red_access.back() == Access::other;
  }
  k.index64 = !fits32;
  // Threads go where memory is contiguous: along the reduced axis when it is dense for the
  // operands (or there is a single output), else across outputs.
  const bool rows_kind = rows == 1 || ro == 0 || !any_red_other;
  if (rows_kind) {
    k.kind = KernelKind::reduce_rows;
    k.access = red_access;
    bool ok = true;
    for (std::size_t i = 0; ok && i < n_ops; ++i)
      if (k.access[i] == Access::unit)
        ok = vector_aligned(k.operands[i].data, k.operand_dtypes[i], k.elements_per_thread,
                            layouts[i + 1], ro);
    k.vector_ok = ok;
    k.vector_extent = shape[axis];
  } else {
    k.kind = KernelKind::reduce_columns;
    k.access = out_access;
    bool ok = out.shape[ro - 1] % kColumnVector == 0;
    for (std::size_t i = 0; ok && i < n_ops; ++i)
      if (k.access[i] == Access::unit)
        ok = vector_aligned(k.operands[i].data, k.operand_dtypes[i], kColumnVector, layouts[i + 1],
                            ro - 1, red_strides[i]);
    k.vector_ok = ok;
    k.vector_extent = rows;
  }
}

}  // namespace

// About 16-32 registers of raw operand data per thread whatever the operand count, so the
// 64-register bound is met without spilling; even four 4-byte elements of five operands keep
// 80 bytes per thread in flight, several times what HBM latency needs at 1024 threads per SM.
int elements_per_thread(std::size_t operand_count) {
  return operand_count <= 1 ? 16 : (operand_count <= 3 ? 8 : (operand_count <= 8 ? 4 : 2));
}

namespace {

// An elementwise thread holds its elements of every operand and of the target in registers;
// narrow dtypes (u8 spikes, bf16, flex16) leave room for more of them in the same 32 registers,
// which spreads a strided kernel's index arithmetic over more elements. All-f32 kernels keep
// the count-based choice.
int elementwise_elements_per_thread(const std::vector<DType>& operands, DType target) {
  std::size_t bytes = itemsize(target);
  for (const DType d : operands) bytes += itemsize(d);
  int ept = elements_per_thread(operands.size());
  while (ept < 16 && bytes * static_cast<std::size_t>(2 * ept) <= 128) ept *= 2;
  return ept;
}

}  // namespace

ExprKernel describe_stage(const ir::Stage& stage) {
  if (!stage.target.defined())
    throw ValueError("expression stage: the target is an empty array handle");
  ExprKernel k;
  const ir::Program& body = stage.body;
  if (std::string error = program_error(body); !error.empty())
    throw ValueError(cat(stage_name(stage), ": ", error));
  auto check_dtype = [&](const Array& a, const char* role) {
    if (a.dtype() == DType::f64)
      throw DTypeError(cat(stage_name(stage), ": the ", role, " ", a.describe(),
                           " is f64, which only the CPU backend supports; use f32 on CUDA"));
  };
  check_dtype(stage.target, "target");
  // Each vector sized once (this runs on every assignment).
  k.operand_dtypes.reserve(body.operands.size());
  k.access.reserve(body.operands.size());
  k.operands.reserve(body.operands.size());
  k.scalars.reserve(body.scalars.size());
  k.target_dtype = stage.target.dtype();
  if (stage.stochastic_seed && k.target_dtype == DType::flex16) {
    k.stochastic = true;
    k.args.seed = *stage.stochastic_seed;
  }
  for (const Array& a : body.operands) {
    check_dtype(a, "operand");
    if (a.shape() != body.shape)
      throw ShapeError(cat(stage_name(stage), ": operand ", a.describe(),
                           " is not broadcast to the iteration shape ", shape_str(body.shape)));
    k.operand_dtypes.push_back(a.dtype());
  }
  for (double v : body.scalars) k.scalars.push_back(static_cast<float>(v));
  k.elements_per_thread = stage.reduce
                              ? elements_per_thread(body.operands.size())
                              : elementwise_elements_per_thread(k.operand_dtypes, k.target_dtype);
  if (stage.reduce)
    describe_reduction(stage, k);
  else
    describe_elementwise(stage, k);
  const std::size_t parameter_bytes = sizeof(ExprOperand) * (body.operands.size() + 1) +
                                      sizeof(float) * body.scalars.size() + sizeof(ExprArgs) +
                                      2 * sizeof(void*);
  k.descriptors_in_memory = parameter_bytes > kMaxParameterBytes;
  k.key = expr_kernel_key(k, body);
  return k;
}

}  // namespace flexkit::codegen
