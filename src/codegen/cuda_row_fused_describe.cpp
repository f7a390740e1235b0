#include "codegen/cuda_row_fused_source.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "core/storage.hpp"
#include "core/text.hpp"

namespace flexkit::codegen {

using ir::Op;

namespace {

constexpr std::int64_t kIndex32Limit = std::int64_t{1} << 31;

std::int64_t pow2_at_least(std::int64_t v) {
  std::int64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

bool same_view(const Array& a, const Array& b) {
  return a.shares_storage(b) && a.data() == b.data() && a.dtype() == b.dtype() &&
         a.shape() == b.shape() && a.strides() == b.strides();
}

StridedLayout without_axis(const StridedLayout& l, int axis) {
  StridedLayout out = l;
  for (int d = axis; d + 1 < l.rank; ++d) {
    out.shape[d] = l.shape[d + 1];
    out.strides[d] = l.strides[d + 1];
  }
  out.rank = l.rank - 1;
  return out;
}

std::int64_t extent(const StridedLayout& l) {
  std::int64_t e = 0;
  for (int d = 0; d < l.rank; ++d) e += (l.shape[d] - 1) * std::llabs(l.strides[d]);
  return e;
}

bool aligned(const void* data, DType dtype, const StridedLayout& row_space) {
  const auto size = static_cast<std::int64_t>(itemsize(dtype));
  const std::int64_t align = std::min<std::int64_t>(16, kRowFusedVector * size);
  if (reinterpret_cast<std::uintptr_t>(data) % static_cast<std::uintptr_t>(align) != 0)
    return false;
  for (int d = 0; d < row_space.rank; ++d)
    if ((row_space.strides[d] * size) % align != 0) return false;
  return true;
}

// Column strips read and write kRowFusedVector neighbouring columns (the row space's last axis)
// as one vector: that axis contiguous, every other stride and the column's own a whole vector.
bool strip_vectors(const void* data, DType dtype, const StridedLayout& l) {
  const int rank = l.rank;
  const auto size = static_cast<std::int64_t>(itemsize(dtype));
  const std::int64_t align = kRowFusedVector * size;
  if (align > 16 || l.strides[rank - 1] != 1 ||
      reinterpret_cast<std::uintptr_t>(data) % static_cast<std::uintptr_t>(align) != 0)
    return false;
  for (int d = 0; d <= rank; ++d)  // index rank: the reduced axis's stride
    if (d != rank - 1 && (l.strides[d] * size) % align != 0) return false;
  return true;
}

// Holds the columns as strips (RowFusedKernel::strips) where they qualify: clusters on the
// device, vectors for every column operand and the output, a column a cluster holds, and at
// least a block a multiprocessor.
bool describe_strips(RowFusedKernel& k, const std::vector<StridedLayout>& layouts,
                     const std::vector<Array>& arrays, std::size_t stages, const Array& out,
                     int max_cluster, int multiprocessors) {
  const int rank = layouts[0].rank;
  if (max_cluster < 2 || rank < 1 || layouts[0].shape[rank - 1] % kRowFusedVector != 0)
    return false;
  if (!strip_vectors(out.data(), out.dtype(), layouts[stages - 1])) return false;
  int units = 0;
  std::int64_t chunk_bytes = 0;  // a block's shared memory for one element of every column
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    if (k.operand_info[i].access != Access::unit) continue;
    if (!strip_vectors(arrays[i].data(), arrays[i].dtype(), layouts[stages + i])) return false;
    ++units;
    chunk_bytes +=
        static_cast<std::int64_t>(kStripThreads * kRowFusedVector * itemsize(arrays[i].dtype()));
  }
  if (units == 0 || units > kStripRegisters / kRowFusedVector) return false;
  const std::int64_t registers = kStripRegisters / kRowFusedVector / units;
  const std::int64_t held = registers + kStripSharedBytes / chunk_bytes;  // elements a column
  const std::int64_t positions = kStripThreads / kStripWidth;             // a block's rows a pass
  const std::int64_t len = k.args.k;
  const std::int64_t cluster = (len + positions * held - 1) / (positions * held);
  if (cluster > max_cluster) return false;
  const std::int64_t per_thread = (len + positions * cluster - 1) / (positions * cluster);
  const std::int64_t columns_per_block = kStripWidth * kRowFusedVector;
  if ((k.args.n + columns_per_block - 1) / columns_per_block * cluster < multiprocessors)
    return false;
  k.strips = true;
  k.per_thread = static_cast<int>(per_thread);
  k.strip_registers = static_cast<int>(std::min(registers, per_thread));
  k.shared_bytes = static_cast<int>((per_thread - k.strip_registers) * chunk_bytes);
  k.cluster = static_cast<int>(cluster);
  k.block_x = kStripWidth;
  k.block_threads = kStripThreads;
  return true;
}

std::string make_key(const RowFusedKernel& k, const ir::Plan& plan) {
  using std::to_string;
  std::string key = "rf1|" +
                    std::string(k.strips    ? "strip"
                                : k.columns ? "col"
                                            : "row") +
                    "|R" + to_string(k.strip_registers) + "|P" + to_string(k.per_thread) + "|C" +
                    to_string(k.cluster) + "|r" + to_string(k.args.rank) +
                    (k.index64 ? "|i64|o" : "|i32|o");
  for (const auto& o : k.operand_info) {
    key += dtype_name(o.dtype);
    key += ':';
    key += access_code(o.access);
    key += ':' + to_string(o.temp_of) + ',';
  }
  if (k.reuse)
    key += "|reuse" + to_string(k.reuse->stage) + ',' + to_string(k.reuse->instruction) + ',' +
           to_string(k.reuse->row_operand);
  for (std::size_t s = 0; s < k.stages.size(); ++s) {
    const RowFusedKernel::Stage& st = k.stages[s];
    key += '|';
    key += st.reduce ? op_info(*st.reduce).name : "ew";
    key += ':';
    key += dtype_name(st.target_dtype);
    key += ":m";
    for (int i : st.operands) key += to_string(i) + ',';
    key += ":s" + to_string(st.scalar_offset) + ":c";
    for (const ir::Instr& in : plan.stages[s].body.code) {
      key += op_info(in.op).name;
      key += '(' + to_string(in.a) + ',' + to_string(in.b) + ',' + to_string(in.c) + ',' +
             to_string(in.slot) + ')';
    }
  }
  return key;
}

// Whether instruction ia of stage sa's program and ib of stage sb's compute the same value: the
// same operations over the same fused operands, scalar values and constants.
bool same_value(const RowFusedKernel& k, const ir::Plan& plan, int sa, int ia, int sb, int ib) {
  const ir::Instr& a = plan.stages[sa].body.code[ia];
  const ir::Instr& b = plan.stages[sb].body.code[ib];
  if (a.op != b.op) return false;
  switch (a.op) {
    case Op::operand:
      return k.stages[sa].operands[a.slot] == k.stages[sb].operands[b.slot];
    case Op::scalar:
      return k.scalars[k.stages[sa].scalar_offset + a.slot] ==
             k.scalars[k.stages[sb].scalar_offset + b.slot];
    case Op::constant:
      return a.constant == b.constant;
    default:
      break;
  }
  if (a.op == Op::spike_grad && (a.surrogate != b.surrogate || a.alpha != b.alpha)) return false;
  for (auto arg : {&ir::Instr::a, &ir::Instr::b, &ir::Instr::c}) {
    if ((a.*arg < 0) != (b.*arg < 0)) return false;
    if (a.*arg >= 0 && !same_value(k, plan, sa, a.*arg, sb, b.*arg)) return false;
  }
  return true;
}

// The fused operands the last stage still reads when instruction `cut` is given to it.
std::vector<bool> read_with_cut(const RowFusedKernel& k, const ir::Plan& plan, int cut) {
  const int last = static_cast<int>(plan.stages.size()) - 1;
  const std::vector<ir::Instr>& code = plan.stages[last].body.code;
  std::vector<bool> live(code.size(), false), read(k.operand_info.size(), false);
  live.back() = true;
  for (int i = static_cast<int>(code.size()) - 1; i >= 0; --i) {
    if (!live[i] || i == cut) continue;
    const ir::Instr& in = code[i];
    if (in.op == Op::operand) read[k.stages[last].operands[in.slot]] = true;
    for (int arg : {in.a, in.b, in.c})
      if (arg >= 0) live[arg] = true;
  }
  return read;
}

// A reduction's element the last stage computes again, and a row operand's registers to keep it
// in (one no stage reads after that reduction): see RowFusedKernel::Reuse.
std::optional<RowFusedKernel::Reuse> find_reuse(const RowFusedKernel& k, const ir::Plan& plan) {
  const int last = static_cast<int>(plan.stages.size()) - 1;
  const std::vector<ir::Instr>& code = plan.stages[last].body.code;
  for (int s = last - 1; s >= 0; --s) {
    const int root = static_cast<int>(plan.stages[s].body.code.size()) - 1;
    if (!ir::is_elementwise(plan.stages[s].body.code[root].op)) continue;
    for (int i = static_cast<int>(code.size()) - 1; i >= 0; --i) {
      if (!same_value(k, plan, last, i, s, root)) continue;
      const std::vector<bool> read = read_with_cut(k, plan, i);
      for (int u = 0; u < static_cast<int>(k.operand_info.size()); ++u) {
        if (k.operand_info[u].access != Access::unit || read[u]) continue;
        bool later = false;  // a reduction after s reads the registers
        for (int t = s + 1; t < last; ++t)
          for (int o : k.stages[t].operands) later = later || o == u;
        if (!later) return RowFusedKernel::Reuse{s, i, u};
      }
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<RowFusedKernel> describe_row_fused(const ir::Plan& plan, int max_cluster,
                                                 int multiprocessors) {
  const auto& stages = plan.stages;
  if (stages.size() < 2) return std::nullopt;
  const ir::Stage& last = stages.back();
  if (last.reduce || !last.target.defined()) return std::nullopt;
  const Shape& shape = last.body.shape;
  const int rank = static_cast<int>(shape.size());
  const int axis = stages[0].axis;
  if (rank < 1 || axis < 0 || axis >= rank || shape[axis] < 2 || shape_numel(shape) == 0)
    return std::nullopt;
  const bool columns = axis != rank - 1;
  const std::int64_t len = shape[axis];
  const std::int64_t rows = shape_numel(shape) / len;
  const Array& out = last.target;
  // The output's last axis is contiguous: a row's threads, or a warp's lanes, write neighbours.
  if (out.shape() != shape || out.dtype() == DType::f64 || out.strides().back() != 1)
    return std::nullopt;
  if (out.dtype() == DType::flex16 && last.iwl_policy == IwlPolicy::exact) return std::nullopt;
  Shape reduced = shape;
  reduced[axis] = 1;
  for (std::size_t s = 0; s + 1 < stages.size(); ++s) {
    const ir::Stage& st = stages[s];
    if (!st.reduce || st.axis != axis || st.body.shape != shape || !st.target.defined() ||
        st.target.shape() != reduced ||
        (st.target.dtype() != DType::f32 && st.target.dtype() != DType::i32))
      return std::nullopt;
  }

  for (const ir::Stage& st : stages)
    if (!program_error(st.body).empty()) return std::nullopt;  // the stage path reports it

  RowFusedKernel k;
  std::vector<Array> arrays;
  int scalars = 0;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const ir::Stage& st = stages[s];
    RowFusedKernel::Stage part{st.reduce, st.target.dtype(), {}, scalars};
    for (const Array& a : st.body.operands) {
      if (a.dtype() == DType::f64 || a.shape() != shape) return std::nullopt;
      int temp = -1;
      for (std::size_t e = 0; e < stages.size(); ++e) {
        if (!a.shares_storage(stages[e].target) || e + 1 == stages.size()) continue;
        if (e >= s) return std::nullopt;  // read before it is written
        temp = static_cast<int>(e);
      }
      // Another block writes rows this one may read: only the very element written is safe.
      if (a.shares_storage(out) && !same_view(a, out)) return std::nullopt;
      int index = -1;
      for (std::size_t i = 0; i < arrays.size(); ++i)
        if (same_view(arrays[i], a)) index = static_cast<int>(i);
      if (index < 0) {
        const StridedLayout l = ArrayAccess::layout(a);
        const std::int64_t along = l.strides[axis];
        bool all_zero = true;
        for (int d = 0; d < rank; ++d) all_zero = all_zero && l.strides[d] == 0;
        Access access;
        if (temp >= 0 && along == 0)
          access = Access::zero;
        else if (temp >= 0)
          return std::nullopt;
        else if (along == 0)
          access = all_zero ? Access::uniform : Access::zero;
        else if (along == 1 || columns)  // a column's elements are read one at a time
          access = Access::unit;
        else
          return std::nullopt;
        index = static_cast<int>(arrays.size());
        arrays.push_back(a);
        k.operand_info.push_back({a.dtype(), access, temp});
      }
      part.operands.push_back(index);
    }
    for (double v : st.body.scalars) k.scalars.push_back(static_cast<float>(v));
    scalars += static_cast<int>(st.body.scalars.size());
    k.stages.push_back(part);
  }

  int row_operands = 0;
  for (const auto& o : k.operand_info) row_operands += o.access == Access::unit;
  if (row_operands > kRowFusedRegisters / kRowFusedVector) return std::nullopt;
  k.per_thread = row_operands <= 1
                     ? kRowFusedRegisters
                     : std::max(kRowFusedVector, kRowFusedRegisters / row_operands /
                                                     kRowFusedVector * kRowFusedVector);
  k.columns = columns;

  // The row space: every axis but the reduced one, coalesced over targets and operands
  // together. In columns, each layout also carries the reduced axis's stride at index `rank`.
  std::vector<StridedLayout> full;
  for (const ir::Stage& st : stages) full.push_back(ArrayAccess::layout(st.target));
  for (const Array& a : arrays) full.push_back(ArrayAccess::layout(a));
  std::vector<StridedLayout> layouts;
  for (const StridedLayout& l : full) layouts.push_back(without_axis(l, axis));
  portable::coalesce_layouts(layouts.data(), static_cast<int>(layouts.size()));
  std::vector<std::int64_t> along;  // each layout's stride along the reduced axis
  for (std::size_t i = 0; i < full.size(); ++i) {
    along.push_back(full[i].strides[axis]);
    if (columns) layouts[i].strides[layouts[i].rank] = full[i].strides[axis];
  }
  bool fits32 = rows * len < kIndex32Limit;
  for (std::size_t i = 0; i < full.size(); ++i)
    fits32 = fits32 && extent(layouts[i]) + len * std::llabs(along[i]) < kIndex32Limit;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    ExprOperand t{};
    t.data = stages[s].target.data();
    t.iwl = stages[s].target.dtype() == DType::flex16 ? stages[s].target.iwl() : 0;
    t.layout = layouts[s];
    k.targets.push_back(t);
  }
  bool vec = !columns && aligned(out.data(), out.dtype(), layouts[stages.size() - 1]);
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    const StridedLayout& l = layouts[stages.size() + i];
    ExprOperand o{};
    o.data = arrays[i].data();
    o.iwl = arrays[i].dtype() == DType::flex16 ? arrays[i].iwl() : 0;
    o.layout = l;
    k.operands.push_back(o);
    if (k.operand_info[i].access == Access::unit)
      vec = vec && aligned(o.data, arrays[i].dtype(), l);
  }
  k.index64 = !fits32;
  k.vector_ok = vec;
  k.args.n = rows;
  k.args.k = len;
  k.args.rank = layouts[0].rank;
  for (int d = 0; d < layouts[0].rank; ++d) k.args.shape[d] = layouts[0].shape[d];
  set_shape_dividers(k.args);

  const bool strips = columns && describe_strips(k, layouts, arrays, stages.size(), out,
                                                 max_cluster, multiprocessors);
  if (columns && !strips) {
    // The warps a column needs: blocks of 8 warps where the device has clusters (several blocks
    // a multiprocessor), wider blocks for columns 8 such blocks cannot hold; one block of up to
    // 32 warps without clusters.
    const std::int64_t warps = pow2_at_least((len + k.per_thread - 1) / k.per_thread);
    const std::int64_t cluster = std::clamp<std::int64_t>(warps / 8, 1, max_cluster);
    if (warps / cluster > kRowFusedMaxThreads / 32) return std::nullopt;
    k.cluster = static_cast<int>(cluster);
    k.block_x = 32;
    k.block_threads = static_cast<int>(warps / cluster * 32);
    // One block holds 32 columns: too few of them leave multiprocessors idle, where the
    // stage-by-stage kernels split each column's reduction over blocks.
    if ((rows + 31) / 32 * cluster < multiprocessors) return std::nullopt;
  } else if (!columns) {
    // A row longer than one block holds goes to a cluster of full blocks (one block a row
    // measured faster than a cluster of smaller ones for rows one block holds).
    const std::int64_t threads = pow2_at_least((len + k.per_thread - 1) / k.per_thread);
    const std::int64_t blocks = (threads + kRowFusedMaxThreads - 1) / kRowFusedMaxThreads;
    if (blocks > max_cluster) return std::nullopt;
    k.cluster = static_cast<int>(blocks);
    k.block_x = static_cast<int>(std::min<std::int64_t>(threads, kRowFusedMaxThreads));
    k.block_threads = threads <= 32 ? 256 : k.block_x;  // short rows share a block
  }

  const std::size_t parameter_bytes = sizeof(ExprOperand) * (arrays.size() + stages.size()) +
                                      sizeof(float) * k.scalars.size() + sizeof(ExprArgs) +
                                      sizeof(void*);
  if (parameter_bytes > kMaxParameterBytes) return std::nullopt;
  // Strips keep part of each column in shared memory as loaded: nothing is written back.
  if (!k.strips) k.reuse = find_reuse(k, plan);
  k.key = make_key(k, plan);
  return k;
}

RowFusedLaunch plan_row_fused_launch(const RowFusedKernel& k) {
  RowFusedLaunch l;
  l.args = k.args;
  // Rows: block_x threads a row, block_threads / block_x rows a block. Columns: 32 columns a
  // block, one a lane; strips: kStripWidth threads across, kRowFusedVector columns each.
  const std::int64_t rows_per_block = k.strips    ? kStripWidth * kRowFusedVector
                                      : k.columns ? 32
                                                  : k.block_threads / k.block_x;
  l.shape.block_x = static_cast<unsigned>(k.block_x);
  l.shape.block_y = static_cast<unsigned>(k.block_threads / k.block_x);
  l.shape.grid_x =
      static_cast<unsigned>((k.args.n + rows_per_block - 1) / rows_per_block * k.cluster);
  l.args.block_x = k.block_x;
  l.args.grid_x = l.shape.grid_x;
  l.args.vec = k.vector_ok ? 1 : 0;
  l.args.splits = 1;
  l.shared_bytes = static_cast<unsigned>(k.shared_bytes);
  return l;
}

}  // namespace flexkit::codegen
