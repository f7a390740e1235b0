// Built-in neurons, written in the neuron language. The equations follow SpikingJelly's
// (activation_based/neuron.py and functional/neuron.py); variants are scalar 1/0 flags read with
// where(), so one text covers them all: decay_input, soft_reset (what SpikingJelly spells
// v_reset=None; the charge then uses v_reset = 0) and detach_reset.
#include <array>
#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>

#include "core/text.hpp"
#include "flexkit/neuron_language.hpp"

namespace flexkit {

namespace {

constexpr std::string_view kIf = R"(# Integrate-and-fire (SpikingJelly IFNode).
neuron if(x; v) -> s {
  param v_threshold = 1.0;
  param v_reset = 0.0;
  param soft_reset = 0;    # 1: subtract the threshold instead of resetting to v_reset
  param detach_reset = 0;  # 1: no gradient through the reset
  init v = where(soft_reset, 0, v_reset);  # SpikingJelly: v_reset, or 0 with soft reset
  h = v + x;
  s = spike(h - v_threshold, sigmoid(4));
  sd = where(detach_reset, detach(s), s);
  v = where(soft_reset, h - sd * v_threshold, sd * v_reset + (1 - sd) * h);
}
)";

constexpr std::string_view kLif = R"(# Leaky integrate-and-fire (SpikingJelly LIFNode).
neuron lif(x; v) -> s {
  param tau = 2.0;
  param decay_input = 1;   # 1: the input is divided by tau too
  param v_threshold = 1.0;
  param v_reset = 0.0;
  param soft_reset = 0;
  param detach_reset = 0;
  init v = where(soft_reset, 0, v_reset);  # SpikingJelly: v_reset, or 0 with soft reset
  vr = where(soft_reset, 0, v_reset);
  h = where(decay_input, v + (x - (v - vr)) / tau, v - (v - vr) / tau + x);
  s = spike(h - v_threshold, sigmoid(4));
  sd = where(detach_reset, detach(s), s);
  v = where(soft_reset, h - sd * v_threshold, sd * v_reset + (1 - sd) * h);
}
)";

// w's default is -log(init_tau - 1) for SpikingJelly's init_tau = 2, so that 1/tau = sig(w).
constexpr std::string_view kPlif = R"(# Parametric LIF (SpikingJelly ParametricLIFNode).
neuron plif(x; v) -> s {
  learnable param w = 0.0;  # 1/tau = sig(w); -log(init_tau - 1) with init_tau = 2
  param decay_input = 1;
  param v_threshold = 1.0;
  param v_reset = 0.0;
  param soft_reset = 0;
  param detach_reset = 0;
  init v = where(soft_reset, 0, v_reset);  # SpikingJelly: v_reset, or 0 with soft reset
  vr = where(soft_reset, 0, v_reset);
  k = sig(w);
  h = where(decay_input, v + (x - (v - vr)) * k, v - (v - vr) * k + x);
  s = spike(h - v_threshold, sigmoid(4));
  sd = where(detach_reset, detach(s), s);
  v = where(soft_reset, h - sd * v_threshold, sd * v_reset + (1 - sd) * h);
}
)";

// Adaptive threshold: a is a spike trace that decays with tau_a and raises the threshold by
// beta * a (the LIF charge, and the reset against the raised threshold when soft).
constexpr std::string_view kAlif = R"(# Adaptive-threshold LIF.
neuron alif(x; v, a) -> s {
  param tau = 2.0;
  param tau_a = 20.0;
  param beta = 0.5;
  param decay_input = 1;
  param v_threshold = 1.0;
  param v_reset = 0.0;
  param soft_reset = 0;
  param detach_reset = 0;
  init v = where(soft_reset, 0, v_reset);  # SpikingJelly: v_reset, or 0 with soft reset
  vr = where(soft_reset, 0, v_reset);
  h = where(decay_input, v + (x - (v - vr)) / tau, v - (v - vr) / tau + x);
  theta = v_threshold + beta * a;
  s = spike(h - theta, sigmoid(4));
  sd = where(detach_reset, detach(s), s);
  v = where(soft_reset, h - sd * theta, sd * v_reset + (1 - sd) * h);
  a = a + (s - a) / tau_a;
}
)";

// AdaptBaseNode order: charge, adaptation (on the charged h), fire, reset (w jumps by b).
constexpr std::string_view kIzhikevich = R"(# Izhikevich (SpikingJelly IzhikevichNode).
neuron izhikevich(x; v, w) -> s {
  param tau = 2.0;
  param v_c = 0.8;
  param a0 = 1.0;
  param v_threshold = 1.0;
  param v_reset = 0.0;
  param v_rest = -0.1;
  param w_rest = 0.0;  # the initial value of w
  param tau_w = 2.0;
  param a = 0.0;
  param b = 0.0;
  param soft_reset = 0;
  param detach_reset = 0;
  init v = where(soft_reset, 0, v_reset);  # SpikingJelly: v_reset, or 0 with soft reset
  init w = w_rest;
  h = v + (x + a0 * (v - v_rest) * (v - v_c) - w) / tau;
  wa = w + (a * (h - v_rest) - w) / tau_w;
  s = spike(h - v_threshold, sigmoid(4));
  sd = where(detach_reset, detach(s), s);
  # As SpikingJelly's AdaptBaseNode: the hard reset's v_reset term and w's jump use the
  # undetached spike.
  v = where(soft_reset, h - sd * v_threshold, s * v_reset + (1 - sd) * h);
  w = wa + b * s;
}
)";

constexpr std::string_view kEif = R"(# Exponential integrate-and-fire (SpikingJelly EIFNode).
neuron eif(x; v) -> s {
  param tau = 2.0;
  param delta_T = 1.0;
  param theta_rh = 0.8;
  param v_threshold = 1.0;
  param v_rest = 0.0;
  param v_reset = -0.1;
  param soft_reset = 0;
  param detach_reset = 0;
  init v = where(soft_reset, 0, v_reset);  # SpikingJelly: v_reset, or 0 with soft reset
  h = v + (x + v_rest - v + delta_T * exp((v - theta_rh) / delta_T)) / tau;
  s = spike(h - v_threshold, sigmoid(4));
  sd = where(detach_reset, detach(s), s);
  v = where(soft_reset, h - sd * v_threshold, sd * v_reset + (1 - sd) * h);
}
)";

constexpr std::string_view kQif = R"(# Quadratic integrate-and-fire (SpikingJelly QIFNode).
neuron qif(x; v) -> s {
  param tau = 2.0;
  param v_c = 0.8;
  param a0 = 1.0;
  param v_threshold = 1.0;
  param v_rest = 0.0;
  param v_reset = -0.1;
  param soft_reset = 0;
  param detach_reset = 0;
  init v = where(soft_reset, 0, v_reset);  # SpikingJelly: v_reset, or 0 with soft reset
  h = v + (x + a0 * (v - v_rest) * (v - v_c)) / tau;
  s = spike(h - v_threshold, sigmoid(4));
  sd = where(detach_reset, detach(s), s);
  v = where(soft_reset, h - sd * v_threshold, sd * v_reset + (1 - sd) * h);
}
)";

constexpr std::array<std::pair<std::string_view, std::string_view>, 7> kBuiltins = {{
    {"if", kIf},
    {"lif", kLif},
    {"plif", kPlif},
    {"alif", kAlif},
    {"izhikevich", kIzhikevich},
    {"eif", kEif},
    {"qif", kQif},
}};

// Parameters that divide (time constants, the exponential's slope): > 0.
constexpr std::array<std::pair<std::string_view, std::string_view>, 8> kPositive = {{
    {"lif", "tau"},
    {"alif", "tau"},
    {"alif", "tau_a"},
    {"izhikevich", "tau"},
    {"izhikevich", "tau_w"},
    {"eif", "tau"},
    {"eif", "delta_T"},
    {"qif", "tau"},
}};

// The 1/0 switches read with where().
constexpr std::array<std::string_view, 3> kFlags = {"decay_input", "soft_reset", "detach_reset"};

bool is_builtin(std::string_view name) {
  for (const auto& entry : kBuiltins)
    if (entry.first == name) return true;
  return false;
}

bool has_parameter(std::string_view neuron, std::string_view param) {
  const std::string needle = detail::cat("param ", param, " = ");
  return builtin_neuron_source(neuron).find(needle) != std::string_view::npos;
}

std::string number(double value) {
  char text[64];
  std::snprintf(text, sizeof text, "%.9g", value);
  return text;
}

}  // namespace

void check_builtin_parameter(std::string_view neuron, std::string_view param, double value) {
  if (!is_builtin(neuron) || !has_parameter(neuron, param)) return;
  auto fail = [&](std::string_view domain) {
    throw ValueError(detail::cat("neuron ", neuron, ": ", param, " must be ", domain, " (got ",
                                 number(value), ")"));
  };
  if (!std::isfinite(value)) fail("finite");
  for (std::string_view flag : kFlags)
    if (flag == param && value != 0.0 && value != 1.0) fail("0 or 1");
  for (const auto& [builtin, positive] : kPositive)
    if (builtin == neuron && positive == param && !(value > 0.0)) fail("> 0");
}

std::string_view builtin_neuron_source(std::string_view name) {
  for (const auto& [builtin, source] : kBuiltins)
    if (builtin == name) return source;
  std::string names;
  for (const auto& entry : kBuiltins) names += detail::cat(names.empty() ? "" : ", ", entry.first);
  throw NeuronError(detail::cat("no built-in neuron '", name, "'; built-ins: ", names), 0, 0);
}

std::vector<std::string> builtin_neuron_names() {
  std::vector<std::string> names;
  for (const auto& entry : kBuiltins) names.emplace_back(entry.first);
  return names;
}

}  // namespace flexkit
