// The data-parallel gradient exchange against a recording communicator that stands for two
// processes with the same gradients: every gradient comes back summed (doubled), each bucket's
// all-reduce starts as soon as the backward has finished its layers (before the layers below
// run), and the buckets keep the backward's order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "flexkit/error.hpp"
#include "flexkit/nn.hpp"
#include "nn/train/gradient_sync.hpp"
#include "support/test_device.hpp"

namespace flexkit::nn {
namespace {

// As if a second process sent the same values: a sum doubles them. Records what happened when.
class TwinCommunicator final : public dist::Communicator {
 public:
  std::vector<std::string> events;
  int rank() const override { return 0; }
  int size() const override { return 2; }
  int local_rank() const override { return 0; }
  void all_reduce_sum(float* d, std::size_t n, const std::string&) override { twice(d, n); }
  void all_reduce_sum(double* d, std::size_t n, const std::string&) override { twice(d, n); }
  void all_reduce_sum(std::int64_t* d, std::size_t n, const std::string&) override { twice(d, n); }
  std::unique_ptr<Pending> start_all_reduce_sum(float* data, std::size_t count,
                                                const std::string& what) override {
    events.push_back("start " + std::to_string(count));
    struct Late final : Pending {
      Late(float* d, std::size_t n, std::vector<std::string>& e) : d(d), n(n), e(e) {}
      void progress() override {}
      void wait() override {
        for (std::size_t i = 0; i < n; ++i) d[i] *= 2;
        e.push_back("wait " + std::to_string(n));
      }
      float* d;
      std::size_t n;
      std::vector<std::string>& e;
    };
    (void)what;
    return std::make_unique<Late>(data, count, events);
  }
  std::unique_ptr<Pending> start_all_reduce_sum(std::int64_t* data, std::size_t count,
                                                const std::string&) override {
    events.push_back("start sums " + std::to_string(count));
    twice(data, count);  // completed at once: the order checks are the float test's
    struct Done final : Pending {
      void progress() override {}
      void wait() override {}
    };
    return std::make_unique<Done>();
  }
  void all_gather(const void*, void*, std::size_t, const std::string&) override {}
  void broadcast(void*, std::size_t, int, const std::string&) override {}
  [[noreturn]] void abort(int) override { std::abort(); }

 private:
  template <class T>
  static void twice(T* d, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) d[i] *= 2;
  }
};

TEST(GradientSync, SumsInBucketsStartedAsTheBackwardGoes) {
  Sequential net;
  net.add(std::make_unique<Linear>(6, 5, true));   // 30 + 5 values
  net.add(std::make_unique<Linear>(5, 4, false));  // 20
  net.add(std::make_unique<Linear>(4, 3, true));   // 12 + 3
  net.to(test::device());
  Rng rng(3);
  net.reset_parameters(rng);
  net.zero_grad();
  TwinCommunicator comm;
  // Buckets of at most 80 bytes (20 floats): {layer 2's bias and weight}, {layer 1's weight},
  // {layer 0's bias}, {layer 0's weight} (a parameter larger than a bucket has one of its own).
  GradientSync sync(comm, net, 80);
  const Array x = Array::full({6, 2, 3}, 0.5, DType::f32, test::device());
  const Array y = net.forward(x);
  std::vector<std::vector<float>> before;
  net.backward(Array::full(y.shape(), 1.0, DType::f32, test::device()), [&](std::size_t layer) {
    comm.events.push_back("layer " + std::to_string(layer));
    sync.layer_done(layer);
  });
  for (Parameter* p : net.parameters()) before.push_back(p->grad.to_floats());
  sync.finish();
  const std::vector<std::string> want = {"layer 2", "start 15", "layer 1",  "start 20",
                                         "layer 0", "start 5",  "start 30", "wait 15",
                                         "wait 20", "wait 5",   "wait 30"};
  EXPECT_EQ(comm.events, want);
  std::size_t i = 0;
  double largest = 0;
  for (Parameter* p : net.parameters()) {
    const std::vector<float> after = p->grad.to_floats();
    ASSERT_EQ(after.size(), before[i].size());
    for (std::size_t j = 0; j < after.size(); ++j) {
      EXPECT_EQ(after[j], 2 * before[i][j]) << p->name << "[" << j << "]";
      largest = std::max(largest, static_cast<double>(std::abs(after[j])));
    }
    ++i;
  }
  EXPECT_GT(largest, 0);
}

// Two processes with the same shard are one process with that shard twice: flex16 gradients
// left as exact sums and summed by the twin must equal, bit for bit, one network's gradients
// for the batch repeated (whose tensors have the same ranges, so the same exponents).
TEST(GradientSync, Flex16ExactSumsEqualTheWholeBatchBitForBit) {
  auto make = [] {
    Sequential net;
    net.add(std::make_unique<Linear>(6, 5, true));
    net.add(std::make_unique<Linear>(5, 3, true));
    net.to(test::device());
    Rng rng(7);
    net.reset_parameters(rng);
    net.set_precision({DType::flex16, false});
    net.zero_grad();
    return net;
  };
  Sequential shard_net = make(), whole_net = make();
  std::vector<float> x(6 * 2 * 3), g(3 * 2 * 3);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7) % 11) / 8 - 0.6f;
  for (std::size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>((i * 5) % 9) / 16 - 0.25f;
  // The batch is innermost: the whole batch is each (feature, step) row twice.
  auto twice_along_batch = [](const std::vector<float>& v, std::int64_t rows) {
    std::vector<float> out;
    for (std::int64_t r = 0; r < rows; ++r)
      for (int copy = 0; copy < 2; ++copy)
        out.insert(out.end(), v.begin() + r * 3, v.begin() + r * 3 + 3);
    return out;
  };
  const Device d = test::device();
  for (std::size_t layer = 0; layer < shard_net.size(); ++layer)
    shard_net[layer].set_gradient_sums(true);
  TwinCommunicator comm;
  GradientSync sync(comm, shard_net);
  shard_net.forward(Array::from_floats(x, {6, 2, 3}, DType::f32, d));
  shard_net.backward(Array::from_floats(g, {3, 2, 3}, DType::f32, d),
                     [&](std::size_t layer) { sync.layer_done(layer); });
  for (Parameter* p : shard_net.parameters()) {
    EXPECT_TRUE(p->grad_sums) << p->name;
    EXPECT_EQ(p->grad.to_floats(), std::vector<float>(p->grad.size(), 0.0f)) << p->name;
  }
  sync.finish();
  whole_net.forward(Array::from_floats(twice_along_batch(x, 12), {6, 2, 6}, DType::f32, d));
  whole_net.backward(Array::from_floats(twice_along_batch(g, 6), {3, 2, 6}, DType::f32, d));
  const auto shard_params = shard_net.parameters(), whole_params = whole_net.parameters();
  double largest = 0;
  for (std::size_t i = 0; i < shard_params.size(); ++i) {
    const Array& a = shard_params[i]->grad;
    const Array& b = whole_params[i]->grad;
    ASSERT_EQ(a.dtype(), DType::flex16);
    EXPECT_FALSE(shard_params[i]->grad_sums);
    EXPECT_EQ(a.iwl(), b.iwl()) << shard_params[i]->name;
    EXPECT_EQ(a.to_vector<std::int16_t>(), b.to_vector<std::int16_t>()) << shard_params[i]->name;
    for (float v : b.to_floats()) largest = std::max(largest, static_cast<double>(std::abs(v)));
  }
  EXPECT_GT(largest, 0);
  // One bucket of integers: 15 + 3 + 30 + 5 values.
  EXPECT_EQ(comm.events, std::vector<std::string>{"start sums 53"});
}

TEST(GradientSync, LayersWithoutExactGradientsRefuseSums) {
  BatchNorm bn(4);
  EXPECT_THROW(bn.set_gradient_sums(true), UnsupportedError);
  Linear linear(3, 2);
  EXPECT_NO_THROW(linear.set_gradient_sums(true));
  EXPECT_TRUE(linear.gradient_sums());
}

}  // namespace
}  // namespace flexkit::nn
