// A training step on a CUDA device, captured once as a CUDA graph and replayed: the host then
// queues one launch per step instead of a few hundred. The graph reads its batch from fixed
// input arrays (each batch is copied in first), writes its record into the step log's staging
// row (copied to the step's row after), and reads what changes from step to step (the
// learning rate, Adam's bias corrections) from the optimizer's device scalars.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "flexkit/cuda.hpp"
#include "flexkit/nn.hpp"
#include "nn/train/step_log.hpp"

namespace flexkit::nn {

// The work of one step: forward, the loss into the log's row `row`, the gradients, the
// optimizer's update (prepared with prepare_lr after the backward, if given; before the call
// otherwise), the parameter checks into the same row.
void run_step_work(Sequential& net, Optimizer& optimizer, const std::vector<Parameter*>& params,
                   LossKind loss, const Array& images, const Array& labels, StepLog& log,
                   std::int64_t row, std::optional<double> prepare_lr);

class CapturedStep {
 public:
  CapturedStep(Sequential& net, Optimizer& optimizer, std::vector<Parameter*> params, LossKind loss,
               StepLog& log, Device device);
  // One step on a batch with learning rate lr, recorded as step `step` of the epoch. Replayed
  // when a graph of this batch's shape exists; captured first once the optimizer's state has
  // settled (from the third step: the first makes the state, the second is SGD momentum's first
  // regular update) and an uncaptured step of this shape made its kernels; run uncaptured
  // before that, for a batch of another shape (the graph is
  // dropped then, its memory released), and for good once a capture fails (unavailable()
  // says why; a capture runs nothing, so that step then runs uncaptured). Errors of an
  // uncaptured step or a replay pass on.
  void run(const Array& images, const Array& labels, double lr, std::int64_t step);
  // Drops the graph and its memory.
  void release();
  // Why steps are no longer captured (a failed capture's reason); empty while they are.
  const std::string& unavailable() const { return unavailable_; }
  std::int64_t captures() const { return captures_; }
  std::int64_t replays() const { return replays_; }
  std::int64_t uncaptured() const { return uncaptured_; }
  std::size_t nodes() const { return nodes_; }

 private:
  Sequential& net_;
  Optimizer& optimizer_;
  std::vector<Parameter*> params_;
  LossKind loss_;
  StepLog& log_;
  Device device_;
  cuda::CapturedGraph graph_;
  Array images_, labels_;            // what the graph reads
  std::optional<Shape> warm_shape_;  // the batch shape of the last uncaptured step
  std::string unavailable_;
  std::int64_t captures_ = 0, replays_ = 0, uncaptured_ = 0;
  std::size_t nodes_ = 0;
};

}  // namespace flexkit::nn
