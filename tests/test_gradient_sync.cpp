// The data-parallel gradient exchange against a recording communicator that stands for two
// processes with the same gradients: every gradient comes back summed (doubled), each bucket's
// all-reduce starts as soon as the backward has finished its layers (before the layers below
// run), and the buckets keep the backward's order.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

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

}  // namespace
}  // namespace flexkit::nn
