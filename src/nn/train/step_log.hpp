// What a training epoch records per step on the device, so that a step never waits for it: each
// batch's loss and count of correct answers (written there by the loss itself) and, per
// trainable parameter, sum(p · 0), which is 0 while p is finite and NaN once it is not. The host
// reads the record only when it reports (a progress line, the epoch's end), sums it in double
// and finds the first step that went wrong.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "flexkit/array.hpp"
#include "flexkit/nn.hpp"

namespace flexkit::nn {

class StepLog {
 public:
  // Room for `steps` steps; `parameters` are the ones check_parameters will be given, in order.
  StepLog(Device device, std::int64_t steps, std::vector<std::string> parameter_names);
  // Back to no steps recorded (the record's memory is kept).
  void clear();
  // The one-element slots the loss of step `step` (0-based) is written into.
  Array loss_slot(std::int64_t step) const;
  Array correct_slot(std::int64_t step) const;
  // Records step `step`'s batch size and queues its parameter checks.
  void finish_step(std::int64_t step, std::int64_t batch, const std::vector<Parameter*>& params);

  // A captured step writes the same row every time, this one: its loss and correct slots are
  // loss_slot(staging_row()) and correct_slot(staging_row()), and it queues its parameter
  // checks with check_parameters(staging_row(), ...). commit_staged then copies the row (on
  // the device) to step `step` and records the batch size, as finish_step would.
  std::int64_t staging_row() const { return capacity_; }
  void check_parameters(std::int64_t row, const std::vector<Parameter*>& params);
  void commit_staged(std::int64_t step, std::int64_t batch);
  // Records step `step`'s batch size alone (its row written by the step's own checks).
  void note_batch(std::int64_t step, std::int64_t batch);

  struct Reading {
    std::int64_t steps = 0;    // steps read so far
    std::int64_t samples = 0;  // their samples
    double loss_sum = 0;       // sum of loss · batch
    double correct = 0;
    // The first step (0-based) whose loss was not finite, and the first whose parameters were
    // not (with the parameter's name), if any.
    std::optional<std::int64_t> bad_loss_step, bad_parameter_step;
    std::string bad_parameter;
  };
  // Reads the steps finished since the last read (waiting for the device) and returns the
  // totals since clear().
  const Reading& read();

 private:
  Device device_;
  std::int64_t capacity_;
  std::vector<std::string> parameter_names_;
  Array record_;  // f32 (steps + 1, 2 + parameters): loss, correct, one check per parameter
  std::vector<std::int64_t> batches_;
  Reading reading_;
};

}  // namespace flexkit::nn
