// Training steps captured as CUDA graphs: a replay computes what the uncaptured work computes,
// bit for bit, from new inputs; the memory a capture used stays the graph's; what a graph cannot
// repeat (host copies) and running out of memory while capturing fail with typed errors and
// leave the device usable; and whole training runs give the same weights with and without
// capture, falling back to uncaptured steps for a batch of another shape, and failing with an
// OutOfMemoryError that leaves the last checkpoint to resume from.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "flexkit/cuda.hpp"
#include "flexkit/error.hpp"
#include "flexkit/expr.hpp"
#include "flexkit/nn_io.hpp"
#include "flexkit/train.hpp"
#include "support/test_device.hpp"

namespace flexkit {
namespace {

std::vector<float> ramp(std::int64_t n, float scale, float shift) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    v[static_cast<std::size_t>(i)] = scale * std::sin(0.37f * static_cast<float>(i)) + shift;
  return v;
}

// Lifts a memory limit when a test ends, however it ends.
struct MemoryLimit {
  explicit MemoryLimit(std::size_t bytes) { cuda::set_memory_limit(0, bytes); }
  ~MemoryLimit() { cuda::set_memory_limit(0, 0); }
};

TEST(CapturedGraph, ReplaysNewInputsWithMemoryOfItsOwn) {
  const Device gpu = test::device();
  cuda::Stream stream(gpu.index);
  cuda::StreamGuard guard(stream);
  const std::int64_t n = 5000;
  Array x = Array::from_floats(ramp(n, 1.0f, 0.0f), {n}, DType::f32, gpu);
  Array y = Array::empty({n}, DType::f32, gpu);
  Array total = Array::empty({1}, DType::f32, gpu);
  const void* temporary = nullptr;
  const auto work = [&](const Array& in, const Array& out, const Array& sum_out) {
    const Array t = evaluate(exp(Expr(in)) * 2.0);  // freed before the work ends
    temporary = t.data();
    assign(out, Expr(t) - sqr(Expr(in)));
    assign(sum_out, sum(Expr(out)));
  };
  cuda::CapturedGraph graph = cuda::CapturedGraph::capture(gpu.index, [&] { work(x, y, total); });
  ASSERT_FALSE(graph.empty());
  EXPECT_GE(graph.nodes(), 3u);
  // The capture's freed temporary is not handed to anyone else while the graph lives.
  const Array other = Array::empty({n}, DType::f32, gpu);
  EXPECT_NE(other.data(), temporary);
  for (int k = 0; k < 3; ++k) {
    const std::vector<float> input = ramp(n, 1.0f + 0.5f * static_cast<float>(k), -0.25f * k);
    x.copy_from(std::span<const float>(input));
    graph.replay();
    Array y_direct = Array::empty({n}, DType::f32, gpu);
    Array total_direct = Array::empty({1}, DType::f32, gpu);
    work(x, y_direct, total_direct);
    const std::vector<float> got = y.to_floats(), direct = y_direct.to_floats();
    for (std::int64_t i = 0; i < n; ++i) {
      const double xi = input[static_cast<std::size_t>(i)];
      const double expected = 2.0 * std::exp(xi) - xi * xi;
      ASSERT_EQ(got[static_cast<std::size_t>(i)], direct[static_cast<std::size_t>(i)]) << i;
      ASSERT_NEAR(got[static_cast<std::size_t>(i)], expected, 1e-5 * (1 + std::fabs(expected)));
    }
    EXPECT_EQ(total.to_floats()[0], total_direct.to_floats()[0]);
  }
}

TEST(CapturedGraph, RefusesWhatItCannotRepeatAndLeavesTheStreamUsable) {
  const Device gpu = test::device();
  {
    // The legacy default stream cannot be captured.
    EXPECT_THROW(cuda::CapturedGraph::capture(gpu.index, [] {}), UnsupportedError);
  }
  cuda::Stream stream(gpu.index);
  cuda::StreamGuard guard(stream);
  const std::vector<float> values = ramp(64, 1.0f, 0.0f);
  try {
    cuda::CapturedGraph::capture(gpu.index, [&] {
      const Array a = Array::from_floats(values, {64}, DType::f32, gpu);  // a copy from the host
      (void)a;
    });
    FAIL() << "a copy from host memory was captured";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("host memory"), std::string::npos) << e.what();
  }
  // The stream works as before.
  const Array a = Array::from_floats(values, {64}, DType::f32, gpu);
  const std::vector<float> doubled = evaluate(Expr(a) * 2.0).to_floats();
  for (std::size_t i = 0; i < values.size(); ++i) EXPECT_EQ(doubled[i], 2.0f * values[i]);
}

TEST(CapturedGraph, OutOfMemoryWhileCapturingIsTypedAndNamesTheRequest) {
  const Device gpu = test::device();
  cuda::Stream stream(gpu.index);
  cuda::StreamGuard guard(stream);
  const Array x = Array::ones({1024}, DType::f32, gpu);
  const cuda::AllocatorStats held = cuda::allocator_stats(gpu.index);
  {
    MemoryLimit limit(held.in_use_bytes + held.cached_bytes + (1u << 20));
    try {
      cuda::CapturedGraph::capture(gpu.index, [&] {
        const Array big = Array::empty({64 << 20}, DType::f32, gpu);  // 256 MiB
        assign(big, Expr(x(slice(0, 1))) + 1.0);
      });
      FAIL() << "256 MiB past a limit were captured";
    } catch (const OutOfMemoryError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("268435456 bytes"), std::string::npos) << what;
      EXPECT_NE(what.find("capturing"), std::string::npos) << what;
    }
  }
  // Nothing is left behind: a capture and replay work as before.
  Array y = Array::empty({1024}, DType::f32, gpu);
  cuda::CapturedGraph graph =
      cuda::CapturedGraph::capture(gpu.index, [&] { assign(y, Expr(x) * 3.0); });
  graph.replay();
  for (float v : y.to_floats()) ASSERT_EQ(v, 3.0f);
}

// A small convolutional network with BatchNorm and SGD momentum (csnn's kind of step), on 300
// samples in batches of 64: four full batches and one of 44 per epoch.
nn::TrainConfig small_run(const std::string& dir, const std::string& name, bool graph) {
  nn::TrainConfig c;
  c.model = "conv(8, 3, padding=1, bias=false) bn sn maxpool(2) flatten linear(10) sn";
  c.neuron = "if";
  c.optimizer = "sgd";
  c.lr = 0.1;
  c.momentum = 0.9;
  c.schedule = "cosine";
  c.loss = "mse";
  c.time_steps = 4;
  c.epochs = 3;
  c.batch = 64;
  c.limit = 300;
  c.seed = 7;
  c.device = test::device().str();
  c.quiet = true;
  c.cuda_graph = graph;
  c.save = (std::filesystem::path(dir) / (name + ".npz")).string();
  return c;
}

std::string scratch_dir(const std::string& name) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("flexkit_captured_step_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

void expect_same_weights(const std::string& a, const std::string& b) {
  const std::map<std::string, Array> wa = nn::load_npz(a), wb = nn::load_npz(b);
  ASSERT_EQ(wa.size(), wb.size());
  std::size_t compared = 0;
  for (const auto& [name, array] : wa) {
    if (array.dtype() != DType::f32) continue;  // the model's description
    const std::vector<float> x = array.to_floats(), y = wb.at(name).to_floats();
    ASSERT_EQ(x.size(), y.size()) << name;
    for (std::size_t i = 0; i < x.size(); ++i)
      ASSERT_EQ(std::memcmp(&x[i], &y[i], sizeof(float)), 0) << name << "[" << i << "]";
    ++compared;
  }
  EXPECT_GE(compared, 4u);
}

TEST(CapturedTraining, GivesTheUncapturedWeightsBitForBit) {
  const std::string dir = scratch_dir("sgd");
  const nn::TrainResult plain = nn::train(small_run(dir, "plain", false));
  const nn::TrainResult captured = nn::train(small_run(dir, "captured", true));
  EXPECT_FALSE(plain.cuda_graph.used);
  EXPECT_EQ(plain.cuda_graph.note, "off (--cuda-graph off)");
  EXPECT_TRUE(captured.cuda_graph.used) << captured.cuda_graph.note;
  EXPECT_EQ(captured.cuda_graph.note, "");
  // Per epoch: the last batch (44) falls back and drops the graph; the next full batch runs
  // uncaptured (its kernels), the one after is captured. The first epoch settles the optimizer.
  EXPECT_EQ(captured.cuda_graph.captures, 3);
  EXPECT_EQ(captured.cuda_graph.replays, 8);
  EXPECT_EQ(captured.cuda_graph.uncaptured_steps, 7);
  EXPECT_GT(captured.cuda_graph.nodes, 20u);
  ASSERT_EQ(plain.history.size(), captured.history.size());
  for (std::size_t e = 0; e < plain.history.size(); ++e) {
    EXPECT_EQ(plain.history[e].train_loss, captured.history[e].train_loss) << e;
    EXPECT_EQ(plain.history[e].test_accuracy, captured.history[e].test_accuracy) << e;
  }
  expect_same_weights(dir + "/plain.npz", dir + "/captured.npz");
}

TEST(CapturedTraining, AdamAndDropout) {
  const std::string dir = scratch_dir("adam");
  // Adam's bias corrections change at every step: the graph reads them from the device.
  nn::TrainConfig adam = small_run(dir, "adam_plain", false);
  adam.model = "flatten linear(64) sn linear(10) sn";
  adam.neuron = "lif";
  adam.optimizer = "adam";
  adam.lr = 1e-3;
  adam.epochs = 2;
  nn::train(adam);
  adam.cuda_graph = true;
  adam.save = dir + "/adam_captured.npz";
  const nn::TrainResult captured = nn::train(adam);
  EXPECT_TRUE(captured.cuda_graph.used) << captured.cuda_graph.note;
  expect_same_weights(dir + "/adam_plain.npz", dir + "/adam_captured.npz");
  // Dropout draws its masks on the host: such a run is not captured, and says why.
  adam.model = "flatten linear(64) sn dropout(0.2) linear(10) sn";
  adam.epochs = 1;
  adam.save.clear();
  const nn::TrainResult dropout = nn::train(adam);
  EXPECT_FALSE(dropout.cuda_graph.used);
  EXPECT_NE(dropout.cuda_graph.note.find("dropout"), std::string::npos) << dropout.cuda_graph.note;
  EXPECT_EQ(dropout.cuda_graph.replays, 0);
}

TEST(CapturedTraining, OutOfMemoryWhileCapturingLeavesARunToResume) {
  const std::string dir = scratch_dir("oom");
  const nn::TrainResult reference = nn::train(small_run(dir, "reference", false));
  // Epoch 2's first step (global step 6) runs uncaptured; then the cache goes and the limit
  // leaves 1 MiB: the capture of step 7 runs out, and so does the same step uncaptured.
  nn::TrainConfig failing = small_run(dir, "failing", true);
  failing.checkpoint_dir = dir + "/checkpoints";
  failing.on_step = [](std::int64_t step) {
    if (step != 6) return;
    cuda::empty_cache();
    const cuda::AllocatorStats held = cuda::allocator_stats(0);
    cuda::set_memory_limit(0, held.in_use_bytes + (1u << 20));
  };
  try {
    nn::train(failing);
    cuda::set_memory_limit(0, 0);
    FAIL() << "the run did not run out of memory";
  } catch (const OutOfMemoryError& e) {
    cuda::set_memory_limit(0, 0);
    EXPECT_NE(std::string(e.what()).find("out of memory allocating"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/failing.npz"));
  // The first epoch's checkpoint is intact, and the run resumed from it (captured) ends with the
  // uninterrupted run's weights.
  nn::TrainConfig resumed = small_run(dir, "resumed", true);
  resumed.resume = dir + "/checkpoints/epoch-1.ckpt";
  const nn::TrainResult done = nn::train(resumed);
  EXPECT_TRUE(done.cuda_graph.used) << done.cuda_graph.note;
  EXPECT_EQ(done.history.size(), reference.history.size());
  expect_same_weights(dir + "/reference.npz", dir + "/resumed.npz");
}

}  // namespace
}  // namespace flexkit
