#include "nn/train/step_log.hpp"

#include <cmath>

#include "backend/finite_check.hpp"
#include "core/text.hpp"
#include "flexkit/expr.hpp"

namespace flexkit::nn {

using flexkit::detail::cat;

StepLog::StepLog(Device device, std::int64_t steps, std::vector<std::string> parameter_names)
    : device_(device),
      capacity_(steps),
      parameter_names_(std::move(parameter_names)),
      record_(Array::zeros({std::max<std::int64_t>(1, steps) + 1,
                            2 + static_cast<std::int64_t>(parameter_names_.size())},
                           DType::f32, device)) {
  batches_.reserve(static_cast<std::size_t>(steps));
}

void StepLog::clear() {
  batches_.clear();
  reading_ = Reading{};
}

Array StepLog::loss_slot(std::int64_t step) const {
  return record_(step, slice(0, 1));
}

Array StepLog::correct_slot(std::int64_t step) const {
  return record_(step, slice(1, 2));
}

void StepLog::finish_step(std::int64_t step, std::int64_t batch,
                          const std::vector<Parameter*>& params) {
  if (step < 0 || step >= capacity_)
    throw ValueError(cat("step log: step ", step, " out of range (room for ", capacity_, ")"));
  check_parameters(step, params);
  note_batch(step, batch);
}

void StepLog::check_parameters(std::int64_t row, const std::vector<Parameter*>& params) {
  if (params.size() != parameter_names_.size())
    throw ValueError(cat("step log: ", params.size(), " parameters given, ",
                         parameter_names_.size(), " expected"));
  // A master copy, where there is one, is what the optimizer updates (its flex16 rounding
  // stores NaN as 0). All parameters are checked in one pass where they allow it; otherwise each
  // by an expression: NaN and infinities survive a multiplication by zero, finite values become 0.
  std::vector<Array> checked;
  for (const Parameter* p : params) checked.push_back(p->master.defined() ? p->master : p->value);
  const auto columns = static_cast<std::int64_t>(params.size());
  const Array results = record_(row, slice(2, 2 + columns));
  if (backend::finite_checkable(checked, results)) {
    backend::record_finite(checked, results);
    return;
  }
  for (std::int64_t i = 0; i < columns; ++i)
    assign(results(slice(i, i + 1)), sum(Expr(checked[static_cast<std::size_t>(i)]) * 0.0));
}

void StepLog::commit_staged(std::int64_t step, std::int64_t batch) {
  if (step < 0 || step >= capacity_)
    throw ValueError(cat("step log: step ", step, " out of range (room for ", capacity_, ")"));
  record_(step, slice()).assign(record_(staging_row(), slice()));
  note_batch(step, batch);
}

void StepLog::note_batch(std::int64_t step, std::int64_t batch) {
  if (step != static_cast<std::int64_t>(batches_.size()))
    throw ValueError(cat("step log: step ", step, " out of order (", batches_.size(),
                         " recorded, room for ", capacity_, ")"));
  batches_.push_back(batch);
}

const StepLog::Reading& StepLog::read() {
  const std::int64_t done = static_cast<std::int64_t>(batches_.size());
  if (done == reading_.steps) return reading_;
  const std::int64_t columns = record_.dim(1);
  const std::vector<float> rows = record_(slice(reading_.steps, done), slice()).to_floats();
  for (std::int64_t s = reading_.steps; s < done; ++s) {
    const float* row = rows.data() + (s - reading_.steps) * columns;
    const std::int64_t batch = batches_[static_cast<std::size_t>(s)];
    if (!std::isfinite(row[0]) && !reading_.bad_loss_step) reading_.bad_loss_step = s;
    for (std::int64_t c = 2; c < columns && !reading_.bad_parameter_step; ++c)
      if (!std::isfinite(row[c])) {
        reading_.bad_parameter_step = s;
        reading_.bad_parameter = parameter_names_[static_cast<std::size_t>(c - 2)];
      }
    reading_.loss_sum += static_cast<double>(row[0]) * static_cast<double>(batch);
    reading_.correct += static_cast<double>(row[1]);
    reading_.samples += batch;
  }
  reading_.steps = done;
  return reading_;
}

}  // namespace flexkit::nn
