// Running planned expressions on CUDA: describe a stage (or a row-fusable plan), take its kernel
// program from the cache (generating and compiling it on a miss), launch on the device's current
// stream, and record what a flex16 store saw in the target's statistics.
#include <cuda_runtime_api.h>

#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>
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

namespace {

// Launches a described stage: its main kernel, and the combine kernel of a split reduction.
// `target`, `operands` and `scalars` are the run-time values the description's key leaves out.
// `main_kernel`: the main kernel's handle when the caller kept it (else it is asked of the
// module). The caller has made the device current.
void launch_described(const RtcModule& module, void* main_kernel, const codegen::ExprKernel& kernel,
                      codegen::ExprOperand target, std::span<codegen::ExprOperand> operands,
                      std::span<float> scalars, codegen::ExprLaunch& launch,
                      const Array& target_array) {
  const int device = target_array.device().index;
  auto stream = static_cast<cudaStream_t>(flexkit::cuda::current_stream(device));

  // Operand descriptors and scalars too large for the parameter space travel in device memory.
  const std::size_t descriptor_bytes = sizeof(codegen::ExprOperand) * operands.size();
  const std::size_t scalar_bytes = sizeof(float) * scalars.size();
  Scratch descriptors(device, kernel.descriptors_in_memory ? descriptor_bytes + scalar_bytes : 0);
  void* operand_buffer = descriptors.get();
  void* scalar_buffer = nullptr;
  if (kernel.descriptors_in_memory) {
    std::vector<unsigned char> host(descriptor_bytes + scalar_bytes);
    std::memcpy(host.data(), operands.data(), descriptor_bytes);
    if (scalar_bytes) std::memcpy(host.data() + descriptor_bytes, scalars.data(), scalar_bytes);
    scalar_buffer = static_cast<unsigned char*>(operand_buffer) + descriptor_bytes;
    refuse_in_capture(device, "an expression whose operand descriptors travel from host memory");
    // From pageable memory: the call returns once `host` has been staged, so it may go.
    FLEXKIT_CUDA_CHECK(
        cudaMemcpyAsync(operand_buffer, host.data(), host.size(), cudaMemcpyHostToDevice, stream));
  }
  Scratch partials(device, launch.partials > 0 ? static_cast<std::size_t>(launch.partials) *
                                                     codegen::partial_bytes(*kernel.reduce)
                                               : 0);
  std::optional<ExprStatsRecords> stats = stats_record(target_array);
  void* partial_ptr = partials.get();
  void* stats_ptr = stats ? stats->records() : nullptr;

  // Parameters in the order of the generated signature: t, operands (or their buffer and the
  // scalars' buffer), [scalars], args, partials, stats. Operands past the parameter space go
  // through the buffer, so a fixed array holds them all.
  constexpr std::size_t kMaxParams = codegen::kMaxParameterBytes / sizeof(codegen::ExprOperand) + 6;
  void* params[kMaxParams];
  std::size_t count = 0;
  params[count++] = &target;
  if (kernel.descriptors_in_memory) {
    params[count++] = &operand_buffer;
    params[count++] = &scalar_buffer;
  } else {
    for (codegen::ExprOperand& o : operands) params[count++] = &o;
    if (!scalars.empty()) params[count++] = scalars.data();
  }
  params[count++] = &launch.args;
  params[count++] = &partial_ptr;
  params[count++] = &stats_ptr;
  if (!main_kernel) main_kernel = module.kernel(codegen::kMainKernel, launch.main.shared_bytes);
  launch_kernel(main_kernel, blocks_of(launch.main, codegen::kMainKernel),
                launch.main.block_x * launch.main.block_y, params, launch.main.shared_bytes,
                stream);

  if (launch.args.splits > 1) {
    void* combine_params[] = {&target, &partial_ptr, &launch.combine_args, &stats_ptr};
    launch_kernel(module.kernel(codegen::kCombineKernel, launch.combine.shared_bytes),
                  blocks_of(launch.combine, codegen::kCombineKernel),
                  launch.combine.block_x * launch.combine.block_y, combine_params,
                  launch.combine.shared_bytes, stream);
  }

  if (stats) read_stats(*stats, stream, target_array);
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
  launch_described(*module, nullptr, kernel, kernel.target, kernel.operands, kernel.scalars, launch,
                   target);
}

// ---- assignments described once ----------------------------------------------------------------

// What an assignment of one signature was described as: its single stage's kernel description
// (with the first call's pointers) and launch, or its row-fused description and launch with
// where each pointer and scalar of a later call comes from.
struct CachedAssignment {
  codegen::ExprKernel kernel;
  codegen::ExprLaunch launch;
  struct Fused {
    codegen::RowFusedKernel kernel;
    codegen::RowFusedLaunch launch;
    // Per fused operand: the signature's operand it reads, or -1 - s for stage s's temporary.
    std::vector<int> operand_source;
    std::vector<int> scalar_source;         // per fused scalar: the signature's scalar
    std::vector<std::size_t> temp_offsets;  // per stage but the last, in one scratch block
    std::size_t temp_bytes = 0;
  };
  std::optional<Fused> fused;
  std::shared_ptr<const RtcModule> module;
  void* main_kernel = nullptr;   // the module's main kernel, asked for once
  std::uint64_t generation = 0;  // the kernel cache's, when the module was taken
};

namespace {

struct SignatureHash {
  std::size_t operator()(const std::vector<std::int64_t>& words) const {
    std::uint64_t h = 0x9e3779b97f4a7c15ull;
    for (std::int64_t w : words) h = (h ^ static_cast<std::uint64_t>(w)) * 0x100000001b3ull;
    return static_cast<std::size_t>(h ^ (h >> 29));
  }
};

// Bounded: a program whose shapes never repeat would otherwise grow it without end.
constexpr std::size_t kMaxAssignments = 4096;

class AssignmentCache {
 public:
  static AssignmentCache& instance() {
    static AssignmentCache cache;
    return cache;
  }
  std::shared_ptr<const CachedAssignment> find(const std::vector<std::int64_t>& words) {
    const std::uint64_t generation = KernelCache::instance().generation();
    std::lock_guard<std::mutex> lock(mutex_);
    if (generation != generation_) {  // the kernel cache dropped its modules: so does this
      entries_.clear();
      generation_ = generation;
      return nullptr;
    }
    auto it = entries_.find(words);
    return it == entries_.end() || it->second->generation != generation ? nullptr : it->second;
  }
  void add(const std::vector<std::int64_t>& words, std::shared_ptr<const CachedAssignment> entry) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (entries_.size() >= kMaxAssignments) entries_.clear();
    entries_[words] = std::move(entry);
  }

 private:
  std::mutex mutex_;
  std::uint64_t generation_ = 0;
  std::unordered_map<std::vector<std::int64_t>, std::shared_ptr<const CachedAssignment>,
                     SignatureHash>
      entries_;
};

bool same_bits(double a, double b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

}  // namespace

std::shared_ptr<const CachedAssignment> find_assignment(const ir::AssignSignature& signature) {
  return AssignmentCache::instance().find(signature.words);
}

void remember_assignment(const ir::AssignSignature& signature, const ir::Plan& plan) {
  if (plan.stages.size() != 1) return;
  const ir::Stage& stage = plan.stages[0];
  if (stage.reduce || stage.target.size() == 0 || !stage.target.device().is_cuda()) return;
  // The signature's operands and scalars must be the plan's slots, in order: what binds them
  // at launch relies on it (leaves make_plan merged by their broadcast views are not cached).
  const ir::Program& body = stage.body;
  if (body.operands.size() != signature.operands.size() ||
      body.scalars.size() != signature.scalars.size())
    return;
  for (std::size_t i = 0; i < body.operands.size(); ++i)
    if (body.operands[i].data() != signature.operands[i]->data() ||
        body.operands[i].dtype() != signature.operands[i]->dtype())
      return;
  for (std::size_t i = 0; i < body.scalars.size(); ++i)
    if (!same_bits(body.scalars[i], signature.scalars[i])) return;
  const int device = stage.target.device().index;
  auto entry = std::make_shared<CachedAssignment>();
  entry->generation = KernelCache::instance().generation();
  entry->kernel = codegen::describe_stage(stage);
  if (entry->kernel.descriptors_in_memory) return;
  // The stage has just run, so its program is loaded.
  entry->module = KernelCache::instance().loaded(device, entry->kernel.key);
  if (!entry->module) return;
  entry->launch = codegen::plan_launch(entry->kernel, multiprocessors(device));
  if (entry->launch.args.splits != 1 || entry->launch.partials != 0) return;
  entry->main_kernel = entry->module->kernel(codegen::kMainKernel, entry->launch.main.shared_bytes);
  AssignmentCache::instance().add(signature.words, std::move(entry));
}

namespace {
void run_fused_assignment(const CachedAssignment& cached, const ir::AssignSignature& signature,
                          const Array& out);
}  // namespace

void run_assignment(const CachedAssignment& cached, const ir::AssignSignature& signature,
                    const Array& out, std::uint64_t seed) {
  if (cached.fused) {
    run_fused_assignment(cached, signature, out);
    return;
  }
  const codegen::ExprKernel& kernel = cached.kernel;
  codegen::ExprOperand target = kernel.target;
  target.data = out.data();
  target.iwl = out.dtype() == DType::flex16 ? out.iwl() : 0;
  // At most a few dozen operands (the parameter space holds them all: see remember_assignment).
  constexpr std::size_t kMax = codegen::kMaxParameterBytes / sizeof(codegen::ExprOperand);
  codegen::ExprOperand operands[kMax];
  float scalars[codegen::kMaxParameterBytes / sizeof(float)];
  const std::size_t n = kernel.operands.size();
  for (std::size_t i = 0; i < n; ++i) {
    const Array& a = *signature.operands[i];
    operands[i] = kernel.operands[i];
    operands[i].data = a.data();
    operands[i].iwl = a.dtype() == DType::flex16 ? a.iwl() : 0;
  }
  for (std::size_t i = 0; i < signature.scalars.size(); ++i)
    scalars[i] = static_cast<float>(signature.scalars[i]);
  codegen::ExprLaunch launch = cached.launch;
  if (kernel.stochastic) launch.args.seed = seed;
  const int device = out.device().index;
  DeviceGuard guard(device);
  KernelCache::instance().count_reuse();
  launch_described(*cached.module, cached.main_kernel, kernel, target, std::span(operands, n),
                   std::span(scalars, signature.scalars.size()), launch, out);
}

namespace {

// Launches a row-fused kernel with the call's operands, targets and scalars. The caller has
// made the device current.
void launch_row_fused(void* handle, std::span<codegen::ExprOperand> operands,
                      std::span<codegen::ExprOperand> targets, std::span<float> scalars,
                      codegen::RowFusedLaunch& launch, const Array& out) {
  const int device = out.device().index;
  void* stream = flexkit::cuda::current_stream(device);
  std::optional<ExprStatsRecords> stats = stats_record(out);
  void* stats_ptr = stats ? stats->records() : nullptr;
  // Parameters in the order of the generated signature: operands, targets, [scalars], args,
  // stats (describe_row_fused keeps the descriptors within the parameter space).
  constexpr std::size_t kMaxParams = codegen::kMaxParameterBytes / sizeof(codegen::ExprOperand) + 4;
  void* params[kMaxParams];
  std::size_t count = 0;
  for (codegen::ExprOperand& o : operands) params[count++] = &o;
  for (codegen::ExprOperand& t : targets) params[count++] = &t;
  if (!scalars.empty()) params[count++] = scalars.data();
  params[count++] = &launch.args;
  params[count++] = &stats_ptr;
  launch_kernel(handle, blocks_of(launch.shape, codegen::kRowFusedKernel),
                launch.shape.block_x * launch.shape.block_y, params, launch.shared_bytes, stream);
  if (stats) read_stats(*stats, static_cast<cudaStream_t>(stream), out);
}

// Keeps a row-fused plan's description under the assignment's signature when every pointer and
// scalar of a later call can be bound from the signature alone: each operand is one signature
// leaf (by its data and dtype) or a stage's temporary, each scalar one of its values.
void remember_row_fused(const ir::AssignSignature& signature, const ir::Plan& plan,
                        const codegen::RowFusedKernel& kernel,
                        std::shared_ptr<const RtcModule> module, void* handle,
                        const codegen::RowFusedLaunch& launch) {
  // What run_fused_assignment's fixed arrays hold.
  constexpr std::size_t kMaxScalars = codegen::kMaxParameterBytes / sizeof(float);
  constexpr std::size_t kMaxOperands = codegen::kMaxParameterBytes / sizeof(codegen::ExprOperand);
  if (kernel.scalars.size() > kMaxScalars || kernel.operands.size() > kMaxOperands ||
      kernel.targets.size() > kMaxOperands)
    return;
  CachedAssignment::Fused fused{kernel, launch, {}, {}, {}, 0};
  const std::size_t temps = plan.stages.size() - 1;
  for (std::size_t t = 0; t < temps; ++t) {
    const Array& temp = plan.stages[t].target;
    if (!temp.is_contiguous() || temp.data() != kernel.targets[t].data) return;
    fused.temp_offsets.push_back(fused.temp_bytes);
    const std::size_t bytes = static_cast<std::size_t>(temp.size()) * itemsize(temp.dtype());
    fused.temp_bytes += (bytes + 255) / 256 * 256;
  }
  if (kernel.targets.back().data != plan.stages.back().target.data()) return;
  for (std::size_t i = 0; i < kernel.operands.size(); ++i) {
    const void* data = kernel.operands[i].data;
    int source = -1;
    int matches = 0;
    for (std::size_t t = 0; t < temps; ++t) {
      if (plan.stages[t].target.data() != data) continue;
      source = -1 - static_cast<int>(t);
      ++matches;
    }
    for (std::size_t j = 0; j < signature.operands.size(); ++j) {
      const Array& a = *signature.operands[j];
      if (a.data() != data || a.dtype() != kernel.operand_info[i].dtype) continue;
      source = static_cast<int>(j);
      ++matches;
    }
    if (matches != 1) return;  // none, or two views at one address: not bindable later
    fused.operand_source.push_back(source);
  }
  for (std::size_t s = 0; s < plan.stages.size(); ++s) {
    const std::vector<double>& values = plan.stages[s].body.scalars;
    for (std::size_t q = 0; q < values.size(); ++q) {
      const std::size_t slot = static_cast<std::size_t>(kernel.stages[s].scalar_offset) + q;
      if (slot != fused.scalar_source.size()) return;
      int source = -1;
      for (std::size_t j = 0; j < signature.scalars.size() && source < 0; ++j)
        if (same_bits(signature.scalars[j], values[q])) source = static_cast<int>(j);
      if (source < 0) return;
      fused.scalar_source.push_back(source);
    }
  }
  if (fused.scalar_source.size() != kernel.scalars.size()) return;
  auto entry = std::make_shared<CachedAssignment>();
  entry->generation = KernelCache::instance().generation();
  entry->fused = std::move(fused);
  entry->module = std::move(module);
  entry->main_kernel = handle;
  AssignmentCache::instance().add(signature.words, std::move(entry));
}

// A kept row-fused description run with the call's pointers, exponents and scalars.
void run_fused_assignment(const CachedAssignment& cached, const ir::AssignSignature& signature,
                          const Array& out) {
  const CachedAssignment::Fused& f = *cached.fused;
  const codegen::RowFusedKernel& kernel = f.kernel;
  const int device = out.device().index;
  DeviceGuard guard(device);
  Scratch temps(device, f.temp_bytes);
  auto temp = [&](std::size_t t) {
    return static_cast<unsigned char*>(temps.get()) + f.temp_offsets[t];
  };
  constexpr std::size_t kMax = codegen::kMaxParameterBytes / sizeof(codegen::ExprOperand);
  codegen::ExprOperand operands[kMax];
  codegen::ExprOperand targets[kMax];
  float scalars[codegen::kMaxParameterBytes / sizeof(float)];
  const std::size_t n = kernel.operands.size(), stages = kernel.targets.size();  // <= kMax
  for (std::size_t i = 0; i < n; ++i) {
    operands[i] = kernel.operands[i];
    const int source = f.operand_source[i];
    if (source < 0) {
      operands[i].data = temp(static_cast<std::size_t>(-1 - source));
      continue;
    }
    const Array& a = *signature.operands[static_cast<std::size_t>(source)];
    operands[i].data = a.data();
    operands[i].iwl = a.dtype() == DType::flex16 ? a.iwl() : 0;
  }
  for (std::size_t s = 0; s + 1 < stages; ++s) {
    targets[s] = kernel.targets[s];
    targets[s].data = temp(s);
  }
  targets[stages - 1] = kernel.targets[stages - 1];
  targets[stages - 1].data = out.data();
  targets[stages - 1].iwl = out.dtype() == DType::flex16 ? out.iwl() : 0;
  for (std::size_t j = 0; j < f.scalar_source.size(); ++j)
    scalars[j] =
        static_cast<float>(signature.scalars[static_cast<std::size_t>(f.scalar_source[j])]);
  codegen::RowFusedLaunch launch = f.launch;
  KernelCache::instance().count_reuse();
  launch_row_fused(cached.main_kernel, std::span(operands, n), std::span(targets, stages),
                   std::span(scalars, f.scalar_source.size()), launch, out);
}

}  // namespace

bool run_row_fused(const ir::Plan& plan, const ir::AssignSignature* signature) {
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
  void* handle = module->kernel(codegen::kRowFusedKernel, launch.shared_bytes);
  codegen::RowFusedLaunch first = launch;
  launch_row_fused(handle, kernel->operands, kernel->targets, kernel->scalars, first, out);
  if (signature) remember_row_fused(*signature, plan, *kernel, std::move(module), handle, launch);
  return true;
}

}  // namespace flexkit::backend::cuda
