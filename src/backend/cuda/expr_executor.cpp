// Running planned expressions on CUDA: describe a stage (or a row-fusable plan), take its kernel
// program from the cache (generating and compiling it on a miss), launch on the device's current
// stream, and record what a flex16 store saw in the target's statistics.
#include <cuda_runtime_api.h>

#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "backend/cuda/check.hpp"
#include "backend/cuda/graph_capture.hpp"
#include "backend/cuda/kernel_cache.hpp"
#include "backend/cuda/launch_support.hpp"
#include "backend/cuda/pending_expr_stats.hpp"
#include "backend/expr_backend.hpp"
#include "codegen/cuda_expr_source.hpp"
#include "codegen/cuda_row_fused_source.hpp"
#include "core/device_memory.hpp"
#include "core/storage.hpp"
#include "core/text.hpp"
#include "flexkit/cuda.hpp"
#include "flexkit/error.hpp"

namespace flexkit::backend::cuda {
namespace {

using detail::cat;

void validate(const ir::Stage& stage) {
  const Array& t = stage.target;
  if (!t.defined()) throw ValueError("expression on cuda: the target is an empty array handle");
  if (!t.device().is_cuda())
    throw DeviceError(cat("expression on cuda: the target ", t.describe(), " is not on a GPU"));
  if (!t.writable())
    throw ValueError(cat("expression on cuda: the target ", t.describe(), " is read-only"));
  for (const Array& a : stage.body.operands) {
    if (!a.defined()) throw ValueError("expression on cuda: an operand is an empty array handle");
    if (a.device() != t.device())
      throw DeviceError(cat("expression on cuda: operand ", a.describe(), " is not on ",
                            t.device().str(), ", the device of the target ", t.describe()));
  }
}

unsigned blocks_of(const codegen::LaunchShape& s, const char* kernel) {
  const std::uint64_t blocks = std::uint64_t{s.grid_x} * s.grid_y;
  if (blocks == 0 || blocks > static_cast<std::uint64_t>(std::numeric_limits<int>::max()))
    throw UnsupportedError(cat("expression on cuda: ", kernel, " would need ", blocks,
                               " blocks; the arrays are too large for one launch"));
  return static_cast<unsigned>(blocks);
}

// A flex16 write's statistics record (none for other targets).
std::optional<ExprStatsRecords> stats_record(const Array& target) {
  if (target.dtype() != DType::flex16) return std::nullopt;
  refuse_in_capture(target.device().index, "a flex16 write (its statistics go to the host)");
  return std::optional<ExprStatsRecords>(std::in_place, target.device().index, 1);
}

// The write's statistics come back without waiting: the target keeps them pending.
void read_stats(ExprStatsRecords& stats, cudaStream_t stream, const Array& target) {
  // Every generated kernel that commits statistics publishes them from its last block.
  ArrayAccess::storage(target).set_pending_stats(stats.publish(stream, true).front());
}

}  // namespace

void run_stage(const ir::Stage& stage) {
  validate(stage);
  const Array& target = stage.target;
  const int device = target.device().index;
  const bool flex = target.dtype() == DType::flex16;
  if (target.size() == 0 || shape_numel(stage.body.shape) == 0) {
    if (stage.reduce && target.size() > 0)
      throw ShapeError(cat("expression on cuda: cannot reduce the empty shape ",
                           shape_str(stage.body.shape), " into ", target.describe()));
    if (flex) ArrayAccess::storage(target).set_stats({});
    return;
  }

  codegen::ExprKernel kernel = codegen::describe_stage(stage);
  DeviceGuard guard(device);
  std::shared_ptr<const RtcModule> module = KernelCache::instance().get(
      device, kernel.key, [&] { return codegen::generate_source(kernel, stage.body); });
  codegen::ExprLaunch launch = codegen::plan_launch(kernel, multiprocessors(device));
  auto stream = static_cast<cudaStream_t>(flexkit::cuda::current_stream(device));

  // Operand descriptors and scalars too large for the parameter space travel in device memory.
  const std::size_t descriptor_bytes = sizeof(codegen::ExprOperand) * kernel.operands.size();
  const std::size_t scalar_bytes = sizeof(float) * kernel.scalars.size();
  Scratch descriptors(device, kernel.descriptors_in_memory ? descriptor_bytes + scalar_bytes : 0);
  void* operand_buffer = descriptors.get();
  void* scalar_buffer = nullptr;
  if (kernel.descriptors_in_memory) {
    std::vector<unsigned char> host(descriptor_bytes + scalar_bytes);
    std::memcpy(host.data(), kernel.operands.data(), descriptor_bytes);
    if (scalar_bytes)
      std::memcpy(host.data() + descriptor_bytes, kernel.scalars.data(), scalar_bytes);
    scalar_buffer = static_cast<unsigned char*>(operand_buffer) + descriptor_bytes;
    refuse_in_capture(device, "an expression whose operand descriptors travel from host memory");
    // From pageable memory: the call returns once `host` has been staged, so it may go.
    FLEXKIT_CUDA_CHECK(
        cudaMemcpyAsync(operand_buffer, host.data(), host.size(), cudaMemcpyHostToDevice, stream));
  }
  Scratch partials(device, launch.partials > 0 ? static_cast<std::size_t>(launch.partials) *
                                                     codegen::partial_bytes(*kernel.reduce)
                                               : 0);
  std::optional<ExprStatsRecords> stats = stats_record(target);
  void* partial_ptr = partials.get();
  void* stats_ptr = stats ? stats->records() : nullptr;

  // Parameters in the order of the generated signature: t, operands (or their buffer and the
  // scalars' buffer), [scalars], args, partials, stats.
  std::vector<void*> params;
  params.reserve(kernel.operands.size() + 6);
  params.push_back(&kernel.target);
  if (kernel.descriptors_in_memory) {
    params.push_back(&operand_buffer);
    params.push_back(&scalar_buffer);
  } else {
    for (codegen::ExprOperand& o : kernel.operands) params.push_back(&o);
    if (!kernel.scalars.empty()) params.push_back(kernel.scalars.data());
  }
  params.push_back(&launch.args);
  params.push_back(&partial_ptr);
  params.push_back(&stats_ptr);
  module->launch(codegen::kMainKernel, blocks_of(launch.main, codegen::kMainKernel),
                 launch.main.block_x * launch.main.block_y, params.data(),
                 launch.main.shared_bytes);
  FLEXKIT_CUDA_CHECK_LAUNCH("flexkit_expr_main");

  if (launch.args.splits > 1) {
    void* combine_params[] = {&kernel.target, &partial_ptr, &launch.combine_args, &stats_ptr};
    module->launch(codegen::kCombineKernel, blocks_of(launch.combine, codegen::kCombineKernel),
                   launch.combine.block_x * launch.combine.block_y, combine_params,
                   launch.combine.shared_bytes);
    FLEXKIT_CUDA_CHECK_LAUNCH("flexkit_expr_combine");
  }

  if (stats) read_stats(*stats, stream, target);
}

bool run_row_fused(const ir::Plan& plan) {
  if (plan.stages.size() < 2) return false;
  const Array& out = plan.stages.back().target;
  if (!out.defined() || !out.device().is_cuda() || !out.writable()) return false;
  // Anything unusual goes the stage-by-stage way, which reports it properly.
  for (const ir::Stage& s : plan.stages) {
    if (!s.target.defined() || s.target.device() != out.device()) return false;
    if (s.stochastic_seed) return false;  // the stage-by-stage kernels round stochastically
    for (const Array& a : s.body.operands)
      if (!a.defined() || a.device() != out.device()) return false;
  }
  const int device = out.device().index;
  std::optional<codegen::RowFusedKernel> kernel = codegen::describe_row_fused(
      plan, has_clusters(device) ? codegen::kRowFusedMaxCluster : 1, multiprocessors(device));
  if (!kernel) return false;

  DeviceGuard guard(device);
  std::shared_ptr<const RtcModule> module = KernelCache::instance().get(
      device, kernel->key, [&] { return codegen::generate_row_fused_source(*kernel, plan); });
  codegen::RowFusedLaunch launch = codegen::plan_row_fused_launch(*kernel);
  auto stream = static_cast<cudaStream_t>(flexkit::cuda::current_stream(device));
  std::optional<ExprStatsRecords> stats = stats_record(out);
  void* stats_ptr = stats ? stats->records() : nullptr;

  // Parameters in the order of the generated signature: operands, targets, [scalars], args,
  // stats.
  std::vector<void*> params;
  for (codegen::ExprOperand& o : kernel->operands) params.push_back(&o);
  for (codegen::ExprOperand& t : kernel->targets) params.push_back(&t);
  if (!kernel->scalars.empty()) params.push_back(kernel->scalars.data());
  params.push_back(&launch.args);
  params.push_back(&stats_ptr);
  module->launch(codegen::kRowFusedKernel, blocks_of(launch.shape, codegen::kRowFusedKernel),
                 launch.shape.block_x * launch.shape.block_y, params.data());
  FLEXKIT_CUDA_CHECK_LAUNCH("flexkit_row_fused");
  if (stats) read_stats(*stats, stream, out);
  return true;
}

}  // namespace flexkit::backend::cuda
