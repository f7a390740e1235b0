// Code generation for fused expressions needs no GPU: every kernel kind, access class and dtype
// combination is generated from planned stages over host arrays and compiled by NVRTC for
// Hopper, and the structural cache key is checked to hold structure and nothing else.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/cuda/kernel_cache.hpp"
#include "codegen/cuda_expr_source.hpp"
#include "codegen/cuda_row_fused_source.hpp"
#include "flexkit/expr.hpp"
#include "flexkit/flexkit.hpp"
#include "ir/plan.hpp"

namespace flexkit {
namespace {

using codegen::Access;
using codegen::ExprKernel;
using codegen::KernelKind;

Array filled(const Shape& shape, DType dtype = DType::f32) {
  std::vector<float> v(static_cast<std::size_t>(shape_numel(shape)));
  const bool integral = dtype == DType::u8 || dtype == DType::i32;
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = integral ? static_cast<float>(i % 7) : static_cast<float>(i % 7) * 0.25f - 0.5f;
  return Array::from_floats(std::span<const float>(v), shape, dtype);
}

std::vector<ir::Stage> stages(const Array& out, const Expr& e) {
  return ir::make_plan(out, e.node(), {}).stages;
}

ExprKernel describe_last(const Array& out, const Expr& e) {
  return codegen::describe_stage(stages(out, e).back());
}

// Generates and compiles one stage; the kernel description for further checks.
ExprKernel compile(const ir::Stage& stage) {
  ExprKernel k = codegen::describe_stage(stage);
  const std::string source = codegen::generate_source(k, stage.body);
  EXPECT_NE(source.find(codegen::kMainKernel), std::string::npos);
  try {
    std::string cubin = backend::cuda::compile_kernel_program("codegen_test", source, "sm_90a");
    EXPECT_EQ(cubin.substr(0, 4), std::string("\x7f"
                                              "ELF"));
  } catch (const CompileError& e) {
    ADD_FAILURE() << k.key << "\n" << e.what() << "\n" << source;
  }
  return k;
}

ExprKernel compile_last(const Array& out, const Expr& e) {
  return compile(stages(out, e).back());
}

void compile_all(const Array& out, const Expr& e) {
  for (const ir::Stage& s : stages(out, e)) compile(s);
}

TEST(ExprCodegen, ContiguousElementwiseAllDtypes) {
  const Shape s{1000};
  Array a = filled(s), b = filled(s), c = filled(s), d = filled(s), e = filled(s);
  ExprKernel k = compile_last(Array::empty(s, DType::f32), sig(a * b + c) * d - e);
  EXPECT_EQ(k.kind, KernelKind::ew_contiguous);
  EXPECT_TRUE(k.vector_ok);
  EXPECT_EQ(k.args.vec, 1000 / k.elements_per_thread);

  Array hb = filled(s, DType::bf16), hf = filled(s, DType::flex16), u = filled(s, DType::u8);
  Array i = filled(s, DType::i32);
  for (DType out : {DType::f32, DType::bf16, DType::flex16, DType::u8, DType::i32})
    EXPECT_EQ(compile_last(Array::empty(s, out), hb * hf + c - u * i).kind,
              KernelKind::ew_contiguous);
}

TEST(ExprCodegen, KeyHoldsStructureNotValues) {
  Array a = filled({1000}), b = filled({1000});
  Array out = Array::empty({1000}, DType::f32);
  const std::string k25 = describe_last(out, a * b + 2.5).key;
  EXPECT_EQ(describe_last(out, a * b + 7.0).key, k25);
  Array a2 = filled({37}), b2 = filled({37});
  EXPECT_EQ(describe_last(Array::empty({37}, DType::f32), a2 * b2 + 1.0).key, k25);
  // A misaligned view is the same kernel: vector access is a run-time decision.
  Array big = filled({1001});
  ExprKernel shifted = describe_last(out, big.index("1:") * b + 2.5);
  EXPECT_EQ(shifted.key, k25);
  EXPECT_FALSE(shifted.vector_ok);
  EXPECT_EQ(shifted.args.vec, 0);
  // Structure changes the key: an op, a dtype, the output dtype.
  EXPECT_NE(describe_last(out, a * b - 2.5).key, k25);
  EXPECT_NE(describe_last(out, filled({1000}, DType::bf16) * b + 2.5).key, k25);
  EXPECT_NE(describe_last(Array::empty({1000}, DType::bf16), a * b + 2.5).key, k25);
  EXPECT_EQ(k25.find("1000"), std::string::npos) << k25;
}

TEST(ExprCodegen, StridedElementwiseAccessClasses) {
  Array A = filled({64, 48});
  // A row-wise broadcast column: stride 0 along the inner axis.
  ExprKernel k = compile_last(Array::empty({64, 48}, DType::f32), A - filled({64, 1}));
  EXPECT_EQ(k.kind, KernelKind::ew_strided);
  ASSERT_EQ(k.access.size(), 2u);
  EXPECT_EQ(k.access[0], Access::unit);
  EXPECT_EQ(k.access[1], Access::zero);
  EXPECT_TRUE(k.vector_ok);
  // A broadcast row: dense along the inner axis, stride 0 across rows.
  k = compile_last(Array::empty({64, 48}, DType::bf16), A * filled({48}, DType::flex16));
  EXPECT_EQ(k.access[1], Access::unit);
  // Transposed operand, transposed target, rank 3 permutation, size-1 broadcast scalar array.
  Array B = filled({48, 64});
  k = compile_last(Array::empty({64, 48}, DType::f32), A + B.T());
  EXPECT_EQ(k.access[1], Access::other);
  Array out = Array::empty({48, 64}, DType::f32);
  k = compile_last(out.T(), A * 2.0);
  EXPECT_EQ(k.target_access, Access::other);
  Array C = filled({4, 5, 6});
  k = compile_last(Array::empty({6, 4, 5}, DType::flex16), C.transpose({2, 0, 1}) + filled({1}));
  EXPECT_EQ(k.kind, KernelKind::ew_strided);
  EXPECT_EQ(k.access[1], Access::uniform);
  // Inner extent not a multiple of the vector: the scalar path only.
  k = compile_last(Array::empty({64, 5}, DType::f32), filled({64, 5}) - filled({64, 1}));
  EXPECT_FALSE(k.vector_ok);
  EXPECT_EQ(k.args.vec, 0);
}

TEST(ExprCodegen, EveryOpAndNoOperands) {
  Array a = filled({256}), b = filled({256}), c = filled({256});
  Array out = Array::empty({256}, DType::f32);
  Expr unary = sign(ceil(
      floor(reciprocal(tanh2(tanh(sig2(sig(log2(log(exp2(exp(sqrt(sqr(abs(neg(a))))))))))))))));
  Expr binary = pow(a, b) + eq(a, b) + ne(a, b) + lt(a, b) + le(a, b) + gt(a, b) + ge(a, b) +
                maximum(a, b) + minimum(a, b) / b - a * c;
  compile_last(out, unary + binary + where(a, b, c) + clip(a, -0.25, 0.25));
  ExprKernel k = compile_last(out, Expr(2.5));
  EXPECT_TRUE(k.operand_dtypes.empty());
  compile_last(Array::empty({}, DType::f32), Expr(1.0) + 2.0);
}

TEST(ExprCodegen, ManyOperandsGoThroughDeviceMemory) {
  std::vector<Array> keep;
  Expr e = filled({96});
  for (int i = 0; i < 29; ++i) {
    keep.push_back(filled({96}));
    e = e + keep.back() * static_cast<double>(i);
  }
  ExprKernel k = compile_last(Array::empty({96}, DType::f32), e);
  EXPECT_TRUE(k.descriptors_in_memory);
  EXPECT_EQ(k.elements_per_thread, 2);
  ExprKernel few = describe_last(Array::empty({96}, DType::f32), keep[0] + keep[1]);
  EXPECT_FALSE(few.descriptors_in_memory);
}

TEST(ExprCodegen, ReductionsEveryOpAndKind) {
  Array A = filled({64, 48});
  for (auto reduce : {+[](const Expr&x, int axis) { return sum(x, axis); },
                      +[](const Expr&x, int axis) { return max(x, axis); },
                      +[](const Expr&x, int axis) { return min(x, axis); },
                      +[](const Expr&x, int axis) { return mean(x, axis); },
                      +[](const Expr&x, int axis) { return argmax(x, axis); },
                      +[](const Expr&x, int axis) { return argmin(x, axis); }}) {
    ExprKernel rows = compile_last(Array::empty({64, 1}, DType::f32), reduce(A * 2.0, 1));
    EXPECT_EQ(rows.kind, KernelKind::reduce_rows);
    EXPECT_TRUE(rows.vector_ok);
    ExprKernel cols = compile_last(Array::empty({1, 48}, DType::f32), reduce(A, 0));
    EXPECT_EQ(cols.kind, KernelKind::reduce_columns);
    EXPECT_TRUE(cols.vector_ok);
    ExprKernel all = compile_last(Array::empty({1, 1}, DType::f32), reduce(A + 1.0, ir::kAllAxes));
    EXPECT_EQ(all.kind, KernelKind::reduce_rows);
    EXPECT_FALSE(all.red_general);
    ExprKernel general =
        compile_last(Array::empty({1, 1}, DType::f32), reduce(A.T(), ir::kAllAxes));
    EXPECT_TRUE(general.red_general);
  }
  // Index and value stores into every dtype.
  for (DType out : {DType::i32, DType::f32, DType::bf16, DType::flex16, DType::u8}) {
    compile_last(Array::empty({64, 1}, out), argmax(A, 1));
    compile_last(Array::empty({1, 48}, out), sum(A, 0));
  }
  // Mixed-dtype operands of a column reduction, one broadcast along the outputs.
  compile_last(Array::empty({1, 48}, DType::f32),
               max(filled({64, 48}, DType::bf16) * filled({64, 1}, DType::u8), 0));
  // A middle axis of rank 3, with the reduced axis strided for the operand.
  compile_last(Array::empty({4, 1, 6}, DType::f32), mean(filled({4, 5, 6}), 1));
  compile_last(Array::empty({6, 1, 4}, DType::f32), sum(filled({4, 5, 6}).transpose({2, 1, 0}), 1));
}

TEST(ExprCodegen, SoftmaxPlanCompiles) {
  Array s = filled({32, 80});
  Array p = Array::empty({32, 80}, DType::f32);
  compile_all(p, exp(s - max(s, 1)) / sum(exp(s - max(s, 1)), 1));
}

// Compiles the row-fused kernel of `out = e`; false when the plan does not fuse. `cluster`: the
// blocks a row is split over must be this many.
bool compile_fused(const Array& out, const Expr& e, int max_cluster = 1, int cluster = 1) {
  ir::Plan plan = ir::make_plan(out, e.node(), {});
  auto k = codegen::describe_row_fused(plan, max_cluster);
  if (!k) return false;
  EXPECT_EQ(k->cluster, cluster) << k->key;
  const std::string source = codegen::generate_row_fused_source(*k, plan);
  try {
    backend::cuda::compile_kernel_program("row_fused_test", source, "sm_90a");
  } catch (const CompileError& error) {
    ADD_FAILURE() << k->key << "\n" << error.what() << "\n" << source;
  }
  return true;
}

TEST(ExprCodegen, RowFusedPlansCompile) {
  Array s = filled({32, 80});
  Array p = Array::empty({32, 80}, DType::f32);
  EXPECT_TRUE(compile_fused(p, exp(s - max(s, 1)) / sum(exp(s - max(s, 1)), 1)));
  EXPECT_TRUE(compile_fused(p, s - max(s, 1)));
  EXPECT_TRUE(compile_fused(Array::empty({32, 80}, DType::bf16),
                            (s - mean(s, 1)) / sqrt(mean(sqr(s - mean(s, 1)), 1) + 1e-5)));
  EXPECT_TRUE(compile_fused(p, where(eq(argmax(s, 1), 3.0), s, 0.0) + argmin(s, 1)));
  EXPECT_TRUE(compile_fused(Array::empty({32, 80}, DType::flex16), s - min(s, 1)));
  EXPECT_TRUE(compile_fused(p, s * filled({32, 80}, DType::bf16) - max(s, 1)));
  Array cube = filled({2, 3, 100});
  EXPECT_TRUE(compile_fused(Array::empty({3, 2, 100}, DType::f32),
                            cube.transpose({1, 0, 2}) - sum(cube.transpose({1, 0, 2}), 2)));
  // Not this form: a single stage, a row longer than the registers hold, an operand strided
  // along the row, an output aliasing a row another block reads.
  EXPECT_FALSE(compile_fused(p, s * 2.0));
  Array wide = filled({2, 40000});
  EXPECT_FALSE(compile_fused(Array::empty({2, 40000}, DType::f32), wide - max(wide, 1)));
  Array t = filled({80, 32});
  EXPECT_FALSE(compile_fused(p, t.T() - max(t.T(), 1)));
  Array sq = filled({64, 64});
  EXPECT_FALSE(compile_fused(sq, sq - max(sq.T(), 1)));
  EXPECT_TRUE(compile_fused(sq, sq - max(sq, 1)));  // in place: each block owns its row
}

TEST(ExprCodegen, RowFusedLongRowsSplitOverClusters) {
  // A row longer than one block of 1024 threads holds (32768 single-operand elements) is split
  // over a cluster of such blocks where the device has clusters, and the blocks meet in
  // distributed shared memory; without clusters it does not fuse.
  Array s = filled({4, 65536});
  Array p = Array::empty({4, 65536}, DType::f32);
  const Expr softmax = exp(s - max(s, 1)) / sum(exp(s - max(s, 1)), 1);
  EXPECT_TRUE(compile_fused(p, softmax, 8, 2));
  EXPECT_FALSE(compile_fused(p, softmax, 1));
  // Odd lengths (1563 threads → 2 blocks; 3125 → 4), argmax's (value, index) partials and a
  // flex16 output with its statistics.
  Array odd = filled({3, 50001});
  Array odd_out = Array::empty({3, 50001}, DType::f32);
  EXPECT_TRUE(compile_fused(odd_out, odd - max(odd, 1), 8, 2));
  EXPECT_TRUE(
      compile_fused(odd_out, where(eq(argmax(odd, 1), 3.0), odd, 0.0) - mean(odd, 1), 8, 2));
  EXPECT_TRUE(compile_fused(Array::empty({3, 50001}, DType::flex16), odd - min(odd, 1), 8, 2));
  Array longer = filled({2, 100000});
  EXPECT_TRUE(compile_fused(Array::empty({2, 100000}, DType::f32), longer - sum(longer, 1), 8, 4));
  // Beyond a portable cluster's reach (8 blocks of 1024 threads, 32 elements each).
  Array huge = filled({1, 300000});
  EXPECT_FALSE(compile_fused(Array::empty({1, 300000}, DType::f32), huge - max(huge, 1), 8));
  // Rows one block holds keep their one block.
  Array one = filled({4, 32768});
  EXPECT_TRUE(compile_fused(Array::empty({4, 32768}, DType::f32), one - max(one, 1), 8, 1));
  Array small = filled({32, 80});
  EXPECT_TRUE(compile_fused(Array::empty({32, 80}, DType::f32), small - max(small, 1), 8, 1));
}

TEST(ExprCodegen, IndexDividerMatchesDivision) {
  // Generated kernels unravel 32-bit indices (below 2^31) with a multiply-high and a shift:
  // every divisor up to 4096, then powers of two and their neighbours up to 2^31, each against
  // the dividends where the quotient steps, the extremes and pseudo-random ones.
  std::vector<std::int64_t> divisors;
  for (std::int64_t d = 1; d <= 4096; ++d) divisors.push_back(d);
  for (int b = 12; b <= 31; ++b)
    for (std::int64_t delta : {-3, -1, 0, 1, 7})
      if ((std::int64_t{1} << b) + delta <= (std::int64_t{1} << 31))
        divisors.push_back((std::int64_t{1} << b) + delta);
  divisors.push_back(100352);  // csnn's 128·28·28 and such
  divisors.push_back(2147483647);
  std::uint64_t state = 12345;
  const std::uint32_t top = 0x7fffffffu;
  for (const std::int64_t d : divisors) {
    const portable::IndexDivider divider = portable::make_index_divider(d);
    std::vector<std::uint32_t> xs = {0, 1, top, top - 1};
    for (std::uint64_t q :
         {std::uint64_t{1}, std::uint64_t{2}, std::uint64_t{top} / d, std::uint64_t{top} / d / 2})
      for (std::int64_t off : {-1, 0, 1})
        if (q * d + off <= top) xs.push_back(static_cast<std::uint32_t>(q * d + off));
    for (int r = 0; r < 64; ++r) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      xs.push_back(static_cast<std::uint32_t>(state >> 33));  // below 2^31
    }
    for (const std::uint32_t x : xs)
      ASSERT_EQ(portable::divide_index(x, divider), x / static_cast<std::uint64_t>(d))
          << x << " / " << d;
  }
}

// The fused kernel of `out = e` as a device of `multiprocessors` with clusters of 8 describes it.
std::optional<codegen::RowFusedKernel> fused(const Array& out, const Expr& e,
                                             int multiprocessors = 0) {
  return codegen::describe_row_fused(ir::make_plan(out, e.node(), {}), 8, multiprocessors);
}

TEST(ExprCodegen, ColumnStripsPlansCompile) {
  // Columns whose operands and output are read and written as vectors of 4 neighbouring columns
  // are held as strips: 64 columns a block of 512 threads, 16 elements a column a thread in
  // registers, the rest in shared memory.
  Array s = filled({4096, 2048});
  Array p = Array::empty({4096, 2048}, DType::f32);
  EXPECT_TRUE(compile_fused(p, s - max(s, 0), 8, 8));
  auto k = fused(p, s - max(s, 0));
  ASSERT_TRUE(k && k->strips);
  // 4096 elements over 8 blocks of 32 row positions: 16 a thread, 4 in registers, 12 × 512
  // threads × 16 bytes in shared memory.
  EXPECT_EQ(k->per_thread, 16);
  EXPECT_EQ(k->strip_registers, 4);
  EXPECT_EQ(k->shared_bytes, 12 * 512 * 16);
  EXPECT_EQ(k->block_threads, codegen::kStripThreads);
  // A column in registers alone, ragged columns and rows, two reductions (double and
  // (value, index) partials), mixed operand dtypes, a middle axis, a flex16 output.
  Array tall = filled({60, 4100});
  k = fused(Array::empty({60, 4100}, DType::f32), tall - max(tall, 0));
  ASSERT_TRUE(k && k->strips);
  EXPECT_EQ(k->per_thread, 2);
  EXPECT_EQ(k->shared_bytes, 0);
  EXPECT_TRUE(compile_fused(Array::empty({60, 4100}, DType::f32), tall - max(tall, 0), 8, 1));
  Array ragged = filled({3000, 4100});
  Array ragged_out = Array::empty({3000, 4100}, DType::f32);
  EXPECT_TRUE(compile_fused(ragged_out, ragged - max(ragged, 0), 8, 6));
  EXPECT_TRUE(compile_fused(
      ragged_out, exp(ragged - max(ragged, 0)) / sum(exp(ragged - max(ragged, 0)), 0), 8, 6));
  EXPECT_TRUE(compile_fused(ragged_out, ragged * argmin(ragged, 0) - mean(ragged, 0), 8, 6));
  Array half = filled({2048, 2048}, DType::bf16);
  k = fused(p.index(":2048"), s.index(":2048") * half - max(s.index(":2048") * half, 0));
  ASSERT_TRUE(k && k->strips);
  // Two operands, 16 + 8 bytes a chunk: 2 chunks in registers, at most 8 in shared memory.
  EXPECT_EQ(k->strip_registers, 2);
  EXPECT_EQ(k->cluster, 7);
  EXPECT_TRUE(compile_fused(p.index(":2048"),
                            s.index(":2048") * half - max(s.index(":2048") * half, 0), 8, 7));
  Array cube = filled({3, 600, 2048});
  EXPECT_TRUE(compile_fused(Array::empty({3, 600, 2048}, DType::f32), cube - sum(cube, 1), 8, 2));
  Array flat = filled({1024, 2112});
  EXPECT_TRUE(compile_fused(Array::empty({1024, 2112}, DType::flex16), flat - min(flat, 0), 8, 2));
  // Operand kinds beside the held columns: u8 and flex16 columns (4- and 8-byte copies), a row
  // broadcast down the columns (a value a column), a single value, three column operands (one
  // chunk each in registers).
  Array x = filled({2048, 2048});
  Array bytes = filled({2048, 2048}, DType::u8);
  Array flex = filled({2048, 2048}, DType::flex16);
  Array across = filled({1, 2048});
  Array single = filled({1, 1});
  Array out = Array::empty({2048, 2048}, DType::f32);
  EXPECT_TRUE(compile_fused(out, x * bytes - max(x * bytes, 0), 8, 6));
  // flex16: 8 bytes a chunk, 4 in registers and 24 in shared memory: 2048 over 3 blocks.
  EXPECT_TRUE(compile_fused(out, flex - max(flex, 0) * across + single, 8, 3));
  // Three operands, 7 bytes an element: 1 chunk in registers and 6 in shared memory.
  Array x3 = x.index(":1024"), bytes3 = bytes.index(":1024"), flex3 = flex.index(":1024");
  Array out3 = out.index(":1024");
  k = fused(out3, x3 * bytes3 * flex3 - mean(x3 * bytes3 * flex3, 0));
  ASSERT_TRUE(k && k->strips);
  EXPECT_EQ(k->strip_registers, 1);
  EXPECT_EQ(k->per_thread, 7);
  EXPECT_TRUE(compile_fused(out3, x3 * bytes3 * flex3 - mean(x3 * bytes3 * flex3, 0), 8, 5));
  EXPECT_TRUE(compile_fused(Array::empty({2048, 2048}, DType::bf16),
                            where(eq(argmax(x, 0), 7.0), x, across) - sum(x, 0), 8, 4));
  // Not strips: no clusters, a width not a multiple of 4, an output or operand that is not a
  // vector of neighbouring columns, fewer blocks than multiprocessors.
  EXPECT_FALSE(codegen::describe_row_fused(ir::make_plan(p, (s - max(s, 0)).node(), {}), 1));
  Array odd = filled({4096, 2050});
  k = fused(Array::empty({4096, 2050}, DType::f32), odd - max(odd, 0));
  ASSERT_TRUE(k);
  EXPECT_FALSE(k->strips);
  Array square = filled({2048, 2048});
  k = fused(Array::empty({2048, 2048}, DType::f32), square.T() - max(square.T(), 0));
  ASSERT_TRUE(k);
  EXPECT_FALSE(k->strips);
  k = fused(Array::empty({2048, 2048}, DType::f32).T(), square - max(square, 0));
  EXPECT_FALSE(k && k->strips);
  Array wide = filled({4096, 4096});
  k = fused(Array::empty({4096, 4096}, DType::f32), wide - max(wide, 0), 132);
  ASSERT_TRUE(k);
  EXPECT_TRUE(k->strips);  // 64 strips × 8 blocks
  Array narrow = filled({4096, 1024});
  k = fused(Array::empty({4096, 1024}, DType::f32), narrow - max(narrow, 0), 132);
  ASSERT_TRUE(k);
  EXPECT_FALSE(k->strips);  // 16 strips × 8 blocks: a lane a column instead
}

TEST(ExprCodegen, ColumnFusedPlansCompile) {
  // A reduction along another axis than the last, where the columns are not strips (width not a
  // multiple of 4): a warp's lanes hold neighbouring columns.
  Array s = filled({4096, 642});
  Array p = Array::empty({4096, 642}, DType::f32);
  // 4096 / 32 = 128 warps a column: 8 blocks of 16 warps.
  EXPECT_TRUE(compile_fused(p, s - max(s, 0), 8, 8));
  // Without clusters a column is one block of at most 32 warps (1024 elements a warp's lane).
  EXPECT_FALSE(compile_fused(p, s - max(s, 0), 1));
  Array tall = filled({1000, 95});
  Array tall_out = Array::empty({1000, 95}, DType::f32);
  EXPECT_TRUE(compile_fused(tall_out, tall - max(tall, 0), 1, 1));
  EXPECT_TRUE(
      compile_fused(tall_out, exp(tall - max(tall, 0)) / sum(exp(tall - max(tall, 0)), 0), 8, 4));
  EXPECT_TRUE(compile_fused(
      Array::empty({1000, 95}, DType::bf16),
      (tall - mean(tall, 0)) / sqrt(mean(sqr(tall - mean(tall, 0)), 0) + 1e-5), 8, 4));
  EXPECT_TRUE(compile_fused(tall_out, tall * argmin(tall, 0) - min(tall, 0), 8, 4));
  EXPECT_TRUE(compile_fused(Array::empty({1000, 95}, DType::flex16), tall - min(tall, 0), 8, 4));
  // A middle axis of rank 3, and an operand read through a transposed view.
  Array cube = filled({3, 300, 41});
  EXPECT_TRUE(compile_fused(Array::empty({3, 300, 41}, DType::f32), cube - sum(cube, 1), 8, 2));
  Array sq = filled({64, 64});
  EXPECT_TRUE(compile_fused(Array::empty({64, 64}, DType::f32), sq.T() - max(sq.T(), 0), 8, 1));
  // Too few columns to fill the device's multiprocessors: the stage-by-stage kernels instead.
  ir::Plan few = ir::make_plan(tall_out, (tall - max(tall, 0)).node(), {});
  EXPECT_FALSE(codegen::describe_row_fused(few, 8, 132));
  EXPECT_TRUE(codegen::describe_row_fused(few, 8, 12));
  // A column longer than a cluster holds.
  Array very_tall = filled({9000, 40});
  EXPECT_FALSE(
      compile_fused(Array::empty({9000, 40}, DType::f32), very_tall - max(very_tall, 0), 8));
}

TEST(ExprCodegen, RowFusedSoftmaxComputesItsExponentialsOnce) {
  // exp(x − max) feeds the sum and the output: the sum's stage keeps it in the registers that
  // held x (read by nothing after), and the output divides it without a second exp.
  Array s = filled({32, 80});
  Array p = Array::empty({32, 80}, DType::f32);
  const auto fused = [](const Array& out, const Expr& e) {
    ir::Plan plan = ir::make_plan(out, e.node(), {});
    return codegen::describe_row_fused(plan);
  };
  const auto softmax = fused(p, exp(s - max(s, 1)) / sum(exp(s - max(s, 1)), 1));
  ASSERT_TRUE(softmax && softmax->reuse);
  EXPECT_EQ(softmax->reuse->stage, 1);
  EXPECT_TRUE(compile_fused(p, exp(s - max(s, 1)) / sum(exp(s - max(s, 1)), 1)));
  // x read by the output besides: no registers to keep the element in.
  const auto plus_x = fused(p, exp(s - max(s, 1)) / sum(exp(s - max(s, 1)), 1) + s);
  ASSERT_TRUE(plus_x);
  EXPECT_FALSE(plus_x->reuse);
  // A second row operand the output no longer reads takes it.
  Array w = filled({32, 80}, DType::bf16);
  const auto two = fused(p, exp(s * w - max(s * w, 1)) / sum(exp(s * w - max(s * w, 1)), 1));
  ASSERT_TRUE(two && two->reuse);
  EXPECT_TRUE(compile_fused(p, exp(s * w - max(s * w, 1)) / sum(exp(s * w - max(s * w, 1)), 1)));
  // Another shift in the output than in the sum: a different value, nothing reused.
  const auto shifted = fused(p, exp(s - max(s, 1) + 1.0) / sum(exp(s - max(s, 1)), 1));
  ASSERT_TRUE(shifted);
  EXPECT_FALSE(shifted->reuse);
  EXPECT_NE(shifted->key, softmax->key);
}

TEST(ExprCodegen, SixtyFourBitIndexing) {
  // 2^32 positions from one element: a broadcast needs no memory.
  Array x = filled({1});
  Array big = x.broadcast_to({std::int64_t{1} << 32});
  ExprKernel k = compile_last(Array::empty({1}, DType::f32), sum(big * 2.0));
  EXPECT_TRUE(k.index64);
  ExprKernel small =
      describe_last(Array::empty({1}, DType::f32), sum(x.broadcast_to({1024}) * 2.0));
  EXPECT_FALSE(small.index64);
  EXPECT_NE(k.key, small.key);
}

TEST(ExprCodegen, F64IsRefused) {
  Array a = Array::zeros({8}, DType::f64);
  EXPECT_THROW(describe_last(Array::empty({8}, DType::f32), a + 1.0), DTypeError);
}

TEST(ExprCodegen, LaunchFillsTheDeviceAndSplitsShortGrids) {
  const int sms = 132;
  // Row sum of 8192 x 16384: a block per row, no split.
  Array row = filled({4, 16384});
  ExprKernel k = describe_last(Array::empty({4, 1}, DType::f32), sum(row, 1));
  k.args.n = 8192;
  codegen::ExprLaunch l = codegen::plan_launch(k, sms);
  EXPECT_EQ(l.args.splits, 1);
  EXPECT_EQ(l.main.block_x * l.main.block_y, 256u);
  EXPECT_EQ(std::uint64_t{l.main.grid_x} * l.main.grid_y, 8192u);
  // Four long rows: split to fill the device, each split a multiple of the vector.
  k.args.n = 4;
  k.args.k = std::int64_t{1} << 22;
  l = codegen::plan_launch(k, sms);
  EXPECT_GT(l.args.splits, 32);
  EXPECT_EQ(l.args.seg % k.elements_per_thread, 0);
  EXPECT_GE(l.args.seg * l.args.splits, k.args.k);
  EXPECT_LT(l.args.seg * (l.args.splits - 1), k.args.k);
  EXPECT_EQ(l.partials, 4 * l.args.splits);
  // Column max of 8192 x 16384: 16384 outputs are too few threads, so the axis is split.
  Array col = filled({8, 64});
  k = describe_last(Array::empty({1, 64}, DType::f32), max(col, 0));
  ASSERT_EQ(k.kind, KernelKind::reduce_columns);
  k.args.n = 16384;
  k.args.k = 8192;
  l = codegen::plan_launch(k, sms);
  EXPECT_GT(l.args.splits, 1);
  const std::uint64_t blocks = std::uint64_t{l.main.grid_x} * l.main.grid_y;
  EXPECT_GE(blocks, 132u * 3);  // at least 3/4 of one wave of 4 blocks per SM...
  EXPECT_LE(blocks, 132u * 4);  // ...and no second wave
  // All of 2^27 elements into one: one wave of 512-thread blocks, then the combine.
  Array flat = filled({4096});
  k = describe_last(Array::empty({1}, DType::f32), sum(flat));
  k.args.k = std::int64_t{1} << 27;
  l = codegen::plan_launch(k, sms);
  EXPECT_EQ(l.args.splits, 264);
  EXPECT_EQ(l.main.block_x, 512u);
  EXPECT_EQ(l.partials, 264);
  // Elementwise: at most one full wave of resident threads, grid-stride beyond.
  Array a = filled({1024});
  k = describe_last(Array::empty({1024}, DType::f32), a * 2.0);
  k.args.n = std::int64_t{1} << 27;
  k.args.vec = k.args.n / k.elements_per_thread;
  l = codegen::plan_launch(k, sms);
  EXPECT_EQ(l.main.grid_x, 132u * 4);
}

}  // namespace
}  // namespace flexkit
