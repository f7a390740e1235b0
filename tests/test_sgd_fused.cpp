// SGD's fused update (one pass per tensor, one launch per 16 tensors on CUDA) against the
// per-tensor expressions it replaces: two copies of the same parameters, one with every gradient
// a strided view (which the fused pass does not take, so its updates run as expressions), step
// after step, compared bit for bit: values, master copies, momentum buffers, flex16 exponents,
// the last write's statistics and every Autoflex manager's history. The f32 runs are also
// checked against momentum SGD computed in double.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/sgd_update.hpp"
#include "flexkit/autoflex.hpp"
#include "flexkit/expr.hpp"
#include "flexkit/nn.hpp"
#include "support/random_arrays.hpp"
#include "support/test_device.hpp"

namespace flexkit::nn {
namespace {

struct Config {
  DType value = DType::f32;  // flex16: flex16 values (and gradients, and so state)
  DType grad = DType::f32;
  bool master = false;  // flex16 values with f32 master copies
  double momentum = 0.9, weight_decay = 0;
  bool nesterov = false;
  Rounding rounding = Rounding::nearest_even;
  std::vector<Shape> shapes = {{3}, {7, 5}, {1}, {2, 3, 4}, {64, 33}, {300, 257}, {1025}};
  int steps = 7;
};

AssignOptions write_options(DType dtype) {
  AssignOptions o;
  if (dtype == DType::flex16) o.iwl_policy = IwlPolicy::autoflex;
  return o;
}

// One copy of the parameters and its optimizer. `strided`: gradients are views of every other
// element of a larger array (contiguous otherwise, except for the parameter `strided_one`).
class Model {
 public:
  Model(const Config& s, bool strided, std::size_t strided_one) : s_(s) {
    OptimizerOptions o;
    o.momentum = s.momentum;
    o.nesterov = s.nesterov;
    o.weight_decay = s.weight_decay;
    o.rounding = s.rounding;
    o.rounding_seed = 99;
    optimizer_ = make_optimizer("sgd", o);
    for (std::size_t i = 0; i < s.shapes.size(); ++i) {
      const Shape& shape = s.shapes[i];
      const auto n = static_cast<std::size_t>(shape_numel(shape));
      const Array init =
          Array::from_floats(test::uniform_values(n, 10 + static_cast<unsigned>(i), -1.0f, 1.0f),
                             shape, DType::f32, test::device());
      Parameter p;
      p.name = "p";
      p.name += std::to_string(i);
      p.value = Array::empty(shape, s.value, test::device());
      assign(p.value, Expr(init), write_options(s.value));
      if (s.master) p.master = init.clone();
      if (strided || i == strided_one) {
        Shape wide = shape;
        wide.push_back(2);
        p.grad = Array::zeros(wide, s.grad, test::device())(ellipsis, 0);
      } else {
        p.grad = Array::zeros(shape, s.grad, test::device());
      }
      params_.push_back(std::move(p));
    }
  }

  void step(int k) {
    // Gradient scales that move the exponents up and down between steps.
    static const float kScales[] = {0.05f, 2.0f, 0.01f, 8.0f, 0.3f, 0.002f, 1.0f, 20.0f};
    std::vector<Parameter*> pointers;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      Parameter& p = params_[i];
      const auto n = static_cast<std::size_t>(p.value.size());
      const float scale = kScales[(k + i) % 8];
      const Array g = Array::from_floats(
          test::uniform_values(n, 1000 * static_cast<unsigned>(k) + static_cast<unsigned>(i),
                               -scale, scale),
          p.value.shape(), DType::f32, test::device());
      assign(p.grad, Expr(g), write_options(p.grad.dtype()));
      pointers.push_back(&p);
    }
    optimizer_->step(pointers, 0.1 + 0.01 * k);
  }

  std::vector<Parameter>& params() { return params_; }
  std::vector<Array> buffers() const { return optimizer_->state(); }

 private:
  Config s_;
  std::vector<Parameter> params_;
  std::unique_ptr<Optimizer> optimizer_;
};

void expect_same_manager(const Autoflex& a, const Autoflex& b, const std::string& what) {
  const portable::AutoflexState& x = a.state();
  const portable::AutoflexState& y = b.state();
  EXPECT_EQ(x.iwl, y.iwl) << what;
  EXPECT_EQ(x.writes, y.writes) << what;
  EXPECT_EQ(x.count, y.count) << what;
  EXPECT_EQ(x.head, y.head) << what;
  EXPECT_EQ(x.overflows, y.overflows) << what;
  EXPECT_EQ(x.clamped, y.clamped) << what;
  EXPECT_EQ(x.min_iwl, y.min_iwl) << what;
  EXPECT_EQ(x.max_iwl, y.max_iwl) << what;
  EXPECT_EQ(x.saturated, y.saturated) << what;
  EXPECT_EQ(x.nan_count, y.nan_count) << what;
  for (int i = 0; i < portable::kAutoflexWindow; ++i)
    EXPECT_EQ(std::memcmp(&x.window[i], &y.window[i], sizeof(float)), 0) << what << " window " << i;
}

// The same bits, exponent, last-write statistics and manager history.
void expect_same(const Array& a, const Array& b, const std::string& what) {
  ASSERT_EQ(a.defined(), b.defined()) << what;
  if (!a.defined()) return;
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  if (a.dtype() == DType::flex16) {
    ASSERT_EQ(a.iwl(), b.iwl()) << what;
    ASSERT_EQ(a.to_vector<std::int16_t>(), b.to_vector<std::int16_t>()) << what;
    const Flex16Stats x = a.stats(), y = b.stats();
    EXPECT_EQ(x.max_abs_m, y.max_abs_m) << what;
    EXPECT_EQ(x.saturated, y.saturated) << what;
    EXPECT_EQ(x.nan_count, y.nan_count) << what;
    expect_same_manager(a.autoflex(), b.autoflex(), what);
    return;
  }
  const std::vector<float> x = a.to_floats(), y = b.to_floats();
  ASSERT_EQ(x.size(), y.size()) << what;
  for (std::size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(std::memcmp(&x[i], &y[i], sizeof(float)), 0)
        << what << "[" << i << "]: " << x[i] << " vs " << y[i];
}

// Runs the setup fused and through the expressions and compares after every step.
void compare(const Config& s) {
  // The fused copy's parameter 1 has a strided gradient too: a mixed update.
  Model fused(s, false, 1), expressions(s, true, 1);
  // A one-element gradient is contiguous however it is viewed: those are fused in both copies.
  std::int64_t single = 0;
  for (const Shape& shape : s.shapes) single += shape_numel(shape) == 1 ? 1 : 0;
  std::int64_t fused_tensors = 0;
  for (int k = 0; k < s.steps; ++k) {
    const std::int64_t before = backend::fused_sgd_tensor_count();
    fused.step(k);
    const std::int64_t between = backend::fused_sgd_tensor_count();
    expressions.step(k);
    fused_tensors += between - before;
    ASSERT_LE(backend::fused_sgd_tensor_count() - between, single)
        << "the reference copy fused an update of a strided gradient";
    const std::string at = " after step " + std::to_string(k + 1);
    for (std::size_t i = 0; i < s.shapes.size(); ++i) {
      const Parameter& a = fused.params()[i];
      const Parameter& b = expressions.params()[i];
      expect_same(a.grad, b.grad, a.name + ".grad" + at);  // the same inputs
      expect_same(a.value, b.value, a.name + ".value" + at);
      expect_same(a.master, b.master, a.name + ".master" + at);
    }
    const std::vector<Array> x = fused.buffers(), y = expressions.buffers();
    ASSERT_EQ(x.size(), y.size());
    for (std::size_t i = 0; i < x.size(); ++i)
      expect_same(x[i], y[i], "buffer " + std::to_string(i) + at);
    if (::testing::Test::HasFatalFailure()) return;
  }
  // All but the strided parameter from the second step on (a flex16 target's first write, at
  // the first step, is exact and takes the expressions).
  EXPECT_GE(fused_tensors, static_cast<std::int64_t>((s.steps - 1) * (s.shapes.size() - 1)))
      << "the fused path did not run: the comparison is between two expression paths";
}

TEST(SgdFused, F32Momentum) {
  compare({});
}

TEST(SgdFused, F32WithoutMomentumWithDecay) {
  Config s;
  s.momentum = 0;
  s.weight_decay = 1e-3;
  compare(s);
}

TEST(SgdFused, F32NesterovWithDecay) {
  Config s;
  s.nesterov = true;
  s.weight_decay = 5e-4;
  compare(s);
}

TEST(SgdFused, Bf16Gradients) {
  Config s;
  s.grad = DType::bf16;  // and so bf16 momentum buffers
  s.weight_decay = 1e-4;
  compare(s);
}

TEST(SgdFused, Flex16MasterNearest) {
  Config s;
  s.value = s.grad = DType::flex16;
  s.master = true;
  s.weight_decay = 1e-4;
  compare(s);
}

TEST(SgdFused, Flex16MasterStochasticNesterov) {
  Config s;
  s.value = s.grad = DType::flex16;
  s.master = true;
  s.nesterov = true;
  s.rounding = Rounding::stochastic;
  compare(s);
}

TEST(SgdFused, Flex16MasterStochasticWithoutMomentum) {
  Config s;
  s.value = s.grad = DType::flex16;
  s.master = true;
  s.momentum = 0;
  s.weight_decay = 1e-3;
  s.rounding = Rounding::stochastic;
  compare(s);
}

TEST(SgdFused, Flex16WeightsUpdatedInPlace) {
  Config s;
  s.value = s.grad = DType::flex16;
  s.rounding = Rounding::stochastic;
  s.weight_decay = 1e-4;
  compare(s);
}

// More tensors than one CUDA launch takes, and more flex16 outputs than one statistics batch.
TEST(SgdFused, ManyTensors) {
  Config s;
  s.value = s.grad = DType::flex16;
  s.master = true;
  s.rounding = Rounding::stochastic;
  s.shapes.clear();
  for (int i = 0; i < 37; ++i) s.shapes.push_back({1 + 29 * i % 301});
  s.steps = 5;
  compare(s);
  s.value = s.grad = DType::f32;
  s.master = false;
  compare(s);
}

// The values themselves: momentum SGD in double from the same gradients.
TEST(SgdFused, F32FollowsMomentumSgdInDouble) {
  for (const bool nesterov : {false, true}) {
    Config s;
    s.nesterov = nesterov;
    s.weight_decay = 1e-2;
    Model run(s, false, s.shapes.size());
    std::vector<std::vector<double>> w, buf(s.shapes.size());
    for (Parameter& p : run.params()) {
      const std::vector<float> v = p.value.to_floats();
      w.emplace_back(v.begin(), v.end());
    }
    for (int k = 0; k < s.steps; ++k) {
      run.step(k);
      const double lr = 0.1 + 0.01 * k;
      for (std::size_t i = 0; i < w.size(); ++i) {
        const std::vector<float> grad = run.params()[i].grad.to_floats();
        const std::vector<float> got = run.params()[i].value.to_floats();
        buf[i].resize(grad.size());
        for (std::size_t j = 0; j < grad.size(); ++j) {
          const double g = grad[j] + s.weight_decay * w[i][j];
          buf[i][j] = k == 0 ? g : s.momentum * buf[i][j] + g;
          w[i][j] -= lr * (nesterov ? g + s.momentum * buf[i][j] : buf[i][j]);
          ASSERT_NEAR(got[j], w[i][j], 1e-5 * (1 + std::abs(w[i][j])))
              << "p" << i << "[" << j << "] after step " << k + 1;
        }
      }
    }
  }
}

}  // namespace
}  // namespace flexkit::nn
