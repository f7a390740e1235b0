// An independent float64 model of FlexSN neurons (include/flexkit/neuron.hpp), for differential
// tests of the generated multi-step kernels. It shares no code with the library: every neuron is a
// hand-written step function with a hand-written vector-Jacobian product, and a generic driver runs
// the time loop forward and backward through time (BPTT), one neuron at a time.
//
// Loss convention: L = Σ_t Σ_n (Σ_o gy_o·y_o + Σ_s gv_s·v_s) + Σ_n Σ_s gT_s·v_s(T), with the
// upstream gradients gy (output sequences), gv (state sequences) and gT (final states) given.
//
// Layout: sequences are [T, N] row-major (element t·N + n), states and per-neuron parameters [N],
// scalar parameters one value.
//
// The spike can be evaluated two ways. `heaviside` is the real forward (Θ(z) = 1 for z ≥ 0).
// `smooth` replaces Θ by the surrogate's primitive (a smooth function whose derivative is exactly
// the surrogate derivative), so that the same hand-written backward is the true derivative of
// the forward and can be checked against central finite differences. detach() is checked the same
// way: a recording forward pass remembers every detached value and the perturbed passes replay
// them, which is what "no gradient through this value" means.
#pragma once
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace neuronref {

// ---- surrogates (include/flexkit/neuron.hpp, SpikingJelly's names and defaults)
// -------------------------------

enum class Surrogate {
  sigmoid,
  atan,
  piecewise_quadratic,
  piecewise_exp,
  soft_sign,
  super_spike,
  erf,
};
inline constexpr Surrogate kAllSurrogates[] = {
    Surrogate::sigmoid,       Surrogate::atan,      Surrogate::piecewise_quadratic,
    Surrogate::piecewise_exp, Surrogate::soft_sign, Surrogate::super_spike,
    Surrogate::erf,
};

std::string_view surrogate_name(Surrogate s);
double surrogate_default_alpha(Surrogate s);
// d spike / dz as the surrogate defines it.
double surrogate_grad(Surrogate s, double alpha, double z);
// A primitive of surrogate_grad (continuous, with the surrogate as its derivative everywhere).
double surrogate_primitive(Surrogate s, double alpha, double z);

enum class SpikeMode { heaviside, smooth };

// What a step function sees besides its operands: the spike evaluation mode, detach record /
// replay, the smallest |z| any spike saw (how far from a flip a float32 evaluation is), and a
// hook that shifts one step's backward residual (for the storage error bound of LIF).
class StepContext {
 public:
  double spike(double z, Surrogate s, double alpha);
  double detach(double value);

  SpikeMode mode = SpikeMode::heaviside;
  enum class Tape { none, record, replay } tape = Tape::none;
  std::vector<double>* tape_values = nullptr;
  std::size_t tape_pos = 0;
  double min_margin = std::numeric_limits<double>::infinity();
  std::int64_t step = 0;
  // Backward only: at step perturb_step, LIF reads its charged potential h shifted by
  // perturb_rel · (|h| + |v_threshold| + |v_reset|) + perturb_abs, and PLIF's w gradient reads
  // x − v scaled by 1 + perturb_diff_rel.
  std::int64_t perturb_step = -1;
  double perturb_rel = 0, perturb_abs = 0, perturb_diff_rel = 0;
};

// One neuron's single step. Parameters handed to a model are only those that get gradients or
// vary per neuron (the others are fixed in the model); p[k] is parameter k's value for this
// neuron. backward() is the vector-Jacobian product of forward() at (x, v, p): it sets gx and gv
// and adds to gp.
class StepModel {
 public:
  virtual ~StepModel() = default;
  int num_inputs = 1, num_states = 0, num_outputs = 1;
  std::vector<std::string> param_names;  // runtime parameters, in p[] order
  std::vector<bool> param_per_neuron;

  virtual void forward(StepContext& ctx, const double* x, const double* v, const double* p,
                       double* y, double* vn) const = 0;
  virtual void backward(StepContext& ctx, const double* x, const double* v, const double* p,
                        const double* gy, const double* gvn, double* gx, double* gv,
                        double* gp) const;
};

using Seqs = std::vector<std::vector<double>>;

struct Problem {
  std::int64_t T = 0, N = 0;
  Seqs inputs;             // [I][T·N]
  Seqs initial_states;     // [S][N]; an empty entry means zeros
  Seqs params;             // [P], size 1 (scalar) or N (per neuron)
  Seqs grad_outputs;       // [O][T·N]; empty (or an empty entry) means zero
  Seqs grad_state_seqs;    // [S][T·N]; empty means zero
  Seqs grad_final_states;  // [S][N]; empty means zero
};

struct Result {
  Seqs outputs;                  // [O][T·N]
  Seqs state_seqs;               // [S][T·N]
  Seqs final_states;             // [S][N]
  Seqs grad_inputs;              // [I][T·N]
  Seqs grad_initial_states;      // [S][N]
  Seqs grad_params;              // [P], size 1 or N like the parameter
  std::vector<double> margin;    // [N]: smallest |z| any spike of that neuron saw
  double loss = 0;               // L of the header comment
  std::vector<double> detached;  // values detach() recorded (record runs)
};

// Runs the forward (and, with `backward`, BPTT) of `model` over `problem`.
Result run(const StepModel& model, const Problem& problem, SpikeMode mode = SpikeMode::heaviside,
           bool backward = true);

// Gradients of L by central differences of step h on the forward in `mode` (detached values
// replayed from the unperturbed run). Fills grad_inputs, grad_initial_states, grad_params.
Result finite_differences(const StepModel& model, const Problem& problem, SpikeMode mode, double h);

// ---- models ------------------------------------------------------------------------------

// IF / LIF / PLIF with every SpikingJelly variant (include/flexkit/neuron.hpp):
//   charge  IF: h = v + x;  LIF (decay_input): h = v + (x − (v − vr))·k, else h = v − (v − vr)·k +
//   x,
//           with k = 1/τ (LIF) or k = σ(w) (PLIF, w learnable, p[0]) and vr = soft ? 0 : v_reset;
//   fire    s = spike(h − v_th);   sd = detach_reset ? detach(s) : s;
//   reset   hard: v' = sd·v_reset + (1 − sd)·h;  soft: v' = h − sd·v_th.
struct LifOptions {
  enum class Charge { integrate, leaky, parametric } charge = Charge::leaky;
  double tau = 2.0;
  bool decay_input = true;
  double v_threshold = 1.0;
  double v_reset = 0.0;
  bool soft_reset = false;
  bool detach_reset = false;
  Surrogate surrogate = Surrogate::sigmoid;
  double alpha = 4.0;
};
std::unique_ptr<StepModel> make_lif(const LifOptions& options);

// s = spike(x − c, surrogate(alpha)): 1 input, no state, 1 output.
std::unique_ptr<StepModel> make_spike_probe(Surrogate surrogate, double alpha, double c);

// The 2-input / 2-state / 2-output neuron: an adaptive threshold and a sigmoid input gate.
//   k = σ(g);  h = v + (k·x − v)/τ;  θ = v_th + β·a;  s = spike(h − θ, atan(2));
//   v' = h − s·θ;  a' = a + (s − a)/τ_a;  m = k·h       (β learnable, p[0])
// with τ = 4, τ_a = 8, v_th = 0.8; inputs (x, g), states (v, a), outputs (s, m).
std::unique_ptr<StepModel> make_gated_adaptive();

// (2, 1, 1): h = v + (x − v)/3 + 0.5·x·y;  s = spike(h − 1, piecewise_exp(1));  v' = h·(1 − s).
std::unique_ptr<StepModel> make_two_input();

// (1, 3, 1), a synaptic current i, membrane v and refractory trace r, with a per-neuron
// learnable bias b (p[0]):
//   i' = i + (x − i)/2;  h = v + (i' − v)/4 − r + b;  s = spike(h − 0.6, erf(2));
//   v' = h·(1 − s);  r' = r·(1 − 1/3) + 0.2·s.
std::unique_ptr<StepModel> make_three_state();

// (1, 2, 2): h = v + 0.5·(x − u) − 0.1·v·v;  s = spike(h − 1, super_spike(1.5));  v' = h − s;
//   u' = u + 0.2·(h − u) + 0.3·s;  y = 0.5·tanh(h) + u'.   Outputs (s, y).
std::unique_ptr<StepModel> make_two_output();

// (1, 0, 1): y = spike(x² − 0.5, soft_sign(2))·x + 0.25·σ(x).
std::unique_ptr<StepModel> make_stateless();

// A smooth neuron (σ instead of spike) with a learnable scalar w (p[0]); forward only, its
// gradients come from finite_differences:
//   h = v + (x − v)/3 + w·y;  o = σ(4·(h − 1));  v' = h − 0.8·o;  a' = 0.9·a + 0.1·tanh(h);
//   q = o·a' + exp(−h²).   Inputs (x, y), states (v, a), outputs (o, q).
std::unique_ptr<StepModel> make_smooth();

// ---- helpers -------------------------------------------------------------------------------

// Deterministic uniform numbers (an LCG; std:: distributions differ between libraries). Values
// are rounded to float32 so that the library's f32 inputs are exactly the reference's.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : s_(seed * 0x9e3779b97f4a7c15ull + 1) {}
  double uniform(double lo, double hi);
  std::vector<double> uniform(std::size_t n, double lo, double hi);

 private:
  std::uint64_t s_;
};

// Per-element bound on the change of LIF's gradients when every step's backward reads h with an
// error of at most rel·(|h| + |v_th| + |v_reset|) + abs and (PLIF) x − v with a relative error of
// at most diff_rel: the sum over steps and over the two values of the first-order effect of each
// one's error, measured by perturbing that step's value alone.
struct ResidualErrorBound {
  std::vector<double> grad_x;       // [T·N]
  std::vector<double> grad_v0;      // [N]
  std::vector<double> grad_params;  // the first parameter's, per element (PLIF's w: one)
};
ResidualErrorBound lif_residual_error_bound(const LifOptions& options, const Problem& problem,
                                            double rel, double abs, double diff_rel = 0);

}  // namespace neuronref
