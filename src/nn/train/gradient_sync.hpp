// The gradient exchange of data-parallel training: after each backward (of each process's loss
// weighted by its share of the global batch), every trainable parameter's gradient becomes the
// sum over the processes, the gradient of the global batch's mean loss.
#pragma once
#include <cstddef>
#include <vector>

#include "flexkit/distributed.hpp"
#include "flexkit/nn.hpp"

namespace flexkit::nn {

class GradientSync {
 public:
  // Gradients are exchanged in buckets of about `bucket_bytes` (in the order the backward writes
  // them: the last layer's first), one collective per bucket.
  GradientSync(dist::Communicator& comm, std::vector<Parameter*> params,
               std::size_t bucket_bytes = std::size_t{25} << 20);
  void all_reduce();

 private:
  dist::Communicator& comm_;
  std::vector<std::vector<Parameter*>> buckets_;
  std::vector<float> buffer_;
};

}  // namespace flexkit::nn
