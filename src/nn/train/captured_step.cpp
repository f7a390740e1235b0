#include "nn/train/captured_step.hpp"

#include "core/text.hpp"
#include "flexkit/error.hpp"

namespace flexkit::nn {

using flexkit::detail::cat;

void run_step_work(Sequential& net, Optimizer& optimizer, const std::vector<Parameter*>& params,
                   LossKind loss, const Array& images, const Array& labels, StepLog& log,
                   std::int64_t row, std::optional<double> prepare_lr) {
  const Array out = net.forward(images);
  const DeviceLossResult result =
      rate_loss_on_device(out, labels, loss, log.loss_slot(row), log.correct_slot(row));
  net.zero_grad();
  net.backward(result.grad_output);
  if (prepare_lr) optimizer.prepare(params, *prepare_lr);
  optimizer.update(params);
  log.check_parameters(row, params);
}

CapturedStep::CapturedStep(Sequential& net, Optimizer& optimizer, std::vector<Parameter*> params,
                           LossKind loss, StepLog& log, Device device)
    : net_(net),
      optimizer_(optimizer),
      params_(std::move(params)),
      loss_(loss),
      log_(log),
      device_(device) {
  if (!device.is_cuda())
    throw UnsupportedError(cat("CapturedStep: CUDA graphs need a CUDA device, not ", device.str()));
}

void CapturedStep::release() {
  graph_.reset();
  images_ = Array();
  labels_ = Array();
}

void CapturedStep::run(const Array& images, const Array& labels, double lr, std::int64_t step) {
  const std::int64_t batch = labels.dim(0);
  if (!graph_.empty() && images.shape() != images_.shape()) release();  // another batch shape
  // A capture compiles nothing: its kernels were made by an uncaptured step of its shape.
  if (graph_.empty() && (!unavailable_.empty() || optimizer_.steps() < 2 || !warm_shape_ ||
                         *warm_shape_ != images.shape())) {
    // Uncaptured, with the kernels and values of the captured step (the optimizer's first step
    // makes its state from the gradients' formats, so it is prepared after the backward).
    run_step_work(net_, optimizer_, params_, loss_, images, labels, log_, step, lr);
    log_.note_batch(step, batch);
    warm_shape_ = images.shape();
    ++uncaptured_;
    return;
  }
  const bool capture = graph_.empty();
  if (capture) {
    images_ = Array::empty(images.shape(), images.dtype(), device_);
    labels_ = Array::empty(labels.shape(), labels.dtype(), device_);
  }
  images_.assign(images);
  labels_.assign(labels);
  optimizer_.prepare(params_, lr);
  if (capture) {
    try {
      graph_ = cuda::CapturedGraph::capture(device_.index, [&] {
        run_step_work(net_, optimizer_, params_, loss_, images_, labels_, log_, log_.staging_row(),
                      std::nullopt);
      });
    } catch (const UnsupportedError& e) {
      unavailable_ = e.what();
    } catch (const OutOfMemoryError& e) {
      unavailable_ = e.what();
    }
    if (graph_.empty()) {
      // The capture ran nothing: this step goes the uncaptured way, its update prepared.
      release();
      run_step_work(net_, optimizer_, params_, loss_, images, labels, log_, step, std::nullopt);
      log_.note_batch(step, batch);
      ++uncaptured_;
      return;
    }
    ++captures_;
    nodes_ = graph_.nodes();
  }
  graph_.replay();
  ++replays_;
  log_.commit_staged(step, batch);
}

}  // namespace flexkit::nn
