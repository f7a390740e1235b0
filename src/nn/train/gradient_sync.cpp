#include "nn/train/gradient_sync.hpp"

#include <algorithm>

#include "core/text.hpp"
#include "flexkit/error.hpp"

namespace flexkit::nn {

using detail::cat;

GradientSync::GradientSync(dist::Communicator& comm, Sequential& net, std::size_t bucket_bytes)
    : comm_(comm) {
  std::size_t bytes = 0;
  for (std::size_t layer = net.size(); layer-- > 0;) {  // the backward's order
    std::vector<Parameter*> params = net[layer].parameters();
    for (auto it = params.rbegin(); it != params.rend(); ++it) {
      if (!(*it)->trainable) continue;
      const std::size_t b = static_cast<std::size_t>((*it)->value.size()) * sizeof(float);
      if (buckets_.empty() || bytes + b > bucket_bytes) {
        buckets_.emplace_back();
        bytes = 0;
      }
      buckets_.back().params.push_back(*it);
      buckets_.back().first_layer = layer;
      bytes += b;
    }
  }
}

void GradientSync::start(std::size_t k) {
  Bucket& bucket = buckets_[k];
  bucket.buffer.clear();
  for (const Parameter* p : bucket.params) {
    if (!p->grad.defined())
      throw ValueError(cat("data-parallel step: parameter '", p->name, "' has no gradient"));
    const std::vector<float> g = p->grad.to_floats();
    bucket.buffer.insert(bucket.buffer.end(), g.begin(), g.end());
  }
  bucket.pending = comm_.start_all_reduce_sum(
      bucket.buffer.data(), bucket.buffer.size(),
      cat("the gradient all-reduce (bucket ", k + 1, " of ", buckets_.size(), ")"));
}

void GradientSync::layer_done(std::size_t layer) {
  for (std::size_t k = 0; k < buckets_.size(); ++k) {
    Bucket& bucket = buckets_[k];
    if (bucket.pending)
      bucket.pending->progress();
    else if (bucket.first_layer >= layer)
      start(k);
  }
}

void GradientSync::finish() {
  for (std::size_t k = 0; k < buckets_.size(); ++k)
    if (!buckets_[k].pending) start(k);
  for (Bucket& bucket : buckets_) {
    bucket.pending->wait();
    bucket.pending.reset();
    std::size_t at = 0;
    for (Parameter* p : bucket.params) {
      const std::size_t n = static_cast<std::size_t>(p->grad.size());
      p->grad.assign_floats(std::span<const float>(bucket.buffer.data() + at, n));
      at += n;
    }
  }
}

}  // namespace flexkit::nn
