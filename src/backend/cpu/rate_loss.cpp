// The fused rate loss on the CPU: the samples spread over the cores, their loss terms then
// summed in sample order (the order the CUDA kernel sums them in).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/cpu/thread_pool.hpp"
#include "backend/rate_loss.hpp"

namespace flexkit::backend {

void run_rate_loss_cpu(const portable::RateLossArgs& args) {
  std::vector<double> terms(static_cast<std::size_t>(args.n));
  std::vector<unsigned char> hits(static_cast<std::size_t>(args.n));
  const std::int64_t per_sample = args.classes * args.steps;
  cpu::parallel_for(
      args.n, std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(1, per_sample)),
      [&](std::int64_t first, std::int64_t last) {
        for (std::int64_t i = first; i < last; ++i) {
          bool correct = false;
          terms[static_cast<std::size_t>(i)] = portable::rate_loss_sample(args, i, correct);
          hits[static_cast<std::size_t>(i)] = correct ? 1 : 0;
        }
      });
  double sum = 0.0;
  std::int64_t correct = 0;
  for (std::int64_t i = 0; i < args.n; ++i) {
    sum += terms[static_cast<std::size_t>(i)];
    correct += hits[static_cast<std::size_t>(i)];
  }
  *args.loss = portable::rate_loss_total(args, sum);
  *args.correct = static_cast<float>(correct);
}

}  // namespace flexkit::backend
