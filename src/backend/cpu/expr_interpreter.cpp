// The CPU backend of fused expressions: a chunked interpreter. Each instruction of a stage's
// program runs over a chunk of consecutive elements (ArrayFire's CPU JIT does the same), so the
// per-op dispatch cost is paid once per chunk, and the inner loops are plain float loops the
// compiler vectorises. Work is split over cores by element ranges (elementwise) or rows
// (reductions); results never depend on the thread count.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <vector>

#include "backend/cpu/thread_pool.hpp"
#include "backend/expr_backend.hpp"
#include "core/storage.hpp"
#include "core/text.hpp"
#include "flexkit/error.hpp"
#include "flexkit/portable/ew_ops.hpp"
#include "ir/op_eval.hpp"

namespace flexkit::backend::cpu {
namespace {

using ir::Op;
using portable::StridedLayout;

constexpr int kChunk = 512;
constexpr std::int64_t kMinElementsPerWorker = 1 << 15;

// One array as the interpreter reads or writes it: the layout of the iteration shape,
// coalesced on its own (row-major order of elements is unchanged by coalescing).
struct Access {
  char* base;
  StridedLayout layout;
  DType dtype;
  int iwl;
  bool stochastic = false;  // flex16 targets: seeded stochastic rounding
  std::uint64_t seed = 0;
};

Access access_of(const Array& a) {
  Access acc{static_cast<char*>(a.data()), ArrayAccess::layout(a), a.dtype(),
             a.dtype() == DType::flex16 ? a.iwl() : 0};
  portable::coalesce_layouts(&acc.layout, 1);
  return acc;
}

Access target_access_of(const ir::Stage& stage) {
  Access acc = access_of(stage.target);
  if (stage.stochastic_seed && acc.dtype == DType::flex16) {
    acc.stochastic = true;
    acc.seed = *stage.stochastic_seed;
  }
  return acc;
}

// Calls run(first, offset, length, stride) for the pieces of `count` consecutive iteration
// positions from `begin` that lie in one row of the innermost axis: chunk element `first` is at
// `offset`, and the next `length − 1` follow at `stride`. One coordinate update a row instead
// of one an element.
template <class Run>
void for_each_row(const StridedLayout& l, std::int64_t begin, int count, Run&& run) {
  if (l.rank == 0) {  // one element, read or written at every position
    run(0, std::int64_t{0}, count, std::int64_t{0});
    return;
  }
  const int last = l.rank - 1;
  std::int64_t coord[portable::kLayoutMaxRank];
  std::int64_t rem = begin, off = 0;
  for (int d = last; d >= 0; --d) {
    coord[d] = rem % l.shape[d];
    rem /= l.shape[d];
    off += coord[d] * l.strides[d];
  }
  for (int done = 0; done < count;) {
    const int length =
        static_cast<int>(std::min<std::int64_t>(count - done, l.shape[last] - coord[last]));
    run(done, off, length, l.strides[last]);
    done += length;
    if (done == count) break;
    // To the start of the next row.
    off -= coord[last] * l.strides[last];
    coord[last] = 0;
    for (int d = last - 1; d >= 0; --d) {
      off += l.strides[d];
      if (++coord[d] < l.shape[d]) break;
      off -= coord[d] * l.strides[d];
      coord[d] = 0;
    }
  }
}

template <class T, class Convert>
void load_typed(const Access& a, std::int64_t begin, int count, float* dst, Convert convert) {
  const T* p = reinterpret_cast<const T*>(a.base);
  if (a.layout.rank <= 1) {
    std::int64_t s = a.layout.rank == 0 ? 0 : a.layout.strides[0];
    const T* q = p + begin * s;
    if (s == 1) {
      for (int i = 0; i < count; ++i) dst[i] = convert(q[i]);
    } else {
      for (int i = 0; i < count; ++i) dst[i] = convert(q[i * s]);
    }
    return;
  }
  for_each_row(a.layout, begin, count,
               [&](int first, std::int64_t off, int length, std::int64_t stride) {
                 float* d = dst + first;
                 const T* q = p + off;
                 if (stride == 1) {
                   for (int i = 0; i < length; ++i) d[i] = convert(q[i]);
                 } else if (stride == 0) {
                   std::fill(d, d + length, convert(q[0]));
                 } else {
                   for (int i = 0; i < length; ++i) d[i] = convert(q[i * stride]);
                 }
               });
}

void load(const Access& a, std::int64_t begin, int count, float* dst) {
  using namespace portable;
  switch (a.dtype) {
    case DType::f32:
      return load_typed<float>(a, begin, count, dst, [](float v) { return v; });
    case DType::f64:
      return load_typed<double>(a, begin, count, dst, [](double v) { return load_f64(v); });
    case DType::bf16:
      return load_typed<std::uint16_t>(a, begin, count, dst,
                                       [](std::uint16_t v) { return load_bf16(v); });
    case DType::flex16: {
      const float scale = pow2f(a.iwl - 15);
      return load_typed<std::int16_t>(
          a, begin, count, dst, [scale](std::int16_t m) { return static_cast<float>(m) * scale; });
    }
    case DType::u8:
      return load_typed<std::uint8_t>(a, begin, count, dst,
                                      [](std::uint8_t v) { return load_u8(v); });
    case DType::i32:
      return load_typed<std::int32_t>(a, begin, count, dst,
                                      [](std::int32_t v) { return load_i32(v); });
  }
}

// convert(value, offset): offset is the element's position from the view's first element,
// which a stochastic rounding draws its random number from.
template <class T, class Convert>
void store_typed(const Access& a, std::int64_t begin, int count, const float* src,
                 Convert convert) {
  T* p = reinterpret_cast<T*>(a.base);
  if (a.layout.rank <= 1) {
    std::int64_t s = a.layout.rank == 0 ? 0 : a.layout.strides[0];
    T* q = p + begin * s;
    if (s == 1) {
      for (int i = 0; i < count; ++i) q[i] = convert(src[i], begin + i);
    } else {
      for (int i = 0; i < count; ++i) q[i * s] = convert(src[i], (begin + i) * s);
    }
    return;
  }
  for_each_row(a.layout, begin, count,
               [&](int first, std::int64_t off, int length, std::int64_t stride) {
                 const float* v = src + first;
                 for (int i = 0; i < length; ++i)
                   p[off + i * stride] = convert(v[i], off + i * stride);
               });
}

void store(const Access& a, std::int64_t begin, int count, const float* src, Flex16Stats& stats) {
  using namespace portable;
  switch (a.dtype) {
    case DType::f32:
      return store_typed<float>(a, begin, count, src, [](float v, std::int64_t) { return v; });
    case DType::f64:
      return store_typed<double>(a, begin, count, src,
                                 [](float v, std::int64_t) { return store_f64(v); });
    case DType::bf16:
      return store_typed<std::uint16_t>(a, begin, count, src,
                                        [](float v, std::int64_t) { return store_bf16(v); });
    case DType::u8:
      return store_typed<std::uint8_t>(a, begin, count, src,
                                       [](float v, std::int64_t) { return store_u8(v); });
    case DType::i32:
      return store_typed<std::int32_t>(a, begin, count, src,
                                       [](float v, std::int64_t) { return store_i32(v); });
    case DType::flex16: {
      const int iwl = a.iwl;
      auto count_code = [&stats](float v, Flex16Code c) {
        if (v != v) ++stats.nan_count;
        stats.saturated += c.saturated;
        stats.max_abs_m = std::max<std::int32_t>(stats.max_abs_m, std::abs(int{c.m}));
        return c.m;
      };
      if (a.stochastic) {
        const std::uint64_t seed = a.seed;
        return store_typed<std::int16_t>(
            a, begin, count, src, [iwl, seed, &count_code](float v, std::int64_t offset) {
              return count_code(v, flex16_encode_stochastic(static_cast<double>(v), iwl, seed,
                                                            static_cast<std::uint64_t>(offset)));
            });
      }
      return store_typed<std::int16_t>(a, begin, count, src,
                                       [iwl, &count_code](float v, std::int64_t) {
                                         return count_code(v, flex16_encode(v, iwl));
                                       });
    }
  }
}

// Evaluates one stage's program over chunks; owns the per-thread register file.
class ChunkEvaluator {
 public:
  explicit ChunkEvaluator(const ir::Program& program, const std::vector<Access>& operands)
      : program_(program),
        operands_(operands),
        regs_(program.code.size() * kChunk),
        values_(program.code.size()) {}

  // Values of the program at iteration positions [begin, begin + count).
  const float* run(std::int64_t begin, int count) {
    const std::size_t size = program_.code.size();
    for (std::size_t i = 0; i < size; ++i) {
      const ir::Instr& in = program_.code[i];
      float* __restrict r = &regs_[i * kChunk];
      values_[i] = r;
      const float* __restrict a = in.a >= 0 ? values_[in.a] : nullptr;
      const float* __restrict b = in.b >= 0 ? values_[in.b] : nullptr;
      const float* __restrict c = in.c >= 0 ? values_[in.c] : nullptr;
      switch (in.op) {
        case Op::operand: {
          const Access& acc = operands_[in.slot];
          // Contiguous f32 operands are read in place: no copy into the register file.
          if (acc.dtype == DType::f32 && acc.layout.rank == 1 && acc.layout.strides[0] == 1) {
            values_[i] = reinterpret_cast<const float*>(acc.base) + begin;
            break;
          }
          load(acc, begin, count, r);
          break;
        }
        case Op::scalar:
          std::fill(r, r + count, static_cast<float>(program_.scalars[in.slot]));
          break;
        default:
          if (ir::op_info(in.op).in_expressions && ir::with_op_math(in, [&](auto fn) {
                for (int j = 0; j < count; ++j) r[j] = fn(a, b, c, j);
              }))
            break;
          throw ValueError(detail::cat("cpu interpreter: ", ir::op_info(in.op).name,
                                       " cannot appear inside a program"));
      }
    }
    return values_[size - 1];
  }

 private:
  const ir::Program& program_;
  const std::vector<Access>& operands_;
  std::vector<float> regs_;
  std::vector<const float*> values_;  // where each instruction's chunk of values lives
};

void merge(Flex16Stats& into, const Flex16Stats& s) {
  into.max_abs_m = std::max(into.max_abs_m, s.max_abs_m);
  into.saturated += s.saturated;
  into.nan_count += s.nan_count;
}

// Running state of one reduction.
struct Accumulator {
  double sum = 0;
  float extreme = 0;
  std::int64_t index = -1;  // position of `extreme` (max/min/argmax/argmin)

  void add(Op op, float v, std::int64_t position) {
    switch (op) {
      case Op::sum:
      case Op::mean:
        sum += v;
        break;
      case Op::max:
        extreme = index < 0 ? v : portable::ew_maximum(extreme, v);
        index = 0;
        break;
      case Op::min:
        extreme = index < 0 ? v : portable::ew_minimum(extreme, v);
        index = 0;
        break;
      case Op::argmax:
      case Op::argmin: {
        // Ties keep the earlier index; the first NaN wins and stays (NumPy).
        bool better = index < 0 || (extreme == extreme &&
                                    (v != v || (op == Op::argmax ? v > extreme : v < extreme)));
        if (better) extreme = v, index = position;
        break;
      }
      default:
        break;
    }
  }
  // Folds in a later block's state (positions in `other` all follow ours).
  void merge(Op op, const Accumulator& other) {
    if (other.index < 0 && op != Op::sum && op != Op::mean) return;
    switch (op) {
      case Op::sum:
      case Op::mean:
        sum += other.sum;
        break;
      default:
        add(op, other.extreme, other.index);
    }
  }
  float result(Op op, std::int64_t count) const {
    switch (op) {
      case Op::sum:
        return static_cast<float>(sum);
      case Op::mean:
        return static_cast<float>(sum / static_cast<double>(count));
      case Op::max:
      case Op::min:
        return extreme;
      default:
        return static_cast<float>(index);
    }
  }
};

void run_elementwise(const ir::Stage& stage, const std::vector<Access>& operands) {
  Access target = target_access_of(stage);
  const std::int64_t n = shape_numel(stage.body.shape);
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<Flex16Stats> partial;
  std::mutex m;
  parallel_for(chunks, kMinElementsPerWorker / kChunk, [&](std::int64_t c0, std::int64_t c1) {
    ChunkEvaluator eval(stage.body, operands);
    Flex16Stats local{};
    for (std::int64_t c = c0; c < c1; ++c) {
      std::int64_t begin = c * kChunk;
      int count = static_cast<int>(std::min<std::int64_t>(kChunk, n - begin));
      const float* v = eval.run(begin, count);
      store(target, begin, count, v, local);
    }
    std::lock_guard<std::mutex> lock(m);
    partial.push_back(local);
  });
  if (stage.target.dtype() == DType::flex16) {
    Flex16Stats total{};
    for (const auto& s : partial) merge(total, s);
    ArrayAccess::storage(stage.target).set_stats(total);
  }
}

// Moves `axis` last in a layout of the iteration shape, so each output is one contiguous run
// of iteration positions.
StridedLayout axis_last(const StridedLayout& l, int axis) {
  StridedLayout out = l;
  int k = 0;
  for (int d = 0; d < l.rank; ++d) {
    if (d == axis) continue;
    out.shape[k] = l.shape[d];
    out.strides[k] = l.strides[d];
    ++k;
  }
  out.shape[k] = l.shape[axis];
  out.strides[k] = l.strides[axis];
  return out;
}

void run_reduction(const ir::Stage& stage, const std::vector<Array>& operand_arrays) {
  const Op op = *stage.reduce;
  const Shape& shape = stage.body.shape;
  const std::int64_t n = shape_numel(shape);
  const bool all = stage.axis == ir::kAllAxes;
  const std::int64_t row = all ? n : shape[stage.axis];
  const std::int64_t rows = all ? 1 : n / row;

  std::vector<Access> operands;
  for (const Array& a : operand_arrays) {
    Access acc{static_cast<char*>(a.data()), ArrayAccess::layout(a), a.dtype(),
               a.dtype() == DType::flex16 ? a.iwl() : 0};
    if (!all) acc.layout = axis_last(acc.layout, stage.axis);
    portable::coalesce_layouts(&acc.layout, 1);
    operands.push_back(acc);
  }
  // The target without the reduced axis: output o is iteration row o.
  Access target = target_access_of(stage);
  const bool integer_index =
      (op == Op::argmax || op == Op::argmin) && stage.target.dtype() == DType::i32;

  auto reduce_range = [&](ChunkEvaluator& eval, std::int64_t begin, std::int64_t end,
                          std::int64_t base, Accumulator& acc) {
    for (std::int64_t p = begin; p < end; p += kChunk) {
      int count = static_cast<int>(std::min<std::int64_t>(kChunk, end - p));
      const float* v = eval.run(p, count);
      for (int j = 0; j < count; ++j) acc.add(op, v[j], p + j - base);
    }
  };
  auto store_result = [&](std::int64_t o, const Accumulator& acc, Flex16Stats& stats) {
    if (integer_index) {
      std::int64_t off = 0;
      for_each_row(target.layout, o, 1, [&](int, std::int64_t at, int, std::int64_t) { off = at; });
      reinterpret_cast<std::int32_t*>(target.base)[off] = static_cast<std::int32_t>(acc.index);
      return;
    }
    float value = acc.result(op, row);
    store(target, o, 1, &value, stats);
  };

  Flex16Stats stats{};
  if (rows == 1) {
    // One output: fixed-size blocks reduced in parallel, folded in block order.
    constexpr std::int64_t kBlock = 1 << 16;
    const std::int64_t blocks = (n + kBlock - 1) / kBlock;
    std::vector<Accumulator> partial(static_cast<std::size_t>(blocks));
    parallel_for(blocks, 4, [&](std::int64_t b0, std::int64_t b1) {
      ChunkEvaluator eval(stage.body, operands);
      for (std::int64_t b = b0; b < b1; ++b)
        reduce_range(eval, b * kBlock, std::min(n, (b + 1) * kBlock), 0, partial[b]);
    });
    Accumulator total = partial[0];
    for (std::int64_t b = 1; b < blocks; ++b) total.merge(op, partial[b]);
    store_result(0, total, stats);
  } else {
    std::vector<Flex16Stats> partial_stats;
    std::mutex m;
    parallel_for(rows, std::max<std::int64_t>(1, kMinElementsPerWorker / row),
                 [&](std::int64_t r0, std::int64_t r1) {
                   ChunkEvaluator eval(stage.body, operands);
                   Flex16Stats local{};
                   for (std::int64_t r = r0; r < r1; ++r) {
                     Accumulator acc;
                     reduce_range(eval, r * row, (r + 1) * row, r * row, acc);
                     store_result(r, acc, local);
                   }
                   std::lock_guard<std::mutex> lock(m);
                   partial_stats.push_back(local);
                 });
    for (const auto& s : partial_stats) merge(stats, s);
  }
  if (stage.target.dtype() == DType::flex16) ArrayAccess::storage(stage.target).set_stats(stats);
}

}  // namespace

void run_stage(const ir::Stage& stage) {
  if (shape_numel(stage.target.shape()) == 0 || shape_numel(stage.body.shape) == 0) {
    if (stage.target.dtype() == DType::flex16) ArrayAccess::storage(stage.target).set_stats({});
    return;
  }
  if (stage.reduce) return run_reduction(stage, stage.body.operands);
  std::vector<Access> operands;
  for (const Array& a : stage.body.operands) operands.push_back(access_of(a));
  run_elementwise(stage, operands);
}

}  // namespace flexkit::backend::cpu
