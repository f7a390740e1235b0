// The gradient exchange of data-parallel training: after the backward of each process's loss
// (weighted by its share of the global batch), every trainable parameter's gradient becomes the
// sum over the processes, the gradient of the global batch's mean loss.
//
// As PyTorch's DDP: the gradients go in buckets of about 25 MB in the order the backward writes
// them (the last layer's first), and a bucket's all-reduce starts as soon as the backward has
// finished its layers, so that the exchange overlaps the backward of the layers before them.
//
// f32 gradients are summed as floats (MPI's reduction order). Layers under
// Layer::set_gradient_sums (flex16) leave exact integer sums instead: those are summed as
// integers, which no order changes, and each total is then rounded once into the gradient, as
// one process rounds the whole batch's: the same gradients, bit for bit, on any number of
// processes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "flexkit/distributed.hpp"
#include "flexkit/nn.hpp"

namespace flexkit::nn {

class GradientSync {
 public:
  // Exact integer sums when the network's layers are under set_gradient_sums (then every layer
  // with trainable parameters must be), floats otherwise.
  GradientSync(dist::Communicator& comm, Sequential& net,
               std::size_t bucket_bytes = std::size_t{25} << 20);
  // Sequential::backward's layer_done: starts every bucket whose layers are all done.
  void layer_done(std::size_t layer);
  // After the backward: starts what is left, waits for every bucket and writes the sums back.
  void finish();

 private:
  struct Bucket {
    std::vector<Parameter*> params;
    std::size_t first_layer = 0;  // the lowest layer index among its parameters'
    std::vector<float> buffer;
    std::vector<std::int64_t> sums;
    std::unique_ptr<dist::Communicator::Pending> pending;
  };
  void start(std::size_t k);
  dist::Communicator& comm_;
  bool exact_ = false;
  std::vector<Bucket> buckets_;
};

}  // namespace flexkit::nn
