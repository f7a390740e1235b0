// SGD's fused update on the CPU: every tensor cut into fixed chunks, the chunks spread over the
// cores, each element updated once (flexkit/portable/sgd.hpp). The flex16 statistics combine by
// maximum and sums, so no result depends on the thread count.
#include <algorithm>
#include <atomic>
#include <mutex>
#include <vector>

#include "backend/cpu/thread_pool.hpp"
#include "backend/sgd_update.hpp"
#include "core/storage.hpp"
#include "core/text.hpp"
#include "flexkit/error.hpp"

namespace flexkit::backend {
namespace {

using portable::Flex16Stats;

constexpr std::int64_t kChunk = 1 << 14;
constexpr std::int64_t kMinChunksPerWorker = 4;

std::int32_t sgd_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return portable::kSgdF32;
    case DType::bf16:
      return portable::kSgdBF16;
    case DType::flex16:
      return portable::kSgdFlex16;
    default:
      throw DTypeError(
          detail::cat("sgd update: ", dtype_name(dtype), " is not f32, bf16 or flex16"));
  }
}

portable::SgdTargetView target_view(const SgdTarget& t) {
  portable::SgdTargetView v{};
  if (!t.array.defined()) return v;
  v.data = t.array.data();
  v.dtype = sgd_dtype(t.array.dtype());
  if (t.array.dtype() == DType::flex16) {
    v.read_iwl = t.read_iwl;
    v.write_iwl = t.array.iwl();
    v.stochastic = t.stochastic_seed ? 1 : 0;
    v.seed = t.stochastic_seed.value_or(0);
  }
  return v;
}

std::atomic<std::int64_t> g_fused_tensors{0};

void merge(Flex16Stats& into, const Flex16Stats& s) {
  into.max_abs_m = std::max(into.max_abs_m, s.max_abs_m);
  into.saturated += s.saturated;
  into.nan_count += s.nan_count;
}

}  // namespace

void count_fused_sgd_tensors(std::int64_t tensors) {
  g_fused_tensors.fetch_add(tensors, std::memory_order_relaxed);
}

std::int64_t fused_sgd_tensor_count() {
  return g_fused_tensors.load(std::memory_order_relaxed);
}

portable::SgdTensorView sgd_view(const SgdTensor& tensor) {
  portable::SgdTensorView v{};
  v.grad = tensor.grad.data();
  v.n = tensor.grad.size();
  v.grad_dtype = sgd_dtype(tensor.grad.dtype());
  v.grad_iwl = tensor.grad.dtype() == DType::flex16 ? tensor.grad.iwl() : 0;
  v.buffer = target_view(tensor.buffer);
  v.weight = target_view(tensor.weight);
  v.published = target_view(tensor.published);
  return v;
}

portable::SgdRule sgd_rule(const SgdUpdate& update, float lr) {
  portable::SgdRule r{};
  r.momentum = static_cast<float>(update.momentum);
  r.weight_decay = static_cast<float>(update.weight_decay);
  r.lr = lr;
  r.decay = update.weight_decay != 0;
  r.momentum_buffer = update.momentum != 0;
  r.nesterov = update.nesterov;
  r.first_step = update.first_step;
  return r;
}

void run_sgd_update_cpu(const SgdUpdate& update) {
  if (update.tensors.empty()) return;
  const portable::SgdRule rule = sgd_rule(update, *static_cast<const float*>(update.lr.data()));
  std::vector<portable::SgdTensorView> views;
  std::vector<std::int64_t> first_chunk{0};  // tensor t owns chunks [first_chunk[t], [t + 1])
  for (const SgdTensor& t : update.tensors) {
    views.push_back(sgd_view(t));
    first_chunk.push_back(first_chunk.back() + (views.back().n + kChunk - 1) / kChunk);
  }
  std::vector<Flex16Stats> stats(3 * views.size(), Flex16Stats{0, 0, 0});
  std::mutex mutex;
  cpu::parallel_for(first_chunk.back(), kMinChunksPerWorker, [&](std::int64_t c0, std::int64_t c1) {
    std::vector<Flex16Stats> local(stats.size(), Flex16Stats{0, 0, 0});
    std::size_t t =
        std::upper_bound(first_chunk.begin(), first_chunk.end(), c0) - first_chunk.begin() - 1;
    for (std::int64_t c = c0; c < c1; ++c) {
      while (c >= first_chunk[t + 1]) ++t;
      const portable::SgdTensorView& v = views[t];
      const std::int64_t begin = (c - first_chunk[t]) * kChunk;
      const std::int64_t end = std::min(v.n, begin + kChunk);
      Flex16Stats* s = &local[3 * t];
      for (std::int64_t i = begin; i < end; ++i) portable::sgd_element(v, rule, i, s);
    }
    std::lock_guard<std::mutex> lock(mutex);
    for (std::size_t k = 0; k < stats.size(); ++k) merge(stats[k], local[k]);
  });
  for (std::size_t t = 0; t < update.tensors.size(); ++t) {
    const SgdTensor& tensor = update.tensors[t];
    const SgdTarget* targets[3] = {&tensor.buffer, &tensor.weight, &tensor.published};
    for (int k = 0; k < 3; ++k)
      if (targets[k]->array.defined() && targets[k]->array.dtype() == DType::flex16)
        ArrayAccess::storage(targets[k]->array).set_stats(stats[3 * t + k]);
  }
}

}  // namespace flexkit::backend
