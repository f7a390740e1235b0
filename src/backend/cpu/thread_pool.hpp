// Splitting CPU work over the machine's cores.
#pragma once
#include <cstdint>
#include <functional>

namespace flexkit::backend::cpu {

// Number of worker threads used (FLEXKIT_NUM_THREADS, else the hardware concurrency).
int worker_count();

// Runs body(begin, end) over a partition of [0, n) into contiguous ranges, one per worker,
// and waits. Ranges depend only on n and the worker count; small n runs inline.
void parallel_for(std::int64_t n, std::int64_t min_per_worker,
                  const std::function<void(std::int64_t, std::int64_t)>& body);

}  // namespace flexkit::backend::cpu
