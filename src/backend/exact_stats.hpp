// The statistics an integer product's kernels hand back to the op that called them.
#pragma once
#include <memory>

#include "flexkit/portable/gemm_epilogue.hpp"

namespace flexkit::detail {
class PendingFlex16Stats;
}

namespace flexkit::gemm {

// The statistics of an integer product: `value` when known on return (the CPU, a measuring pass),
// otherwise `pending`, which a device fills and the output's first statistics read waits for
// (so a caller that never reads them never waits).
struct ExactStats {
  portable::GemmStats value = portable::gemm_stats_identity();
  std::shared_ptr<detail::PendingFlex16Stats> pending;
};
inline ExactStats known_stats(const portable::GemmStats& value) {
  return {value, nullptr};
}

}  // namespace flexkit::gemm
