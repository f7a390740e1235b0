// The trainer's per-epoch record on the device: losses and counts written into its slots, the
// parameter checks it queues, and what a read finds — sums in double over the steps finished,
// the first step with a non-finite loss or parameter — read incrementally and cleared per epoch.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "flexkit/expr.hpp"
#include "flexkit/nn.hpp"
#include "nn/train/step_log.hpp"
#include "support/test_device.hpp"

namespace flexkit::nn {
namespace {

Parameter parameter(const char* name, std::vector<float> values) {
  Parameter p;
  p.name = name;
  const auto n = static_cast<std::int64_t>(values.size());
  p.value = Array::from_vector(values, {n}, test::device());
  return p;
}

TEST(StepLog, SumsAndFirstBadStepsAcrossReads) {
  Parameter w = parameter("w", {1.0f, -2.0f}), b = parameter("b", {0.5f});
  const std::vector<Parameter*> params{&w, &b};
  StepLog log(test::device(), 5, {"0.weight", "0.bias"});
  const float inf = std::numeric_limits<float>::infinity();
  // Step s: loss 0.25·(s + 1) over a batch of 10 (the last of 4), s + 3 correct.
  auto step = [&](std::int64_t s, float loss, std::int64_t batch) {
    log.loss_slot(s).fill(loss);
    assign(log.correct_slot(s), Expr(static_cast<double>(s + 3)));
    log.finish_step(s, batch, params);
  };
  step(0, 0.25f, 10);
  step(1, 0.5f, 10);
  StepLog::Reading r = log.read();
  EXPECT_EQ(r.steps, 2);
  EXPECT_EQ(r.samples, 20);
  EXPECT_DOUBLE_EQ(r.loss_sum, 0.25 * 10 + 0.5 * 10);
  EXPECT_DOUBLE_EQ(r.correct, 3 + 4);
  EXPECT_FALSE(r.bad_loss_step || r.bad_parameter_step);
  // The bias stops being finite after step 2, the loss at step 3; later steps change neither.
  b.value.fill(inf);
  step(2, 0.75f, 10);
  step(3, std::nanf(""), 4);
  w.value.fill(std::nanf(""));
  step(4, inf, 10);
  r = log.read();
  EXPECT_EQ(r.steps, 5);
  EXPECT_EQ(r.samples, 44);
  ASSERT_TRUE(r.bad_parameter_step && r.bad_loss_step);
  EXPECT_EQ(*r.bad_parameter_step, 2);
  EXPECT_EQ(r.bad_parameter, "0.bias");
  EXPECT_EQ(*r.bad_loss_step, 3);
  EXPECT_DOUBLE_EQ(r.correct, 3 + 4 + 5 + 6 + 7);
  // A new epoch starts from nothing; steps must come in order and fit.
  log.clear();
  EXPECT_EQ(log.read().steps, 0);
  EXPECT_THROW(log.finish_step(1, 10, params), ValueError);
  EXPECT_THROW(log.finish_step(0, 10, {&w}), ValueError);
  for (std::int64_t s = 0; s < 5; ++s) log.finish_step(s, 1, params);
  EXPECT_THROW(log.finish_step(5, 1, params), ValueError);
}

TEST(StepLog, AMasterCopyIsWhatIsChecked) {
  // flex16 stores a NaN as 0: the f32 master copy is where it shows.
  Parameter w = parameter("w", {1.0f});
  w.master = Array::from_vector(std::vector<float>{std::nanf("")}, {1}, test::device());
  StepLog log(test::device(), 1, {"w"});
  log.loss_slot(0).fill(0.0);
  log.correct_slot(0).fill(0.0);
  log.finish_step(0, 1, {&w});
  const StepLog::Reading& r = log.read();
  ASSERT_TRUE(r.bad_parameter_step);
  EXPECT_EQ(*r.bad_parameter_step, 0);
}

TEST(StepLog, StagedStepsLandInTheirOwnRows) {
  // A replayed step writes the staging row; the commit moves it to its step, and a later write
  // of the staging row leaves the committed one as it was.
  Parameter w = parameter("w", {1.0f});
  const std::vector<Parameter*> params{&w};
  StepLog log(test::device(), 4, {"w"});
  const std::int64_t staging = log.staging_row();
  EXPECT_EQ(staging, 4);
  auto staged = [&](std::int64_t s, float loss, float correct, std::int64_t batch) {
    log.loss_slot(staging).fill(loss);
    log.correct_slot(staging).fill(correct);
    log.check_parameters(staging, params);
    log.commit_staged(s, batch);
  };
  log.loss_slot(0).fill(2.0);  // step 0 the direct way
  log.correct_slot(0).fill(1.0);
  log.finish_step(0, 8, params);
  staged(1, 4.0f, 3.0f, 8);
  w.value.fill(std::nanf(""));
  staged(2, 1.0f, 5.0f, 2);
  w.value.fill(1.0);
  staged(3, 0.5f, 7.0f, 8);
  const StepLog::Reading& r = log.read();
  EXPECT_EQ(r.steps, 4);
  EXPECT_EQ(r.samples, 26);
  EXPECT_DOUBLE_EQ(r.loss_sum, 2.0 * 8 + 4.0 * 8 + 1.0 * 2 + 0.5 * 8);
  EXPECT_DOUBLE_EQ(r.correct, 1 + 3 + 5 + 7);
  ASSERT_TRUE(r.bad_parameter_step);
  EXPECT_EQ(*r.bad_parameter_step, 2);
  EXPECT_FALSE(r.bad_loss_step);
  EXPECT_THROW(log.commit_staged(5, 1), ValueError);  // no room
  log.clear();
  EXPECT_THROW(log.commit_staged(1, 1), ValueError);  // out of order
}

}  // namespace
}  // namespace flexkit::nn
