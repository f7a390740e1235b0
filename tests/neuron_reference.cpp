// Hand-written float64 neurons and their vector-Jacobian products; see neuron_reference.hpp.
#include "neuron_reference.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <utility>

namespace neuronref {

namespace {

double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

double at(const Seqs& seqs, std::size_t k, std::size_t i) {
  if (k >= seqs.size() || seqs[k].empty()) return 0.0;
  return seqs[k][i];
}

}  // namespace

// ---- surrogates ----------------------------------------------------------------------------

std::string_view surrogate_name(Surrogate s) {
  switch (s) {
    case Surrogate::sigmoid:
      return "sigmoid";
    case Surrogate::atan:
      return "atan";
    case Surrogate::piecewise_quadratic:
      return "piecewise_quadratic";
    case Surrogate::piecewise_exp:
      return "piecewise_exp";
    case Surrogate::soft_sign:
      return "soft_sign";
    case Surrogate::super_spike:
      return "super_spike";
    case Surrogate::erf:
      return "erf";
  }
  return "?";
}

double surrogate_default_alpha(Surrogate s) {
  switch (s) {
    case Surrogate::sigmoid:
      return 4.0;
    case Surrogate::atan:
      return 2.0;
    case Surrogate::piecewise_quadratic:
      return 1.0;
    case Surrogate::piecewise_exp:
      return 1.0;
    case Surrogate::soft_sign:
      return 2.0;
    case Surrogate::super_spike:
      return 1.0;
    case Surrogate::erf:
      return 2.0;
  }
  return 0.0;
}

// The formulas of include/flexkit/neuron.hpp, written out literally.
double surrogate_grad(Surrogate s, double alpha, double z) {
  const double pi = std::numbers::pi;
  switch (s) {
    case Surrogate::sigmoid: {
      const double q = sigmoid(alpha * z);
      return alpha * q * (1.0 - q);
    }
    case Surrogate::atan: {
      const double u = pi / 2.0 * alpha * z;
      return (alpha / 2.0) / (1.0 + u * u);
    }
    case Surrogate::piecewise_quadratic:
      return std::max(0.0, alpha - alpha * alpha * std::abs(z));
    case Surrogate::piecewise_exp:
      return alpha / 2.0 * std::exp(-alpha * std::abs(z));
    case Surrogate::soft_sign: {
      const double d = 1.0 / alpha + std::abs(z);
      return 1.0 / (2.0 * alpha * d * d);
    }
    case Surrogate::super_spike: {
      const double d = std::abs(z) + 1.0;
      return alpha / (d * d);
    }
    case Surrogate::erf:
      return alpha / std::sqrt(pi) * std::exp(-(alpha * z) * (alpha * z));
  }
  return 0.0;
}

// Each primitive F satisfies F' = surrogate_grad (differentiate each branch to check); the
// constant does not matter for gradients but keeps F in [0, 1] where the surrogate integrates to 1.
double surrogate_primitive(Surrogate s, double alpha, double z) {
  const double pi = std::numbers::pi;
  switch (s) {
    case Surrogate::sigmoid:
      return sigmoid(alpha * z);
    case Surrogate::atan:
      return std::atan(pi / 2.0 * alpha * z) / pi + 0.5;
    case Surrogate::piecewise_quadratic: {
      const double w = 1.0 / alpha;
      if (z < -w) return 0.0;
      if (z <= 0.0) return alpha * alpha / 2.0 * (z + w) * (z + w);
      if (z <= w) return 1.0 - alpha * alpha / 2.0 * (z - w) * (z - w);
      return 1.0;
    }
    case Surrogate::piecewise_exp:
      return z < 0.0 ? 0.5 * std::exp(alpha * z) : 1.0 - 0.5 * std::exp(-alpha * z);
    case Surrogate::soft_sign:
      return 0.5 * (alpha * z / (1.0 + alpha * std::abs(z)) + 1.0);
    case Surrogate::super_spike:
      return alpha * z / (1.0 + std::abs(z));
    case Surrogate::erf:
      return 0.5 * (1.0 + std::erf(alpha * z));
  }
  return 0.0;
}

// ---- context -------------------------------------------------------------------------------

double StepContext::spike(double z, Surrogate s, double alpha) {
  min_margin = std::min(min_margin, std::abs(z));
  if (mode == SpikeMode::smooth) return surrogate_primitive(s, alpha, z);
  return z >= 0.0 ? 1.0 : 0.0;
}

double StepContext::detach(double value) {
  switch (tape) {
    case Tape::none:
      return value;
    case Tape::record:
      tape_values->push_back(value);
      return value;
    case Tape::replay:
      return (*tape_values).at(tape_pos++);
  }
  return value;
}

void StepModel::backward(StepContext&, const double*, const double*, const double*, const double*,
                         const double*, double*, double*, double*) const {
  throw std::logic_error("this reference neuron has no hand-written backward");
}

// ---- driver --------------------------------------------------------------------------------

namespace {

Result run_impl(const StepModel& model, const Problem& pr, bool backward, StepContext ctx) {
  const auto I = static_cast<std::size_t>(model.num_inputs);
  const auto S = static_cast<std::size_t>(model.num_states);
  const auto O = static_cast<std::size_t>(model.num_outputs);
  const std::size_t P = model.param_names.size();
  const auto T = static_cast<std::size_t>(pr.T);
  const auto N = static_cast<std::size_t>(pr.N);
  if (pr.inputs.size() != I) throw std::logic_error("reference: wrong number of inputs");
  if (pr.params.size() != P) throw std::logic_error("reference: wrong number of parameters");

  Result r;
  r.outputs.assign(O, std::vector<double>(T * N));
  r.state_seqs.assign(S, std::vector<double>(T * N));
  r.final_states.assign(S, std::vector<double>(N));
  r.margin.assign(N, std::numeric_limits<double>::infinity());
  if (backward) {
    r.grad_inputs.assign(I, std::vector<double>(T * N));
    r.grad_initial_states.assign(S, std::vector<double>(N));
    r.grad_params.resize(P);
    for (std::size_t k = 0; k < P; ++k) r.grad_params[k].assign(pr.params[k].size(), 0.0);
  }
  if (ctx.tape == StepContext::Tape::record) ctx.tape_values = &r.detached;

  std::vector<double> x(I), p(P), y(O), gy(O), gx(I), gp(P);
  std::vector<double> history((T + 1) * S), gv(S), gvn(S);
  for (std::size_t n = 0; n < N; ++n) {
    for (std::size_t k = 0; k < P; ++k)
      p[k] = pr.params[k].size() == 1 ? pr.params[k][0] : pr.params[k][n];
    for (std::size_t s = 0; s < S; ++s) history[s] = at(pr.initial_states, s, n);
    ctx.min_margin = std::numeric_limits<double>::infinity();
    for (std::size_t t = 0; t < T; ++t) {
      const std::size_t e = t * N + n;
      for (std::size_t i = 0; i < I; ++i) x[i] = pr.inputs[i][e];
      ctx.step = static_cast<std::int64_t>(t);
      model.forward(ctx, x.data(), &history[t * S], p.data(), y.data(), &history[(t + 1) * S]);
      for (std::size_t o = 0; o < O; ++o) {
        r.outputs[o][e] = y[o];
        r.loss += at(pr.grad_outputs, o, e) * y[o];
      }
      for (std::size_t s = 0; s < S; ++s) {
        r.state_seqs[s][e] = history[(t + 1) * S + s];
        r.loss += at(pr.grad_state_seqs, s, e) * history[(t + 1) * S + s];
      }
    }
    r.margin[n] = ctx.min_margin;
    for (std::size_t s = 0; s < S; ++s) {
      r.final_states[s][n] = history[T * S + s];
      r.loss += at(pr.grad_final_states, s, n) * history[T * S + s];
    }
    if (!backward) continue;

    StepContext bctx = ctx;
    bctx.tape = StepContext::Tape::none;
    for (std::size_t s = 0; s < S; ++s) gv[s] = at(pr.grad_final_states, s, n);
    for (std::size_t t = T; t-- > 0;) {
      const std::size_t e = t * N + n;
      for (std::size_t i = 0; i < I; ++i) x[i] = pr.inputs[i][e];
      for (std::size_t o = 0; o < O; ++o) gy[o] = at(pr.grad_outputs, o, e);
      for (std::size_t s = 0; s < S; ++s) gvn[s] = gv[s] + at(pr.grad_state_seqs, s, e);
      std::fill(gp.begin(), gp.end(), 0.0);
      bctx.step = static_cast<std::int64_t>(t);
      model.backward(bctx, x.data(), &history[t * S], p.data(), gy.data(), gvn.data(), gx.data(),
                     gv.data(), gp.data());
      for (std::size_t i = 0; i < I; ++i) r.grad_inputs[i][e] = gx[i];
      for (std::size_t k = 0; k < P; ++k)
        r.grad_params[k][r.grad_params[k].size() == 1 ? 0 : n] += gp[k];
    }
    for (std::size_t s = 0; s < S; ++s) r.grad_initial_states[s][n] = gv[s];
  }
  return r;
}

}  // namespace

Result run(const StepModel& model, const Problem& problem, SpikeMode mode, bool backward) {
  StepContext ctx;
  ctx.mode = mode;
  return run_impl(model, problem, backward, ctx);
}

Result finite_differences(const StepModel& model, const Problem& problem, SpikeMode mode,
                          double h) {
  StepContext record;
  record.mode = mode;
  record.tape = StepContext::Tape::record;
  const Result base = run_impl(model, problem, false, record);
  std::vector<double> tape = base.detached;

  Problem pr = problem;
  const auto loss_at = [&]() {
    StepContext replay;
    replay.mode = mode;
    replay.tape = StepContext::Tape::replay;
    replay.tape_values = &tape;
    return run_impl(model, pr, false, replay).loss;
  };
  const auto derivative = [&](double& value) {
    const double saved = value;
    value = saved + h;
    const double up = loss_at();
    value = saved - h;
    const double down = loss_at();
    value = saved;
    return (up - down) / (2.0 * h);
  };

  const auto S = static_cast<std::size_t>(model.num_states);
  const auto N = static_cast<std::size_t>(problem.N);
  if (pr.initial_states.size() < S) pr.initial_states.resize(S);
  for (auto& state : pr.initial_states)
    if (state.empty()) state.assign(N, 0.0);

  Result r;
  r.grad_inputs.resize(pr.inputs.size());
  for (std::size_t i = 0; i < pr.inputs.size(); ++i)
    for (double& value : pr.inputs[i]) r.grad_inputs[i].push_back(derivative(value));
  r.grad_initial_states.resize(S);
  for (std::size_t s = 0; s < S; ++s)
    for (double& value : pr.initial_states[s])
      r.grad_initial_states[s].push_back(derivative(value));
  r.grad_params.resize(pr.params.size());
  for (std::size_t k = 0; k < pr.params.size(); ++k)
    for (double& value : pr.params[k]) r.grad_params[k].push_back(derivative(value));
  return r;
}

// ---- models --------------------------------------------------------------------------------

namespace {

class Lif final : public StepModel {
 public:
  explicit Lif(const LifOptions& o) : o_(o) {
    num_inputs = 1;
    num_states = 1;
    num_outputs = 1;
    if (o.charge == LifOptions::Charge::parametric) {
      param_names = {"w"};
      param_per_neuron = {false};
    }
  }

  void forward(StepContext& ctx, const double* x, const double* v, const double* p, double* y,
               double* vn) const override {
    const double h = charge(x[0], v[0], p);
    const double s = ctx.spike(h - o_.v_threshold, o_.surrogate, o_.alpha);
    const double sd = o_.detach_reset ? ctx.detach(s) : s;
    vn[0] = o_.soft_reset ? h - sd * o_.v_threshold : sd * o_.v_reset + (1.0 - sd) * h;
    y[0] = s;
  }

  void backward(StepContext& ctx, const double* x, const double* v, const double* p,
                const double* gy, const double* gvn, double* gx, double* gv,
                double* gp) const override {
    double h = charge(x[0], v[0], p);
    const double s = ctx.spike(h - o_.v_threshold, o_.surrogate, o_.alpha);
    if (ctx.step == ctx.perturb_step)
      h += ctx.perturb_rel * (std::abs(h) + std::abs(o_.v_threshold) + std::abs(o_.v_reset)) +
           ctx.perturb_abs;
    // Reset: soft v' = h − sd·v_th, hard v' = sd·v_reset + (1 − sd)·h; detach cuts the sd path.
    double gs = gy[0];
    double gh = 0.0;
    if (o_.soft_reset) {
      gh = gvn[0];
      if (!o_.detach_reset) gs += -gvn[0] * o_.v_threshold;
    } else {
      gh = gvn[0] * (1.0 - s);
      if (!o_.detach_reset) gs += gvn[0] * (o_.v_reset - h);
    }
    gh += gs * surrogate_grad(o_.surrogate, o_.alpha, h - o_.v_threshold);
    // Charge.
    const double k = rate(p);
    const double vr = o_.soft_reset ? 0.0 : o_.v_reset;
    double gk = 0.0;
    if (o_.charge == LifOptions::Charge::integrate) {
      gx[0] = gh;
      gv[0] = gh;
    } else if (o_.decay_input) {  // h = v + (x − v + vr)·k
      gx[0] = gh * k;
      gv[0] = gh * (1.0 - k);
      const double diff = x[0] - v[0];
      gk = gh * (diff * (ctx.step == ctx.perturb_step ? 1.0 + ctx.perturb_diff_rel : 1.0) + vr);
    } else {  // h = v − (v − vr)·k + x
      gx[0] = gh;
      gv[0] = gh * (1.0 - k);
      gk = gh * (vr - v[0]);
    }
    if (o_.charge == LifOptions::Charge::parametric) gp[0] += gk * k * (1.0 - k);  // k = σ(w)
  }

 private:
  double rate(const double* p) const {
    return o_.charge == LifOptions::Charge::parametric ? sigmoid(p[0]) : 1.0 / o_.tau;
  }
  double charge(double x, double v, const double* p) const {
    if (o_.charge == LifOptions::Charge::integrate) return v + x;
    const double k = rate(p);
    const double vr = o_.soft_reset ? 0.0 : o_.v_reset;
    return o_.decay_input ? v + (x - (v - vr)) * k : v - (v - vr) * k + x;
  }
  LifOptions o_;
};

class SpikeProbe final : public StepModel {
 public:
  SpikeProbe(Surrogate s, double alpha, double c) : s_(s), alpha_(alpha), c_(c) {}
  void forward(StepContext& ctx, const double* x, const double*, const double*, double* y,
               double*) const override {
    y[0] = ctx.spike(x[0] - c_, s_, alpha_);
  }
  void backward(StepContext&, const double* x, const double*, const double*, const double* gy,
                const double*, double* gx, double*, double*) const override {
    gx[0] = gy[0] * surrogate_grad(s_, alpha_, x[0] - c_);
  }

 private:
  Surrogate s_;
  double alpha_, c_;
};

class GatedAdaptive final : public StepModel {
 public:
  static constexpr double kTau = 4.0, kTauA = 8.0, kVth = 0.8;
  GatedAdaptive() {
    num_inputs = 2;
    num_states = 2;
    num_outputs = 2;
    param_names = {"beta"};
    param_per_neuron = {false};
  }
  void forward(StepContext& ctx, const double* in, const double* st, const double* p, double* y,
               double* vn) const override {
    const double x = in[0], g = in[1], v = st[0], a = st[1], beta = p[0];
    const double k = sigmoid(g);
    const double h = v + (k * x - v) / kTau;
    const double th = kVth + beta * a;
    const double s = ctx.spike(h - th, Surrogate::atan, 2.0);
    vn[0] = h - s * th;
    vn[1] = a + (s - a) / kTauA;
    y[0] = s;
    y[1] = k * h;
  }
  void backward(StepContext& ctx, const double* in, const double* st, const double* p,
                const double* gy, const double* gvn, double* gx, double* gv,
                double* gp) const override {
    const double x = in[0], g = in[1], v = st[0], a = st[1], beta = p[0];
    const double k = sigmoid(g);
    const double h = v + (k * x - v) / kTau;
    const double th = kVth + beta * a;
    const double s = ctx.spike(h - th, Surrogate::atan, 2.0);
    // s feeds the output, v' (−s·θ) and a' ((s − a)/τ_a).
    const double gs = gy[0] - gvn[0] * th + gvn[1] / kTauA;
    const double gz = gs * surrogate_grad(Surrogate::atan, 2.0, h - th);
    const double gth = -gvn[0] * s - gz;
    const double gh = gvn[0] + gz + gy[1] * k;
    const double gk = gy[1] * h + gh * x / kTau;
    gx[0] = gh * k / kTau;
    gx[1] = gk * k * (1.0 - k);
    gv[0] = gh * (1.0 - 1.0 / kTau);
    gv[1] = gvn[1] * (1.0 - 1.0 / kTauA) + gth * beta;
    gp[0] += gth * a;
    (void)g;
  }
};

class TwoInput final : public StepModel {
 public:
  TwoInput() {
    num_inputs = 2;
    num_states = 1;
    num_outputs = 1;
  }
  void forward(StepContext& ctx, const double* in, const double* st, const double*, double* y,
               double* vn) const override {
    const double x = in[0], u = in[1], v = st[0];
    const double h = v + (x - v) / 3.0 + 0.5 * x * u;
    const double s = ctx.spike(h - 1.0, Surrogate::piecewise_exp, 1.0);
    vn[0] = h * (1.0 - s);
    y[0] = s;
  }
  void backward(StepContext& ctx, const double* in, const double* st, const double*,
                const double* gy, const double* gvn, double* gx, double* gv,
                double*) const override {
    const double x = in[0], u = in[1], v = st[0];
    const double h = v + (x - v) / 3.0 + 0.5 * x * u;
    const double s = ctx.spike(h - 1.0, Surrogate::piecewise_exp, 1.0);
    const double gs = gy[0] - gvn[0] * h;
    const double gh =
        gvn[0] * (1.0 - s) + gs * surrogate_grad(Surrogate::piecewise_exp, 1.0, h - 1.0);
    gx[0] = gh * (1.0 / 3.0 + 0.5 * u);
    gx[1] = gh * 0.5 * x;
    gv[0] = gh * (1.0 - 1.0 / 3.0);
  }
};

class ThreeState final : public StepModel {
 public:
  ThreeState() {
    num_inputs = 1;
    num_states = 3;
    num_outputs = 1;
    param_names = {"b"};
    param_per_neuron = {true};
  }
  void forward(StepContext& ctx, const double* in, const double* st, const double* p, double* y,
               double* vn) const override {
    const double x = in[0], i = st[0], v = st[1], r = st[2], b = p[0];
    const double i1 = i + (x - i) / 2.0;
    const double h = v + (i1 - v) / 4.0 - r + b;
    const double s = ctx.spike(h - 0.6, Surrogate::erf, 2.0);
    vn[0] = i1;
    vn[1] = h * (1.0 - s);
    vn[2] = r * (1.0 - 1.0 / 3.0) + 0.2 * s;
    y[0] = s;
  }
  void backward(StepContext& ctx, const double* in, const double* st, const double* p,
                const double* gy, const double* gvn, double* gx, double* gv,
                double* gp) const override {
    const double x = in[0], i = st[0], v = st[1], r = st[2], b = p[0];
    const double i1 = i + (x - i) / 2.0;
    const double h = v + (i1 - v) / 4.0 - r + b;
    const double s = ctx.spike(h - 0.6, Surrogate::erf, 2.0);
    const double gs = gy[0] - gvn[1] * h + 0.2 * gvn[2];
    const double gh = gvn[1] * (1.0 - s) + gs * surrogate_grad(Surrogate::erf, 2.0, h - 0.6);
    const double gi1 = gvn[0] + gh / 4.0;  // h reads the updated current
    gx[0] = gi1 / 2.0;
    gv[0] = gi1 / 2.0;
    gv[1] = gh * (1.0 - 1.0 / 4.0);
    gv[2] = -gh + gvn[2] * (1.0 - 1.0 / 3.0);
    gp[0] += gh;
  }
};

class TwoOutput final : public StepModel {
 public:
  TwoOutput() {
    num_inputs = 1;
    num_states = 2;
    num_outputs = 2;
  }
  void forward(StepContext& ctx, const double* in, const double* st, const double*, double* y,
               double* vn) const override {
    const double x = in[0], v = st[0], u = st[1];
    const double h = v + 0.5 * (x - u) - 0.1 * v * v;
    const double s = ctx.spike(h - 1.0, Surrogate::super_spike, 1.5);
    vn[0] = h - s;
    vn[1] = u + 0.2 * (h - u) + 0.3 * s;
    y[0] = s;
    y[1] = 0.5 * std::tanh(h) + vn[1];
  }
  void backward(StepContext&, const double* in, const double* st, const double*, const double* gy,
                const double* gvn, double* gx, double* gv, double*) const override {
    const double x = in[0], v = st[0], u = st[1];
    const double h = v + 0.5 * (x - u) - 0.1 * v * v;
    const double th = std::tanh(h);
    // v' = h − s has ∂v'/∂h = 1 whatever s is, so s itself is not needed here.
    const double gu1 = gvn[1] + gy[1];  // y reads the updated u
    const double gs = gy[0] - gvn[0] + 0.3 * gu1;
    const double gh = gvn[0] + 0.2 * gu1 + 0.5 * gy[1] * (1.0 - th * th) +
                      gs * surrogate_grad(Surrogate::super_spike, 1.5, h - 1.0);
    gx[0] = 0.5 * gh;
    gv[0] = gh * (1.0 - 0.2 * v);
    gv[1] = gu1 * 0.8 - 0.5 * gh;
  }
};

class Stateless final : public StepModel {
 public:
  void forward(StepContext& ctx, const double* in, const double*, const double*, double* y,
               double*) const override {
    const double x = in[0];
    y[0] = ctx.spike(x * x - 0.5, Surrogate::soft_sign, 2.0) * x + 0.25 * sigmoid(x);
  }
  void backward(StepContext& ctx, const double* in, const double*, const double*, const double* gy,
                const double*, double* gx, double*, double*) const override {
    const double x = in[0];
    const double s = ctx.spike(x * x - 0.5, Surrogate::soft_sign, 2.0);
    const double q = sigmoid(x);
    gx[0] = gy[0] * (surrogate_grad(Surrogate::soft_sign, 2.0, x * x - 0.5) * 2.0 * x * x + s +
                     0.25 * q * (1.0 - q));
  }
};

class Smooth final : public StepModel {
 public:
  Smooth() {
    num_inputs = 2;
    num_states = 2;
    num_outputs = 2;
    param_names = {"w"};
    param_per_neuron = {false};
  }
  void forward(StepContext&, const double* in, const double* st, const double* p, double* y,
               double* vn) const override {
    const double x = in[0], u = in[1], v = st[0], a = st[1], w = p[0];
    const double h = v + (x - v) / 3.0 + w * u;
    const double o = sigmoid(4.0 * (h - 1.0));
    vn[0] = h - 0.8 * o;
    vn[1] = 0.9 * a + 0.1 * std::tanh(h);
    y[0] = o;
    y[1] = o * vn[1] + std::exp(-(h * h));
  }
};

}  // namespace

std::unique_ptr<StepModel> make_lif(const LifOptions& options) {
  return std::make_unique<Lif>(options);
}
std::unique_ptr<StepModel> make_spike_probe(Surrogate surrogate, double alpha, double c) {
  return std::make_unique<SpikeProbe>(surrogate, alpha, c);
}
std::unique_ptr<StepModel> make_gated_adaptive() {
  return std::make_unique<GatedAdaptive>();
}
std::unique_ptr<StepModel> make_two_input() {
  return std::make_unique<TwoInput>();
}
std::unique_ptr<StepModel> make_three_state() {
  return std::make_unique<ThreeState>();
}
std::unique_ptr<StepModel> make_two_output() {
  return std::make_unique<TwoOutput>();
}
std::unique_ptr<StepModel> make_stateless() {
  return std::make_unique<Stateless>();
}
std::unique_ptr<StepModel> make_smooth() {
  return std::make_unique<Smooth>();
}

// ---- helpers -------------------------------------------------------------------------------

double Rng::uniform(double lo, double hi) {
  s_ = s_ * 6364136223846793005ull + 1442695040888963407ull;
  const double u = static_cast<double>(s_ >> 11) * 0x1p-53;
  return static_cast<double>(static_cast<float>(lo + (hi - lo) * u));
}

std::vector<double> Rng::uniform(std::size_t n, double lo, double hi) {
  std::vector<double> v(n);
  for (double& x : v) x = uniform(lo, hi);
  return v;
}

ResidualErrorBound lif_residual_error_bound(const LifOptions& options, const Problem& problem,
                                            double rel, double abs, double diff_rel) {
  const auto model = make_lif(options);
  const Result base = run(*model, problem);
  ResidualErrorBound bound;
  bound.grad_x.assign(base.grad_inputs[0].size(), 0.0);
  bound.grad_v0.assign(base.grad_initial_states[0].size(), 0.0);
  bound.grad_params.assign(base.grad_params.empty() ? 0 : base.grad_params[0].size(), 0.0);
  // One value at a time: h (by rel, abs), then x − v (by diff_rel); each with both signs.
  const std::array<std::array<double, 3>, 2> kinds = {{{rel, abs, 0.0}, {0.0, 0.0, diff_rel}}};
  for (std::int64_t t = 0; t < problem.T; ++t) {
    for (const auto& [r_h, a_h, r_d] : kinds) {
      if (r_h == 0 && a_h == 0 && r_d == 0) continue;
      std::vector<double> dx(bound.grad_x.size()), dv(bound.grad_v0.size()),
          dp(bound.grad_params.size());
      for (const double sign : {1.0, -1.0}) {
        StepContext ctx;
        ctx.perturb_step = t;
        ctx.perturb_rel = sign * r_h;
        ctx.perturb_abs = sign * a_h;
        ctx.perturb_diff_rel = sign * r_d;
        const Result r = run_impl(*model, problem, true, ctx);
        for (std::size_t e = 0; e < dx.size(); ++e)
          dx[e] = std::max(dx[e], std::abs(r.grad_inputs[0][e] - base.grad_inputs[0][e]));
        for (std::size_t n = 0; n < dv.size(); ++n)
          dv[n] = std::max(dv[n],
                           std::abs(r.grad_initial_states[0][n] - base.grad_initial_states[0][n]));
        for (std::size_t k = 0; k < dp.size(); ++k)
          dp[k] = std::max(dp[k], std::abs(r.grad_params[0][k] - base.grad_params[0][k]));
      }
      for (std::size_t e = 0; e < dx.size(); ++e) bound.grad_x[e] += dx[e];
      for (std::size_t n = 0; n < dv.size(); ++n) bound.grad_v0[n] += dv[n];
      for (std::size_t k = 0; k < dp.size(); ++k) bound.grad_params[k] += dp[k];
    }
  }
  return bound;
}

}  // namespace neuronref
