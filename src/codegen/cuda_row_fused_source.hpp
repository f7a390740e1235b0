// Fusing a whole plan into one kernel when its stages are reductions along one axis feeding an
// elementwise stage over the same shape (softmax, x - max(x, 1), x - max(x, 0), normalisations):
// the threads of a row (or column) hold it in registers, run every stage over it and write the
// result, so it is read from memory once instead of once per stage.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "codegen/cuda_expr_source.hpp"
#include "ir/plan.hpp"

namespace flexkit::codegen {

inline constexpr const char* kRowFusedKernel = "flexkit_row_fused";
// Row elements one thread holds, over all row operands together (registers budget).
inline constexpr int kRowFusedRegisters = 32;
// Elements of a row one vector access reads.
inline constexpr int kRowFusedVector = 4;
// Threads of a row at most in one block.
inline constexpr int kRowFusedMaxThreads = 1024;
// Where the device groups blocks into clusters (sm_90 and later), a row longer than one block
// holds is split over a cluster of such blocks, which exchange their partial reductions in
// distributed shared memory; a column, over a cluster of blocks of 8 warps or more. Blocks of a
// cluster at most (the portable cluster size).
inline constexpr int kRowFusedMaxCluster = 8;
// Column strips (sm_90): where every column operand and the output are read and written as
// vectors of kRowFusedVector neighbouring columns, a block of kStripThreads threads holds
// kStripWidth * kRowFusedVector columns, kStripRegisters values a thread in registers and the
// rest in up to kStripSharedBytes of shared memory (two blocks a multiprocessor), filled by
// asynchronous copies: wider row segments and more bytes in flight than a lane a column.
inline constexpr int kStripThreads = 512;
inline constexpr int kStripWidth = 16;  // threads across a block's columns
inline constexpr int kStripRegisters = 16;
inline constexpr int kStripSharedBytes = 96 * 1024;

struct RowFusedKernel {
  // One array the kernel reads, shared by every stage that reads it.
  struct Operand {
    DType dtype;
    Access access;  // unit: a row held in registers; zero: one value per row; uniform
    int temp_of;    // the stage whose target this is (read from registers), or -1
  };
  struct Stage {
    std::optional<ir::Op> reduce;  // empty for the final elementwise stage
    DType target_dtype;
    std::vector<int> operands;  // fused operand index of each of the stage's operand slots
    int scalar_offset;          // where its scalars start in `scalars`
  };
  // The last stage's instruction `instruction` computes stage `stage`'s reduced element (as
  // softmax's exp(x − max) feeds both its sum and its output): that stage keeps the element in
  // the registers of row operand `row_operand`, which nothing reads after it, and the last stage
  // reads it there instead of computing it again.
  struct Reuse {
    int stage = -1, instruction = -1, row_operand = -1;
  };
  std::vector<Operand> operand_info;
  std::vector<Stage> stages;
  std::optional<Reuse> reuse;
  bool index64 = false;
  int per_thread = kRowFusedRegisters;  // elements of each row operand one thread holds
  // The reduced axis is the last (rows: a row's threads read it in vectors) or another
  // (columns: a warp's 32 lanes hold 32 neighbouring columns along the last axis, and the
  // block's warps, then the cluster's blocks, split the column; each layout then carries the
  // reduced axis's stride at index args.rank).
  bool columns = false;
  // Columns held as strips (see kStripThreads): each thread holds kRowFusedVector neighbouring
  // columns, per_thread elements of each, the first strip_registers of them in registers and
  // the rest in shared memory (shared_bytes a block).
  bool strips = false;
  int strip_registers = 0;
  int shared_bytes = 0;
  int cluster = 1;  // blocks a row or column is split over (see kRowFusedMaxCluster)
  int block_x = 1;  // rows: threads of a row in a block; columns: 32
  int block_threads = 1;
  std::string key;

  // Run-time values: layouts span the row space (every axis but the reduced one).
  std::vector<ExprOperand> operands;
  std::vector<ExprOperand> targets;  // per stage
  std::vector<float> scalars;
  ExprArgs args{};  // n rows, k row length, shape/rank of the row space
  bool vector_ok = false;
};

// The fused description of `plan`, or nullopt when the plan does not have that form or does
// not fit (row too long for the registers, operands read with other strides along the row,
// an output aliasing a row another block still reads, flex16 exact policy, ...). `max_cluster`:
// the blocks a cluster may hold on the device (1 where it has no clusters).
// `multiprocessors` (0: unknown): columns are fused only where their blocks fill the device.
std::optional<RowFusedKernel> describe_row_fused(const ir::Plan& plan, int max_cluster = 1,
                                                 int multiprocessors = 0);

std::string generate_row_fused_source(const RowFusedKernel& kernel, const ir::Plan& plan);

// One launch: grid_x blocks of block_x * block_y threads (1-D), block_x threads per row in a
// block (columns: 32 lanes); with clusters, `cluster` consecutive blocks share a row.
struct RowFusedLaunch {
  ExprArgs args;
  LaunchShape shape;
  unsigned shared_bytes = 0;  // dynamic shared memory a block
};
RowFusedLaunch plan_row_fused_launch(const RowFusedKernel& kernel);

}  // namespace flexkit::codegen
