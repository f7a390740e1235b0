// Optimizers with PyTorch's update rules (torch.optim.SGD, Adam, AdamW), each update a few
// fused expressions per parameter tensor; SGD's updates run as one pass per tensor where they can
// (backend/sgd_update.hpp).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numbers>
#include <optional>

#include "backend/sgd_update.hpp"
#include "core/flex16_write.hpp"
#include "core/shard_agreement.hpp"
#include "core/storage.hpp"
#include "flexkit/expr.hpp"
#include "nn/layer_support.hpp"

namespace flexkit::nn {

using namespace detail;

namespace {

void check_grad(const Parameter& p) {
  if (!p.grad.defined() || p.grad.shape() != p.value.shape())
    throw ValueError(cat("optimizer: parameter '", p.name, "' has no gradient of its shape"));
}

// What the update writes: the f32 master copy when there is one, else the value itself.
Array& updated(Parameter& p) {
  return p.master.defined() ? p.master : p.value;
}

// Which of a parameter's tensors a write updates: the stochastic rounding draws one stream each.
enum class Slot : std::uint64_t { weights = 1, first_state = 2, second_state = 3, published = 4 };

std::uint64_t mix(std::uint64_t h, std::uint64_t v) {  // splitmix64 of h combined with v
  std::uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Where one update writes: flex16 tensors (weights, optimizer state) store under their Autoflex
// managers, rounding as the options say (a stochastic seed per step, parameter and slot).
class Writer {
 public:
  Writer(const OptimizerOptions& o, std::int64_t step, std::size_t param)
      : o_(o), step_(step), param_(param) {}
  void operator()(const Array& target, const Expr& e, Slot slot) const {
    AssignOptions options;
    if (target.dtype() == DType::flex16) {
      options.iwl_policy = IwlPolicy::autoflex;
      options.rounding = o_.rounding;
      options.seed = seed(slot);
    }
    assign(target, e, options);
  }
  // The stochastic rounding seed of a flex16 write into `slot`.
  std::uint64_t seed(Slot slot) const {
    return mix(mix(mix(o_.rounding_seed, static_cast<std::uint64_t>(step_)), param_),
               static_cast<std::uint64_t>(slot));
  }
  // After the master copy moved: its flex16 rounding becomes the value the layers read.
  void publish(Parameter& p) const {
    if (p.master.defined()) (*this)(p.value, Expr(p.master), Slot::published);
  }

 private:
  const OptimizerOptions& o_;
  std::int64_t step_;
  std::size_t param_;
};

// Optimizer state in the format of the gradients it follows.
Array new_state(const Parameter& p) {
  return Array::zeros(p.value.shape(), p.grad.defined() ? p.grad.dtype() : p.value.dtype(),
                      p.value.device());
}

// ---- SGD's fused update (backend/sgd_update.hpp) --------------------------------------------
// It gives the expressions' bits; anything it does not handle as `assign` would (other dtypes
// or devices, strided or partial views, a manager's first write) takes the expressions.

bool fusable(const Array& a, Device device) {
  return a.defined() && a.device() == device && a.size() > 0 && a.is_contiguous() &&
         (a.dtype() == DType::f32 || a.dtype() == DType::bf16 || a.dtype() == DType::flex16);
}

// One write of the fused update, planned as `assign` plans it.
struct FusedWrite {
  Array target;
  Slot slot;
  flexkit::detail::Flex16WritePlan plan;
};

// The writes of one parameter's update (buffer, weight, published value, as the expressions
// make them), or nothing when one of them cannot be fused.
std::optional<std::vector<FusedWrite>> plan_fused(const Array& grad, const Array* buffer,
                                                  const Array& weight, const Array* published,
                                                  Device device) {
  if (!fusable(grad, device)) return std::nullopt;
  std::vector<FusedWrite> writes;
  const std::pair<const Array*, Slot> targets[] = {
      {buffer, Slot::first_state}, {&weight, Slot::weights}, {published, Slot::published}};
  for (const auto& [target, slot] : targets) {
    if (target == nullptr) continue;
    if (!fusable(*target, device) || !target->writable() ||
        flexkit::detail::covers_part_of_storage(*target))
      return std::nullopt;
    FusedWrite w{*target, slot, {}};
    if (target->dtype() == DType::flex16) {
      w.plan =
          flexkit::detail::plan_flex16_write(*target, IwlPolicy::autoflex, std::nullopt, "sgd");
      if (w.plan.policy != IwlPolicy::fixed || !w.plan.iwl)
        return std::nullopt;  // exact: a max pass
    }
    writes.push_back(std::move(w));
  }
  return writes;
}

// Whether the parameters' updates are independent, so that fused and expression updates may
// run in any order: no storage written by one update is read or written by another array, and
// no Autoflex manager serves two flex16 tensors.
bool updates_are_independent(const std::vector<std::vector<Array>>& written,
                             const std::vector<Array>& read) {
  std::map<const void*, int> uses;
  std::vector<Autoflex> managers;
  for (const auto& arrays : written)
    for (const Array& a : arrays) {
      ++uses[ArrayAccess::storage_ptr(a).get()];
      if (a.dtype() != DType::flex16) continue;
      const Autoflex m = a.autoflex();
      if (std::find(managers.begin(), managers.end(), m) != managers.end()) return false;
      managers.push_back(m);
    }
  for (const Array& a : read)
    if (uses.contains(ArrayAccess::storage_ptr(a).get())) return false;
  for (const auto& [storage, count] : uses)
    if (count > 1) return false;
  return true;
}

class Sgd final : public Optimizer {
 public:
  explicit Sgd(OptimizerOptions o) : o_(o) {}
  std::string name() const override { return "sgd"; }
  void update(const std::vector<Parameter*>& params) override {
    for (const Parameter* p : params) check_grad(*p);
    const std::vector<bool> fused = update_fused(params);
    const Expr lr(scalar(0));
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (fused[i]) continue;
      Parameter& p = *params[i];
      const Writer write(o_, steps_ - 1, i);
      Array& w = updated(p);
      Expr g = o_.weight_decay != 0 ? Expr(p.grad) + o_.weight_decay * Expr(w) : Expr(p.grad);
      if (o_.momentum == 0) {
        write(w, Expr(w) - lr * g, Slot::weights);
        write.publish(p);
        continue;
      }
      Array& buf = buffers_[i];
      // The first step starts the buffer at the gradient, as PyTorch does.
      write(buf, steps_ == 1 ? g : o_.momentum * Expr(buf) + g, Slot::first_state);
      write(w, Expr(w) - lr * (o_.nesterov ? g + o_.momentum * Expr(buf) : Expr(buf)),
            Slot::weights);
      write.publish(p);
    }
  }
  std::vector<Array> state() const override { return buffers_; }

 private:
  // Every parameter it can take updated in one pass (one launch per 16 on CUDA), each flex16
  // write planned and recorded as `assign` does it; true for the parameters it updated.
  std::vector<bool> update_fused(const std::vector<Parameter*>& params) {
    std::vector<bool> fused(params.size(), false);
    if (params.empty() || flexkit::detail::writes_are_sharded()) return fused;
    const Array lr = scalar(0);
    std::vector<std::vector<Array>> written;
    std::vector<Array> read;
    for (std::size_t i = 0; i < params.size(); ++i) {
      Parameter& p = *params[i];
      written.push_back({updated(p)});
      if (o_.momentum != 0) written.back().push_back(buffers_[i]);
      if (p.master.defined()) written.back().push_back(p.value);
      read.push_back(p.grad);
    }
    if (!updates_are_independent(written, read)) return fused;

    backend::SgdUpdate update;
    update.lr = lr;
    update.momentum = o_.momentum;
    update.weight_decay = o_.weight_decay;
    update.nesterov = o_.nesterov;
    update.first_step = steps_ == 1;
    std::vector<FusedWrite> writes;  // every fused write, in the expressions' order
    for (std::size_t i = 0; i < params.size(); ++i) {
      Parameter& p = *params[i];
      const std::optional<std::vector<FusedWrite>> planned =
          plan_fused(p.grad, o_.momentum != 0 ? &buffers_[i] : nullptr, updated(p),
                     p.master.defined() ? &p.value : nullptr, lr.device());
      if (!planned) continue;
      fused[i] = true;
      const Writer writer(o_, steps_ - 1, i);
      backend::SgdTensor& t = update.tensors.emplace_back();
      t.grad = p.grad;
      for (const FusedWrite& w : *planned) {
        backend::SgdTarget& target = w.slot == Slot::first_state ? t.buffer
                                     : w.slot == Slot::weights   ? t.weight
                                                                 : t.published;
        target.array = w.target;
        if (w.target.dtype() != DType::flex16) continue;
        target.read_iwl = w.target.iwl();
        if (o_.rounding == Rounding::stochastic) target.stochastic_seed = writer.seed(w.slot);
        writes.push_back(w);
      }
    }
    if (update.tensors.empty()) return fused;
    // The new exponents are set before the kernel, as `assign` sets them before its stages; the
    // kernel reads the old values at their old exponent, as the expressions read them (in place,
    // or from a snapshot when the exponent moves), so no storage is rescaled first.
    for (FusedWrite& w : writes) w.target.set_iwl(*w.plan.iwl);
    backend::count_fused_sgd_tensors(static_cast<std::int64_t>(update.tensors.size()));
    try {
      if (lr.device().is_cpu())
        backend::run_sgd_update_cpu(update);
      else
        backend::run_sgd_update_cuda(update);
    } catch (...) {
      for (const backend::SgdTensor& t : update.tensors)
        for (const backend::SgdTarget* target : {&t.buffer, &t.weight, &t.published})
          if (target->array.defined() && target->array.dtype() == DType::flex16) {
            Array a = target->array;
            a.set_iwl(target->read_iwl);
          }
      throw;
    }
    for (const FusedWrite& w : writes) flexkit::detail::finish_flex16_write(w.target, w.plan);
    return fused;
  }

  void make_state(const std::vector<Parameter*>& params) override {
    if (o_.momentum == 0 || buffers_.size() == params.size()) return;
    buffers_.clear();
    for (Parameter* p : params) buffers_.push_back(new_state(*p));
  }
  void restore_state(std::vector<Array> state) override { buffers_ = std::move(state); }
  std::vector<double> step_scalars(double lr) const override { return {lr}; }

  OptimizerOptions o_;
  std::vector<Array> buffers_;
};

class Adam final : public Optimizer {
 public:
  Adam(OptimizerOptions o, bool decoupled) : o_(o), decoupled_(decoupled) {}
  std::string name() const override { return decoupled_ ? "adamw" : "adam"; }
  void update(const std::vector<Parameter*>& params) override {
    // lr / (1 - beta1^t), 1 / sqrt(1 - beta2^t) and the decoupled decay's 1 - lr * decay.
    const Expr step_size(scalar(0)), inverse_root_correction(scalar(1)), decay(scalar(2));
    for (std::size_t i = 0; i < params.size(); ++i) {
      Parameter& p = *params[i];
      check_grad(p);
      const Writer write(o_, steps_ - 1, i);
      Array& m = moments_[2 * i];
      Array& v = moments_[2 * i + 1];
      Array& target = updated(p);
      Expr g(p.grad);
      if (o_.weight_decay != 0 && !decoupled_) g = g + o_.weight_decay * Expr(target);
      write(m, o_.beta1 * Expr(m) + (1 - o_.beta1) * g, Slot::first_state);
      write(v, o_.beta2 * Expr(v) + (1 - o_.beta2) * sqr(g), Slot::second_state);
      Expr w(target);
      if (decoupled_ && o_.weight_decay != 0) w = w * decay;
      write(target, w - step_size * Expr(m) / (sqrt(Expr(v)) * inverse_root_correction + o_.eps),
            Slot::weights);
      write.publish(p);
    }
  }
  std::vector<Array> state() const override { return moments_; }

 private:
  void make_state(const std::vector<Parameter*>& params) override {
    if (moments_.size() == 2 * params.size()) return;
    moments_.clear();
    for (Parameter* p : params)
      for (int k = 0; k < 2; ++k)
        // The second moment stays f32: squared gradients span twice the gradients' binades,
        // and an entry flushed to 0 under one exponent per tensor turns m / sqrt(v) into m / eps.
        moments_.push_back(k == 0 ? new_state(*p)
                                  : Array::zeros(p->value.shape(), DType::f32, p->value.device()));
  }
  void restore_state(std::vector<Array> state) override { moments_ = std::move(state); }
  std::vector<double> step_scalars(double lr) const override {
    const double t = static_cast<double>(steps_);
    const double bc1 = 1 - std::pow(o_.beta1, t), bc2 = 1 - std::pow(o_.beta2, t);
    return {lr / bc1, 1 / std::sqrt(bc2), 1 - lr * o_.weight_decay};
  }

  OptimizerOptions o_;
  bool decoupled_;
  std::vector<Array> moments_;  // m and v of each parameter in turn
};

}  // namespace

void Optimizer::prepare(const std::vector<Parameter*>& params, double lr) {
  make_state(params);
  ++steps_;
  const std::vector<double> values = step_scalars(lr);
  const Device device = params.empty() ? Device::cpu() : params.front()->value.device();
  const auto n = static_cast<std::int64_t>(values.size());
  if (!scalars_.defined() || scalars_.device() != device || scalars_.size() != n) {
    scalars_ = Array::empty({n}, DType::f32, device);
    uploaded_.assign(values.size(), std::numeric_limits<float>::quiet_NaN());
  }
  // Written by the device (a fill queued like any kernel, so the host need not wait), and only
  // where a value changed: a new learning rate, or Adam's bias corrections at every step.
  for (std::int64_t i = 0; i < n; ++i) {
    const auto rounded = static_cast<float>(values[static_cast<std::size_t>(i)]);
    float& held = uploaded_[static_cast<std::size_t>(i)];
    if (rounded == held) continue;
    scalars_(slice(i, i + 1)).fill(rounded);
    held = rounded;
  }
}

void Optimizer::set_state(std::vector<Array> state, std::int64_t steps) {
  restore_state(std::move(state));
  steps_ = steps;
  uploaded_.clear();
  scalars_ = Array();
}

Array Optimizer::scalar(std::size_t i) const {
  if (!scalars_.defined() || static_cast<std::int64_t>(i) >= scalars_.size())
    throw ValueError(cat("optimizer ", name(), ": update() before prepare()"));
  const auto at = static_cast<std::int64_t>(i);
  return scalars_(slice(at, at + 1));
}

std::unique_ptr<Optimizer> make_optimizer(std::string_view name, const OptimizerOptions& o) {
  if (!(o.momentum >= 0 && o.momentum < 1))
    throw ValueError(cat("optimizer: momentum must be in [0, 1), got ", o.momentum));
  if (!(o.weight_decay >= 0))
    throw ValueError(cat("optimizer: weight decay must not be negative, got ", o.weight_decay));
  if (!(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1 && o.eps > 0))
    throw ValueError("optimizer: Adam needs 0 <= beta1, beta2 < 1 and eps > 0");
  if (o.nesterov && o.momentum == 0)
    throw ValueError("optimizer: Nesterov momentum needs a momentum above 0");
  if (name == "sgd") return std::make_unique<Sgd>(o);
  if (name == "adam") return std::make_unique<Adam>(o, false);
  if (name == "adamw") return std::make_unique<Adam>(o, true);
  throw ValueError(cat("unknown optimizer '", name, "'; optimizers: sgd, adam, adamw"));
}

double Schedule::lr(double base_lr, std::int64_t epoch) const {
  switch (kind) {
    case Kind::constant:
      return base_lr;
    case Kind::step:
      return base_lr *
             std::pow(gamma, static_cast<double>(epoch / std::max<std::int64_t>(1, step_size)));
    case Kind::cosine: {
      const double e = static_cast<double>(std::min(epoch, total_epochs));
      return eta_min +
             (base_lr - eta_min) *
                 (1 + std::cos(std::numbers::pi * e / static_cast<double>(total_epochs))) / 2;
    }
  }
  return base_lr;
}

Schedule::Kind parse_schedule(std::string_view name) {
  if (name == "constant") return Schedule::Kind::constant;
  if (name == "step") return Schedule::Kind::step;
  if (name == "cosine") return Schedule::Kind::cosine;
  throw ValueError(cat("unknown schedule '", name, "'; schedules: constant, step, cosine"));
}

}  // namespace flexkit::nn
