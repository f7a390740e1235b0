// ShardedWrites and the combinations of core/shard_agreement.hpp.
#include "core/shard_agreement.hpp"

#include <algorithm>
#include <vector>

#include "flexkit/autoflex.hpp"

namespace flexkit {
namespace {

thread_local ShardAgreement* t_agreement = nullptr;

// Every process's value of `mine`, in rank order (only `mine` outside a ShardedWrites).
template <typename T>
std::vector<T> gathered(const T& mine) {
  if (!t_agreement) return {mine};
  std::vector<T> all(static_cast<std::size_t>(t_agreement->processes()));
  t_agreement->all_gather(&mine, all.data(), sizeof(T));
  return all;
}

}  // namespace

ShardedWrites::ShardedWrites(ShardAgreement& agreement) : previous_(t_agreement) {
  t_agreement = &agreement;
}

ShardedWrites::~ShardedWrites() {
  t_agreement = previous_;
}

namespace detail {

bool writes_are_sharded() {
  return t_agreement != nullptr;
}

portable::Flex16Stats agreed_stats(const portable::Flex16Stats& mine) {
  portable::Flex16Stats total{0, 0, 0};
  for (const portable::Flex16Stats& s : gathered(mine)) {
    total.max_abs_m = std::max(total.max_abs_m, s.max_abs_m);
    total.saturated += s.saturated;
    total.nan_count += s.nan_count;
  }
  return total;
}

float agreed_max_abs(float mine) {
  float largest = 0;
  for (float x : gathered(mine)) largest = std::max(largest, x);
  return largest;
}

portable::GemmStats agreed_gemm_stats(const portable::GemmStats& mine) {
  portable::GemmStats total = portable::gemm_stats_identity();
  for (const portable::GemmStats& s : gathered(mine)) portable::gemm_stats_merge(total, s);
  return total;
}

}  // namespace detail
}  // namespace flexkit
