// Running FlexSN step kernels on CUDA: the program comes from the kernel cache under the
// kernel's structure (generated and compiled on a miss), every array and size travels in one
// parameter struct, and flex16 outputs record what their stores saw in their storage.
#include <cuda_runtime_api.h>

#include <cstdint>
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
#include "codegen/cuda_expr_source.hpp"
#include "codegen/cuda_step_kernel_source.hpp"
#include "core/device_memory.hpp"
#include "core/storage.hpp"
#include "core/text.hpp"
#include "flexkit/cuda.hpp"
#include "flexkit/error.hpp"
#include "ir/step_kernel.hpp"

namespace flexkit::snn {
namespace {

using backend::cuda::DeviceGuard;
using backend::cuda::KernelCache;
using backend::cuda::multiprocessors;
using backend::cuda::RtcModule;
using codegen::ExprStats;
using codegen::kStepMaxBlock;
using codegen::StepKernelArgs;
using detail::cat;

// The device of the launch: the one of its first given array, or -1 when none is given (a
// kernel without slots has nothing to do).
int launch_device(const StepKernelLaunch& l) {
  for (const std::vector<Array>* list :
       {&l.seq_in, &l.seq_out, &l.carried_init, &l.carried_final, &l.params})
    for (const Array& a : *list)
      if (a.defined()) {
        if (!a.device().is_cuda())
          throw DeviceError(cat("step kernel on cuda: ", a.describe(), " is not on a GPU"));
        return a.device().index;
      }
  return -1;
}

void check_counts(const StepKernel& k, const StepKernelLaunch& l) {
  if (l.seq_in.size() != k.seq_in.size() || l.seq_out.size() != k.seq_out.size() ||
      l.carried_init.size() != k.carried.size() || l.carried_final.size() != k.carried.size() ||
      l.params.size() != k.params.size())
    throw ValueError(cat("step kernel ", k.name, ": the launch's arrays do not match its slots"));
}

// Wide blocks where the neurons fill the GPU; narrower ones (down to two warps) so that a small
// population still spreads over more multiprocessors.
unsigned block_size(std::int64_t neurons, int sms) {
  std::int64_t block = kStepMaxBlock;
  while (block > 64 && (neurons + block - 1) / block < 2 * std::int64_t{sms}) block /= 2;
  return static_cast<unsigned>(block);
}

}  // namespace

void run_step_kernel_cuda(const StepKernel& kernel, const StepKernelLaunch& launch) {
  codegen::check_step_kernel(kernel);
  check_counts(kernel, launch);
  const std::int64_t n = launch.neurons;
  const std::int64_t inner = launch.inner > 0 ? launch.inner : n;
  const int device = launch_device(launch);
  if (n > 0 && n % inner != 0)
    throw ValueError(cat("step kernel ", kernel.name, ": inner ", inner,
                         " does not divide the neuron count ", n));
  if (launch.final_group != 1 &&
      (launch.final_group != kFinalGroup || n % kFinalGroup != 0 || inner % kFinalGroup != 0))
    throw ValueError(cat("step kernel ", kernel.name, ": final_group ", launch.final_group,
                         " must be 1 or ", kFinalGroup, " dividing neurons and inner"));
  check_pool_launch(kernel, launch);
  if (kernel.replay && launch.steps > kMaxReplaySteps)
    throw UnsupportedError(cat("step kernel ", kernel.name, ": a replay keeps at most ",
                               kMaxReplaySteps, " steps, the launch has ", launch.steps));
  if (n <= 0 || device < 0) {
    // Nothing was stored: a flex16 output's record says so.
    for (std::size_t j = 0; j < kernel.seq_out.size(); ++j)
      if (kernel.seq_out[j].dtype == DType::flex16 && launch.seq_out[j].defined())
        ArrayAccess::storage(launch.seq_out[j]).set_stats({});
    return;
  }

  DeviceGuard guard(device);
  // A replaying kernel is built for its T (at most kMaxReplaySteps), so that its replayed values
  // stay in registers instead of local memory.
  const std::int64_t fixed_steps = kernel.replay ? launch.steps : 0;
  const std::shared_ptr<const RtcModule> module = KernelCache::instance().get(
      device,
      cat("step|", kernel.structure.empty() ? step_kernel_structure(kernel) : kernel.structure,
          fixed_steps > 0 ? cat("|T=", fixed_steps) : std::string()),
      [&] { return cuda_step_kernel_source(kernel, fixed_steps); });
  auto stream = static_cast<cudaStream_t>(flexkit::cuda::current_stream(device));

  StepKernelArgs args{};
  args.neurons = n;
  args.steps = launch.steps;
  args.inner = inner;
  args.channel_neurons = launch.channel_neurons > 0 ? launch.channel_neurons : 1;
  args.final_group = launch.final_group;
  std::vector<std::size_t> flex_outputs;
  for (std::size_t s = 0; s < kernel.seq_in.size(); ++s) {
    if (kernel.seq_in[s].replayed) continue;  // no array: the kernel recomputes it
    args.seq_in[s] = launch.seq_in[s].data();
    if (kernel.seq_in[s].dtype == DType::flex16) args.seq_in_iwl[s] = launch.seq_in[s].iwl();
  }
  for (std::size_t j = 0; j < kernel.seq_out.size(); ++j) {
    args.seq_out[j] = launch.seq_out[j].data();
    if (kernel.seq_out[j].dtype == DType::flex16) {
      args.seq_out_iwl[j] = launch.seq_out[j].iwl();
      flex_outputs.push_back(j);
    }
  }
  for (std::size_t c = 0; c < kernel.carried.size(); ++c) {
    const Array& init = launch.carried_init[c];
    const Array& final = launch.carried_final[c];
    args.carried_init[c] = init.defined() ? static_cast<const float*>(init.data()) : nullptr;
    args.carried_init_value[c] = kernel.carried[c].init_value;
    args.carried_final[c] = final.defined() ? static_cast<float*>(final.data()) : nullptr;
  }
  for (std::size_t q = 0; q < kernel.params.size(); ++q)
    args.params[q] = static_cast<const float*>(launch.params[q].data());
  if (launch.pool_source.defined()) {
    args.pool_source = launch.pool_source.data();
    args.pool_height = launch.pool_height;
    args.pool_width = launch.pool_width;
  }
  // The neuron index and every quotient of it stay below n, so 31 bits hold them all when n does.
  args.index32 = n <= std::numeric_limits<std::int32_t>::max() ? 1 : 0;
  if (args.index32) {
    args.inner_divider = portable::make_index_divider(inner);
    args.channel_divider = portable::make_index_divider(args.channel_neurons);
    args.pool_width_divider =
        portable::make_index_divider(std::max<std::int64_t>(1, args.pool_width));
    args.pool_height_divider =
        portable::make_index_divider(std::max<std::int64_t>(1, args.pool_height));
  }

  std::optional<backend::cuda::ExprStatsRecords> stats;
  if (!flex_outputs.empty()) {
    backend::cuda::refuse_in_capture(device,
                                     "a flex16 neuron output (its statistics go to the host)");
    stats.emplace(device, flex_outputs.size());
    for (std::size_t f = 0; f < flex_outputs.size(); ++f)
      args.seq_out_stats[flex_outputs[f]] = static_cast<ExprStats*>(stats->records()) + f;
  }

  // Four neurons per thread where every sequence can be moved as whole vector words: N and inner
  // multiples of 4 (a thread's lanes then share an outer row) and each sequence's base aligned to
  // 4 elements (then every o * T * inner + t * inner + j with j a multiple of 4 is too).
  // Reverse (backward) kernels stay at one lane over long runs: they read two or more sequences
  // per step, and the wider kernel's registers cost more occupancy than its wider words gain
  // (measured at T = 32; at T = 8 too, for PLIF). Runs shorter than the one-lane kernel's batch
  // of 8 steps take four lanes: one lane then keeps too few 4-byte loads in flight (LIF at T = 4:
  // 0.078 -> 0.066 ms on an H100).
  // A thread's lanes also share a channel where some parameter is per channel (its value is
  // read once a thread).
  bool per_channel = false;
  for (const ParamSlot& q : kernel.params) per_channel = per_channel || q.per_channel;
  bool vec4 = (!kernel.reverse || launch.steps < 8) && n % 4 == 0 && inner % 4 == 0 &&
              (!per_channel || args.channel_neurons % 4 == 0);
  const std::vector<Array> source{launch.pool_source};
  for (const auto* arrays : {&launch.seq_in, &launch.seq_out, &source})
    for (const Array& a : *arrays)
      vec4 = vec4 && (!a.defined() ||
                      reinterpret_cast<std::uintptr_t>(a.data()) % (4 * itemsize(a.dtype())) == 0);
  const std::int64_t threads = vec4 ? n / 4 : n;
  const unsigned block = block_size(threads, multiprocessors(device));
  const std::int64_t blocks = (threads + block - 1) / block;
  if (blocks > std::numeric_limits<int>::max())
    throw UnsupportedError(cat("step kernel ", kernel.name, " on cuda: ", n,
                               " neurons need more blocks than one launch can have"));
  void* params[] = {&args};
  module->launch(vec4 ? codegen::kStepKernelEntryVec4 : codegen::kStepKernelEntry,
                 static_cast<unsigned>(blocks), block, params);
  FLEXKIT_CUDA_CHECK_LAUNCH("flexkit_step_kernel");

  if (stats) {  // the statistics come back without waiting: each output keeps its own
    const auto pending = stats->publish(stream, true);  // the kernel's last block published
    for (std::size_t f = 0; f < flex_outputs.size(); ++f)
      ArrayAccess::storage(launch.seq_out[flex_outputs[f]]).set_pending_stats(pending[f]);
  }
}

}  // namespace flexkit::snn
