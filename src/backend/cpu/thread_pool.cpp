// A process-wide pool of worker threads, started on first use and kept: creating threads on
// every call cost more than the work of a small matrix product or expression.
#include "backend/cpu/thread_pool.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/environment.hpp"

namespace flexkit::backend::cpu {

int worker_count() {
  static const int count = [] {
    // A positive FLEXKIT_NUM_THREADS sets the count; anything else keeps the hardware's.
    if (const std::optional<std::string> env = detail::env_value("FLEXKIT_NUM_THREADS")) {
      const int n = std::atoi(env->c_str());
      if (n > 0) return n;
    }
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }();
  return count;
}

namespace {

thread_local bool t_inside_pool_job = false;

// Runs job(part) for part in [0, parts) with the calling thread taking part 0 and worker w
// taking part w. One job at a time; a parallel_for issued from inside a job runs inline.
class Pool {
 public:
  explicit Pool(int workers) {
    for (int w = 1; w < workers; ++w) threads_.emplace_back([this, w] { serve(w); });
  }

  void run(int parts, const std::function<void(int)>& job) {
    std::lock_guard<std::mutex> one_job(submit_);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = &job;
      parts_ = parts;
      pending_ = parts - 1;
      ++generation_;
    }
    wake_.notify_all();
    t_inside_pool_job = true;
    job(0);
    t_inside_pool_job = false;
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return pending_ == 0; });
    job_ = nullptr;
  }

 private:
  void serve(int w) {
    t_inside_pool_job = true;
    std::uint64_t seen = 0;
    for (;;) {
      const std::function<void(int)>* job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return generation_ != seen; });
        seen = generation_;
        if (w >= parts_) continue;
        job = job_;
      }
      (*job)(w);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        --pending_;
      }
      done_.notify_one();
    }
  }

  std::mutex submit_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> threads_;
  const std::function<void(int)>* job_ = nullptr;
  int parts_ = 0;
  int pending_ = 0;
  std::uint64_t generation_ = 0;
};

Pool& pool() {
  // Never destroyed: workers blocked on the condition variable must not be joined at exit.
  static Pool* instance = new Pool(worker_count());
  return *instance;
}

}  // namespace

void parallel_for(std::int64_t n, std::int64_t min_per_worker,
                  const std::function<void(std::int64_t, std::int64_t)>& body) {
  if (n <= 0) return;
  std::int64_t workers =
      std::min<std::int64_t>(worker_count(), std::max<std::int64_t>(1, n / min_per_worker));
  if (workers <= 1 || t_inside_pool_job) {
    body(0, n);
    return;
  }
  std::exception_ptr failure;
  std::mutex failure_mutex;
  pool().run(static_cast<int>(workers), [&](int w) {
    std::int64_t begin = n * w / workers, end = n * (w + 1) / workers;
    try {
      body(begin, end);
    } catch (...) {
      std::lock_guard<std::mutex> lock(failure_mutex);
      if (!failure) failure = std::current_exception();
    }
  });
  if (failure) std::rethrow_exception(failure);
}

}  // namespace flexkit::backend::cpu
