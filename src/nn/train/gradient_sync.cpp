#include "nn/train/gradient_sync.hpp"

#include <algorithm>

#include "core/text.hpp"
#include "flexkit/error.hpp"
#include "gemm/exact_sums.hpp"

namespace flexkit::nn {

using detail::cat;

GradientSync::GradientSync(dist::Communicator& comm, Sequential& net, std::size_t bucket_bytes)
    : comm_(comm) {
  for (std::size_t layer = 0; layer < net.size(); ++layer) exact_ |= net[layer].gradient_sums();
  const std::size_t element = exact_ ? sizeof(std::int64_t) : sizeof(float);
  std::size_t bytes = 0;
  for (std::size_t layer = net.size(); layer-- > 0;) {  // the backward's order
    std::vector<Parameter*> params = net[layer].parameters();
    for (auto it = params.rbegin(); it != params.rend(); ++it) {
      if (!(*it)->trainable) continue;
      if (exact_ && !net[layer].gradient_sums())
        throw ValueError(cat("data-parallel step: layer ", layer, " (", net[layer].describe(),
                             ") does not leave exact gradient sums, unlike the others"));
      const std::size_t b = static_cast<std::size_t>((*it)->value.size()) * element;
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
  const std::string what = cat("the gradient all-reduce (bucket ", k + 1, " of ", buckets_.size(),
                               exact_ ? ", exact integer sums)" : ")");
  if (exact_) {
    bucket.sums.clear();
    for (const Parameter* p : bucket.params) {
      if (!p->grad_sums)
        throw ValueError(cat("data-parallel step: parameter '", p->name, "' has no gradient sums"));
      const std::vector<std::int64_t>& v = p->grad_sums->values;
      bucket.sums.insert(bucket.sums.end(), v.begin(), v.end());
    }
    bucket.pending = comm_.start_all_reduce_sum(bucket.sums.data(), bucket.sums.size(), what);
    return;
  }
  bucket.buffer.clear();
  for (const Parameter* p : bucket.params) {
    if (!p->grad.defined())
      throw ValueError(cat("data-parallel step: parameter '", p->name, "' has no gradient"));
    const std::vector<float> g = p->grad.to_floats();
    bucket.buffer.insert(bucket.buffer.end(), g.begin(), g.end());
  }
  bucket.pending = comm_.start_all_reduce_sum(bucket.buffer.data(), bucket.buffer.size(), what);
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
      const std::size_t n = static_cast<std::size_t>(p->value.size());
      if (exact_) {
        // The one rounding, as the layer's own product rounds a single process's gradient
        // (added to the cleared gradient under its manager).
        gemm::ExactSums& total = *p->grad_sums;
        std::copy_n(bucket.sums.begin() + static_cast<std::ptrdiff_t>(at), n, total.values.begin());
        HeavyOpOptions options;
        options.beta = 1.0;
        if (p->grad.dtype() == DType::flex16) options.iwl_policy = IwlPolicy::autoflex;
        gemm::store_exact_sums(total, p->grad.reshape({total.m, total.n}), options);
        p->grad_sums.reset();
      } else {
        p->grad.assign_floats(std::span<const float>(bucket.buffer.data() + at, n));
      }
      p->grad_zeroed = false;
      at += n;
    }
  }
}

}  // namespace flexkit::nn
