// The rate readout and its loss in one pass (include/flexkit/portable/rate_loss.hpp): the rates,
// the loss gradient, the batch's loss and its correct count from a network output, in one launch
// on CUDA (it can be captured in a graph) and one pass over the samples on the CPU.
#pragma once
#include "flexkit/array.hpp"
#include "flexkit/portable/rate_loss.hpp"

namespace flexkit::backend {

// Fills `args`' outputs. `args` points at arrays of `device` (each contiguous, the loss and the
// correct count one f32 each).
void run_rate_loss(const portable::RateLossArgs& args, Device device);

void run_rate_loss_cpu(const portable::RateLossArgs& args);
void run_rate_loss_cuda(const portable::RateLossArgs& args, int device);

}  // namespace flexkit::backend
