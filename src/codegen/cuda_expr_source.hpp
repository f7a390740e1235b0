// Lowering one expression stage (ir::Stage) to a CUDA C++ kernel program for NVRTC: a cheap
// description of the stage first (kernel kind, coalesced layouts, access classes and the
// structural cache key), and the source text only when the cache misses. Everything a kernel
// needs that is not structure (pointers, sizes, strides, scalars, iwl values) is a kernel
// parameter, so one compiled kernel serves every array with the same structure. The stages live
// apart: describing (cuda_expr_describe.cpp), the key (cuda_expr_key.cpp), the source
// (cuda_expr_emit.cpp), launch planning (cuda_expr_launch.cpp) and the spellings the generators
// share (cuda_expr_spellings.cpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "codegen/cuda_op_spelling.hpp"
#include "flexkit/dtype.hpp"
#include "flexkit/portable/strided_layout.hpp"
#include "ir/plan.hpp"

namespace flexkit::codegen {

using portable::StridedLayout;

// ---- kernel parameter PODs; the generated source declares the same structs and checks their
// sizes and field offsets against the values below with static_assert ---------------------------

// One array a kernel reads or writes. `layout` spans the kernel's iteration space: the whole
// space for elementwise kernels, the output space for reductions over one axis (the reduced
// axis is `red_stride`), the reduced space for general reductions over every axis.
struct ExprOperand {
  const void* data;         // element 0 of the view
  std::int32_t iwl;         // flex16 exponent (0 for other dtypes)
  std::int32_t reserved;    // keeps the layout 8-byte aligned on every compiler
  std::int64_t red_stride;  // reductions: stride along the reduced dimension
  StridedLayout layout;
};

// Sizes of one launch.
struct ExprArgs {
  std::int64_t n;       // elementwise: elements; reductions: outputs (rows)
  std::int64_t k;       // reductions: elements reduced into each output
  std::int64_t seg;     // reductions: elements of k one split covers
  std::int64_t splits;  // reductions: partials per output; 1: the kernel stores the result
  // elementwise: units of kElementsPerThread done with vector access (the rest element-wise);
  // reductions: 1 when vector access is allowed.
  std::int64_t vec;
  // Reductions launch 1-D grids of 1-D blocks seen as 2-D: block b covers output block
  // b % grid_x of split b / grid_x, thread t is (t % block_x, t / block_x).
  std::int64_t grid_x;
  std::int64_t shape[portable::kLayoutMaxRank];  // the coalesced iteration space
  std::int32_t rank;
  std::int32_t block_x;
  std::uint64_t seed;  // flex16 stochastic rounding (ExprKernel::stochastic)
  // Dividers by shape[d] for unravelling 32-bit indices (set with the shape; see set_space).
  portable::IndexDivider dividers[portable::kLayoutMaxRank];
};

// A flex16 write's statistics as the kernels accumulate them (one atomic per block). `host`
// (mapped pinned memory, its device address) makes the last block to commit publish the record
// there and zero it (`arrivals` counts the blocks); null leaves that to a publish kernel.
struct ExprStats {
  std::int32_t max_abs_m;
  std::uint32_t arrivals;
  std::uint64_t saturated;
  std::uint64_t nan_count;
  ExprStats* host;
};
static_assert(sizeof(ExprStats) == 32);

// The partial result of argmax/argmin over part of a row; sum/mean partials are doubles and
// max/min partials floats.
struct ExprArgPartial {
  float value;
  std::int32_t reserved;
  std::int64_t index;
};

// ---- the description of a stage ------------------------------------------------------------

enum class KernelKind : std::uint8_t {
  ew_contiguous,   // target and operands are one dense run (or one broadcast element)
  ew_strided,      // any layouts, vectorised along the innermost dimension where it is dense
  reduce_rows,     // threads of a row cooperate along the reduced dimension
  reduce_columns,  // threads over outputs, each looping along the reduced dimension
};

// How an operand is read along the dimension a kernel vectorises (the innermost iteration
// dimension for elementwise kernels, the reduced dimension for row reductions, the innermost
// output dimension for column reductions).
enum class Access : std::uint8_t {
  unit,     // stride 1: vector loads
  zero,     // stride 0: one load serves the whole vector
  other,    // any other stride: one load per element
  uniform,  // every stride 0: one element, loaded once per thread
};

// The two names a module exports.
inline constexpr const char* kMainKernel = "flexkit_expr_main";
inline constexpr const char* kCombineKernel = "flexkit_expr_combine";  // reductions only

// Elements one thread handles per vector step (elementwise and row reductions). Fewer when
// many operands would otherwise need too many registers.
int elements_per_thread(std::size_t operand_count);
// Outputs one thread of a column reduction handles at once.
inline constexpr int kColumnVector = 8;
// Kernel-parameter bytes beyond which operand descriptors and scalars go to device memory
// (the limit is 4 KiB; the rest of the parameters fit in the margin).
inline constexpr std::size_t kMaxParameterBytes = 3800;

struct ExprKernel {
  KernelKind kind = KernelKind::ew_contiguous;
  std::optional<ir::Op> reduce;  // the reduction op (reduce_* kinds)
  bool reduce_all = false;       // a reduction over every axis
  // reduce_rows over every axis when the operands do not coalesce to one dimension: the kernel
  // walks the reduced space with `args.shape` and operands' layouts span it.
  bool red_general = false;
  bool index64 = false;                // 64-bit index arithmetic
  bool descriptors_in_memory = false;  // operands and scalars passed through a device buffer
  int elements_per_thread = 16;
  DType target_dtype = DType::f32;
  Access target_access = Access::unit;  // elementwise kinds: how the target is written
  bool stochastic = false;              // flex16 target, seeded stochastic rounding (seed in args)
  std::vector<DType> operand_dtypes;
  std::vector<Access> access;  // per operand

  // Run-time values (never part of the key).
  ExprOperand target{};
  std::vector<ExprOperand> operands;
  std::vector<float> scalars;
  ExprArgs args{};
  // Whether vector access is allowed for these pointers and strides: alignment and the
  // divisibility of the vectorised extent. Elementwise kinds turn it into args.vec; reductions
  // use it when choosing the split.
  bool vector_ok = false;
  std::int64_t vector_extent = 0;  // elements along the vectorised dimension

  std::string key;  // the structural cache key
};

// Describes `stage` for a CUDA launch: validates what codegen depends on (dtypes available on
// CUDA, target shape) and throws DTypeError / ShapeError naming the stage otherwise.
ExprKernel describe_stage(const ir::Stage& stage);

// args.dividers from args.shape and args.rank.
inline void set_shape_dividers(ExprArgs& args) {
  for (int d = 0; d < args.rank; ++d)
    args.dividers[d] = portable::make_index_divider(args.shape[d]);
}

// The structural cache key of a described kernel (what describe_stage stores in ExprKernel::key):
// everything the generated source depends on, and no sizes, pointers or values.
std::string expr_kernel_key(const ExprKernel& kernel, const ir::Program& body);

// The complete CUDA C++ program (kernels kMainKernel and, for reductions, kCombineKernel) for
// a described stage. `body` is the stage's program (its code and operand/scalar counts).
std::string generate_source(const ExprKernel& kernel, const ir::Program& body);

// ---- spellings shared by the generators -------------------------------------------------------

class CodeStream;
// The device reduction policy of a reduction op ("ReduceSum", "ReduceArg<true>", ...).
const char* reduce_policy(ir::Op op);
// "" when every instruction of `program` is an elementwise op whose arguments precede it and
// whose operand / scalar slot exists; else what is wrong.
std::string program_error(const ir::Program& program);

// One letter per access class, as it appears in structural cache keys.
const char* access_code(Access a);

// The opening every generated expression kernel shares: a title comment, the structural key,
// the device helpers, a check that the parameter structs match the host's, and the index types.
void emit_kernel_preamble(CodeStream& os, const std::string& title, const std::string& key,
                          bool index64);
// `__device__ float name(const float (&x)[operands], const float (&s)[scalar_count])`
// evaluating `program`, its scalar slot i read from s[scalar_offset + i].
void emit_program_function(CodeStream& os, const std::string& name, const ir::Program& program,
                           int scalar_offset, int scalar_count);

// Bytes of one accumulator partial of `reduce` (split reductions and column shared memory).
std::size_t partial_bytes(ir::Op reduce);

// ---- launch geometry ---------------------------------------------------------------------------

struct LaunchShape {
  unsigned grid_x = 1, grid_y = 1;
  unsigned block_x = 1, block_y = 1;
  unsigned shared_bytes = 0;
};

// How to launch a described stage on a device with `multiprocessors` SMs. Depends only on the
// description and the SM count, so a reduction combines in the same order on every run.
// Both kernels are launched with grid_x * grid_y blocks of block_x * block_y threads (1-D).
struct ExprLaunch {
  ExprArgs args;              // kMainKernel's args with vec / splits / seg / grid decided
  ExprArgs combine_args;      // kCombineKernel's
  LaunchShape main;           // kMainKernel
  LaunchShape combine;        // kCombineKernel, when args.splits > 1
  std::int64_t partials = 0;  // accumulator partials to allocate (outputs × splits), or 0
};
ExprLaunch plan_launch(const ExprKernel& kernel, int multiprocessors);

}  // namespace flexkit::codegen
