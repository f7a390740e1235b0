// How every heavy operation (dot, conv fprop / bprop / update) picks its kernel, on every backend,
// in the manner of CUTLASS's device adapters:
//
//   problem description (gemm_problem.hpp, conv_problem.hpp)
//     → each candidate kernel's can_implement(problem): yes, or a short reason why not
//     → a plan (kernel, tiles, splits, workspace), made once per problem class and cached
//     → run(plan, problem, stream)
//
// The candidates are tried in a fixed order (fastest measured first) and the first that applies
// is planned, so that the choice is made up front, never by a launch that gives up. This header
// holds what the backends share: the plan's public face, the cache, and the FLEXKIT_LOG line.
// Each backend keeps its own candidates and its own plan type (derived from HeavyOpPlan).
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

namespace flexkit::backend {

// A candidate kernel's answer for a problem: it applies (reason null), or why not.
struct CanImplement {
  const char* reason = nullptr;  // a short literal, e.g. "device is not sm_90"
  bool ok() const { return reason == nullptr; }
};
inline constexpr CanImplement kCanImplement{};
inline constexpr CanImplement cannot(const char* reason) {
  return CanImplement{reason};
}

// The public face of a plan: what kernel_name(), the log and the tests see.
struct HeavyOpPlan {
  std::string kernel_name;          // stable and short, listed in docs/kernels.md
  std::size_t workspace_bytes = 0;  // device or host scratch one run takes
  std::string choices;              // the kernel's own settings: "tile 128x128 splits 2"
  std::string passed_over;          // earlier candidates and why they did not apply

  // Records that `kernel` was tried before and did not apply.
  void pass_over(std::string_view kernel, const CanImplement& answer);
  // "cuda.planar tile 128x128 splits 2, workspace 1.00 MiB (passed over cuda.ss: ...)".
  std::string describe() const;
};

// FLEXKIT_LOG=1: every new plan prints one line to stderr (read once per process).
bool log_enabled();
// "flexkit: <operation> <plan.describe()> for <problem>".
void log_plan(std::string_view operation, const HeavyOpPlan& plan, std::string_view problem);

struct PlanCounts {
  std::uint64_t made = 0;
  std::uint64_t hits = 0;
};

// A process-wide cache of plans by problem class. Key needs operator< and a describe() naming
// the class for the log; Plan derives from HeavyOpPlan. Plans are made under the cache's lock
// (each is made once) and never move, so references to them stay valid.
template <typename Key, typename Plan>
class PlanCache {
 public:
  explicit PlanCache(const char* operation) : operation_(operation) {}

  template <typename Make>
  const Plan& get(const Key& key, Make&& make) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = plans_.find(key); it != plans_.end()) {
      ++counts_.hits;
      return it->second;
    }
    const Plan& plan = plans_.emplace(key, std::forward<Make>(make)()).first->second;
    ++counts_.made;
    if (log_enabled()) log_plan(operation_, plan, key.describe());
    return plan;
  }

  PlanCounts counts() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return counts_;
  }

 private:
  const char* operation_;
  mutable std::mutex mutex_;
  std::map<Key, Plan> plans_;
  PlanCounts counts_;
};

}  // namespace flexkit::backend
