#include "backend/cpu/thread_pool.hpp"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace flexkit::backend::cpu {

int worker_count() {
  static const int count = [] {
    if (const char* env = std::getenv("FLEXKIT_NUM_THREADS")) {
      int n = std::atoi(env);
      if (n > 0) return n;
    }
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }();
  return count;
}

void parallel_for(std::int64_t n, std::int64_t min_per_worker,
                  const std::function<void(std::int64_t, std::int64_t)>& body) {
  if (n <= 0) return;
  std::int64_t workers =
      std::min<std::int64_t>(worker_count(), std::max<std::int64_t>(1, n / min_per_worker));
  if (workers <= 1) {
    body(0, n);
    return;
  }
  std::exception_ptr failure;
  std::mutex failure_mutex;
  std::vector<std::thread> threads;
  auto run = [&](std::int64_t w) {
    std::int64_t begin = n * w / workers, end = n * (w + 1) / workers;
    try {
      body(begin, end);
    } catch (...) {
      std::lock_guard<std::mutex> lock(failure_mutex);
      if (!failure) failure = std::current_exception();
    }
  };
  for (std::int64_t w = 1; w < workers; ++w) threads.emplace_back(run, w);
  run(0);
  for (auto& t : threads) t.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace flexkit::backend::cpu
