#include "nn/train/gradient_sync.hpp"

#include <algorithm>

#include "core/text.hpp"
#include "flexkit/error.hpp"

namespace flexkit::nn {

using detail::cat;

GradientSync::GradientSync(dist::Communicator& comm, std::vector<Parameter*> params,
                           std::size_t bucket_bytes)
    : comm_(comm) {
  std::size_t bytes = 0;
  for (auto it = params.rbegin(); it != params.rend(); ++it) {  // the backward's order
    const std::size_t b = static_cast<std::size_t>((*it)->value.size()) * sizeof(float);
    if (buckets_.empty() || bytes + b > bucket_bytes) {
      buckets_.emplace_back();
      bytes = 0;
    }
    buckets_.back().push_back(*it);
    bytes += b;
  }
}

void GradientSync::all_reduce() {
  for (std::size_t k = 0; k < buckets_.size(); ++k) {
    buffer_.clear();
    for (const Parameter* p : buckets_[k]) {
      if (!p->grad.defined())
        throw ValueError(cat("data-parallel step: parameter '", p->name, "' has no gradient"));
      const std::vector<float> g = p->grad.to_floats();
      buffer_.insert(buffer_.end(), g.begin(), g.end());
    }
    comm_.all_reduce_sum(
        buffer_.data(), buffer_.size(),
        cat("the gradient all-reduce (bucket ", k + 1, " of ", buckets_.size(), ")"));
    std::size_t at = 0;
    for (Parameter* p : buckets_[k]) {
      const std::size_t n = static_cast<std::size_t>(p->grad.size());
      p->grad.assign_floats(std::span<const float>(buffer_.data() + at, n));
      at += n;
    }
  }
}

}  // namespace flexkit::nn
