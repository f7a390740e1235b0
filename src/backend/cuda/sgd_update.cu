// SGD's fused update on CUDA: one launch for up to kSgdMaxTensors tensors, their descriptions
// passed by value. Each tensor owns a run of blocks that stride over its elements; each flex16
// output's statistics are combined per block and published by the last of the tensor's blocks,
// as the generated expression kernels do (rtc/flexkit/expr_kernels.cuh).
#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "backend/cuda/check.hpp"
#include "backend/cuda/graph_capture.hpp"
#include "backend/cuda/launch_support.hpp"
#include "backend/cuda/pending_expr_stats.hpp"
#include "backend/sgd_update.hpp"
#include "core/storage.hpp"
#include "core/text.hpp"
#include "flexkit/cuda.hpp"
#include "flexkit/error.hpp"
#include "flexkit/expr_kernels.cuh"
#include "flexkit/portable/sgd.hpp"

namespace flexkit::backend::cuda {
namespace {

using portable::SgdTargetView;
using portable::SgdTensorView;

constexpr int kThreads = 256;
constexpr std::size_t kRecordsPerBatch = 16;  // ExprStatsRecords' limit (kStepMaxSlots)
static_assert(sizeof(rtc::ExprStats) == 32, "the layout of codegen::ExprStats");

struct SgdKernelArgs {
  SgdTensorView tensors[kSgdMaxTensors];
  const float* lr;
  portable::SgdRule rule;  // its lr is read from `lr`, on the device
  int count;
};
static_assert(sizeof(SgdKernelArgs) <= 4096, "kernel parameters past the classic 4 KiB limit");

// Elements a thread updates at once where a tensor's arrays allow 16-byte accesses: every load
// of a chunk is issued before any of its arithmetic, and each array moves in 16-byte accesses
// (one element a thread kept too few bytes in flight to approach the copy rate).
constexpr int kVec = 8;

// Eight elements of `p` from element i (a multiple of 8; p 16-byte aligned), as floats.
__device__ __forceinline__ void load8(const void* p, int32_t dtype, int32_t iwl, std::int64_t i,
                                      float (&out)[kVec]) {
  if (dtype == portable::kSgdF32) {
    const float4* q = static_cast<const float4*>(p) + i / 4;
    const float4 a = q[0], b = q[1];
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
    out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
    return;
  }
  const uint4 u = static_cast<const uint4*>(p)[i / kVec];
  const unsigned words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    const auto half = static_cast<std::uint16_t>(words[k / 2] >> (16 * (k % 2)));
    out[k] = dtype == portable::kSgdBF16
                 ? portable::load_bf16(half)
                 : portable::load_flex16(static_cast<std::int16_t>(half), iwl);
  }
}

// Stores eight encoded values (`sgd_encode`'s bits) of `t` from element i.
__device__ __forceinline__ void store8(const SgdTargetView& t, std::int64_t i,
                                       const std::uint32_t (&bits)[kVec]) {
  if (t.dtype == portable::kSgdF32) {
    uint4* q = static_cast<uint4*>(t.data) + i / 4;
    q[0] = make_uint4(bits[0], bits[1], bits[2], bits[3]);
    q[1] = make_uint4(bits[4], bits[5], bits[6], bits[7]);
    return;
  }
  static_cast<uint4*>(t.data)[i / kVec] =
      make_uint4(bits[0] | bits[1] << 16, bits[2] | bits[3] << 16, bits[4] | bits[5] << 16,
                 bits[6] | bits[7] << 16);
}

// The chunk of eight elements from element i of a tensor that takes 16-byte accesses.
__device__ __forceinline__ void update8(const SgdTensorView& v, const portable::SgdRule& rule,
                                        std::int64_t i, rtc::StatsLocal (&stats)[3]) {
  float w[kVec], g[kVec], old[kVec];
  load8(v.weight.data, v.weight.dtype, v.weight.read_iwl, i, w);
  load8(v.grad, v.grad_dtype, v.grad_iwl, i, g);
  const bool read_buffer = rule.momentum_buffer && !rule.first_step;
  if (read_buffer) load8(v.buffer.data, v.buffer.dtype, v.buffer.read_iwl, i, old);
  const bool published = v.published.data != nullptr;
  const SgdTargetView* targets[3] = {&v.buffer, &v.weight, &v.published};
  const bool draws = portable::sgd_draws(v);
  std::uint32_t bits[3][kVec];
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    // One mix of the index for every stochastic rounding of the element.
    const std::uint64_t mixed = draws ? portable::mix64(static_cast<std::uint64_t>(i + k)) : 0;
    portable::sgd_apply(
        rule, w[k], g[k], read_buffer ? old[k] : 0.0f, published, [&](int out, float value) {
          return portable::sgd_encode(*targets[out], mixed, value, stats[out], bits[out][k]);
        });
  }
  if (rule.momentum_buffer) store8(v.buffer, i, bits[0]);
  store8(v.weight, i, bits[1]);
  if (published) store8(v.published, i, bits[2]);
}

__device__ __forceinline__ void commit(const SgdTargetView& t, rtc::StatsLocal s, unsigned blocks) {
  if (t.data == nullptr || t.dtype != portable::kSgdFlex16) return;
  rtc::commit_stats(s, static_cast<rtc::ExprStats*>(t.stats), blocks);
  __syncthreads();  // commit_stats's shared memory is used again by the next output
}

// Four blocks a multiprocessor (64 registers, a few spilled): the stochastic roundings' integer
// chains need the warps more than the registers (an H100 step's GPU time: 43 µs less than at 93
// registers and two blocks).
__global__ void __launch_bounds__(kThreads, 4)
    sgd_update_kernel(const __grid_constant__ SgdKernelArgs args) {
  const int block = static_cast<int>(blockIdx.x);
  int t = 0;
  while (t + 1 < args.count && block >= args.tensors[t + 1].first_block) ++t;
  const SgdTensorView& v = args.tensors[t];
  portable::SgdRule rule = args.rule;
  rule.lr = __ldg(args.lr);
  rtc::StatsLocal stats[3] = {{0, 0ull, 0ull}, {0, 0ull, 0ull}, {0, 0ull, 0ull}};
  const std::int64_t stride = static_cast<std::int64_t>(v.blocks) * kThreads;
  const std::int64_t first =
      static_cast<std::int64_t>(block - v.first_block) * kThreads + threadIdx.x;
  // The chunks of eight, then (or, for a tensor without 16-byte alignment, all) one at a time.
  const std::int64_t chunks = v.aligned16 ? v.n / kVec : 0;
  for (std::int64_t c = first; c < chunks; c += stride) update8(v, rule, c * kVec, stats);
  for (std::int64_t i = chunks * kVec + first; i < v.n; i += stride)
    portable::sgd_element(v, rule, i, stats);
  const auto blocks = static_cast<unsigned>(v.blocks);
  commit(v.buffer, stats[0], blocks);
  commit(v.weight, stats[1], blocks);
  commit(v.published, stats[2], blocks);
}

// Whether every array of `v` starts on a 16-byte boundary.
bool aligned16(const SgdTensorView& v) {
  const auto ok = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  return ok(v.grad) && ok(v.buffer.data) && ok(v.weight.data) && ok(v.published.data);
}

bool is_flex16(const SgdTarget& t) {
  return t.array.defined() && t.array.dtype() == DType::flex16;
}

void check_device(const Array& a, Device device) {
  if (a.defined() && a.device() != device)
    throw DeviceError(
        detail::cat("sgd update on cuda: ", a.describe(), " is not on ", device.str()));
}

// Tensors [first, last) of `update` in one launch.
void launch(const SgdUpdate& update, std::size_t first, std::size_t last, int max_blocks,
            cudaStream_t stream) {
  const int device = update.lr.device().index;
  SgdKernelArgs args{};
  args.lr = static_cast<const float*>(update.lr.data());
  args.rule = sgd_rule(update, 0.0f);
  args.count = static_cast<int>(last - first);
  // Statistics records, kRecordsPerBatch to a batch, in the order of the tensors' flex16 outputs.
  std::vector<const SgdTarget*> flex_targets;
  std::vector<SgdTargetView*> flex_views;
  int blocks = 0;
  for (std::size_t k = first; k < last; ++k) {
    const SgdTensor& tensor = update.tensors[k];
    SgdTensorView& v = args.tensors[k - first] = sgd_view(tensor);
    v.first_block = blocks;
    v.aligned16 = aligned16(v) ? 1 : 0;
    const std::int64_t per_block = static_cast<std::int64_t>(kThreads) * (v.aligned16 ? kVec : 1);
    v.blocks = static_cast<int>(std::min<std::int64_t>((v.n + per_block - 1) / per_block,
                                                       static_cast<std::int64_t>(max_blocks)));
    blocks += v.blocks;
    const std::pair<const SgdTarget*, SgdTargetView*> targets[3] = {
        {&tensor.buffer, &v.buffer},
        {&tensor.weight, &v.weight},
        {&tensor.published, &v.published}};
    for (const auto& [target, view] : targets) {
      if (!is_flex16(*target)) continue;
      flex_targets.push_back(target);
      flex_views.push_back(view);
    }
  }
  std::vector<std::unique_ptr<ExprStatsRecords>> records;
  for (std::size_t r = 0; r < flex_targets.size(); r += kRecordsPerBatch) {
    const std::size_t count = std::min(kRecordsPerBatch, flex_targets.size() - r);
    records.push_back(std::make_unique<ExprStatsRecords>(device, count));
    auto* base = static_cast<rtc::ExprStats*>(records.back()->records());
    for (std::size_t j = 0; j < count; ++j) flex_views[r + j]->stats = base + j;
  }
  sgd_update_kernel<<<blocks, kThreads, 0, stream>>>(args);
  FLEXKIT_CUDA_CHECK_LAUNCH("sgd_update_kernel");
  // The kernel published every record from the last block of its tensor: the targets keep
  // their statistics pending, as after an expression.
  for (std::size_t r = 0; r < records.size(); ++r) {
    const auto pending = records[r]->publish(stream, true);
    for (std::size_t j = 0; j < pending.size(); ++j)
      ArrayAccess::storage(flex_targets[r * kRecordsPerBatch + j]->array)
          .set_pending_stats(pending[j]);
  }
}

}  // namespace
}  // namespace flexkit::backend::cuda

namespace flexkit::backend {

void run_sgd_update_cuda(const SgdUpdate& update) {
  using namespace cuda;
  if (update.tensors.empty()) return;
  const Device device = update.lr.device();
  if (!device.is_cuda()) throw DeviceError("sgd update on cuda: the learning rate is not on a GPU");
  bool flex = false;
  for (const SgdTensor& t : update.tensors) {
    for (const Array* a : {&t.grad, &t.buffer.array, &t.weight.array, &t.published.array})
      check_device(*a, device);
    flex = flex || is_flex16(t.buffer) || is_flex16(t.weight) || is_flex16(t.published);
  }
  if (flex) refuse_in_capture(device.index, "a flex16 write (its statistics go to the host)");
  DeviceGuard guard(device.index);
  auto stream = static_cast<cudaStream_t>(flexkit::cuda::current_stream(device.index));
  // Enough blocks for every tensor to fill the device alone; a larger one strides.
  const int max_blocks = multiprocessors(device.index) * (2048 / kThreads);
  for (std::size_t first = 0; first < update.tensors.size(); first += kSgdMaxTensors)
    launch(update, first, std::min(update.tensors.size(), first + kSgdMaxTensors), max_blocks,
           stream);
}

}  // namespace flexkit::backend
