// NeuronBuilder writes the neuron language and parses it, so a neuron built in C++ is checked,
// printed and compiled exactly like one written as text.
#include <cmath>
#include <cstdio>

#include "core/text.hpp"
#include "flexkit/neuron.hpp"

namespace flexkit {

using detail::cat;

namespace {

std::string number(double v) {
  if (!std::isfinite(v)) throw ValueError(cat("neuron builder: non-finite number ", v));
  char buffer[40];
  std::snprintf(buffer, sizeof buffer, "%.17g", std::fabs(v));
  std::string text = buffer;
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return std::signbit(v) ? cat("(-", text, ")") : text;
}

NeuronValue binary(const NeuronValue& a, const char* op, const NeuronValue& b) {
  return neuron_value_from_text(cat("(", a.text(), " ", op, " ", b.text(), ")"));
}

}  // namespace

NeuronValue::NeuronValue(double constant) : text_(number(constant)) {}

NeuronValue neuron_value_from_text(std::string text) {
  return NeuronValue(std::move(text), 0);
}

NeuronValue operator+(const NeuronValue& a, const NeuronValue& b) {
  return binary(a, "+", b);
}
NeuronValue operator-(const NeuronValue& a, const NeuronValue& b) {
  return binary(a, "-", b);
}
NeuronValue operator*(const NeuronValue& a, const NeuronValue& b) {
  return binary(a, "*", b);
}
NeuronValue operator/(const NeuronValue& a, const NeuronValue& b) {
  return binary(a, "/", b);
}
NeuronValue operator-(const NeuronValue& a) {
  return neuron_value_from_text(cat("(-", a.text(), ")"));
}
NeuronValue operator<(const NeuronValue& a, const NeuronValue& b) {
  return binary(a, "<", b);
}
NeuronValue operator<=(const NeuronValue& a, const NeuronValue& b) {
  return binary(a, "<=", b);
}
NeuronValue operator>(const NeuronValue& a, const NeuronValue& b) {
  return binary(a, ">", b);
}
NeuronValue operator>=(const NeuronValue& a, const NeuronValue& b) {
  return binary(a, ">=", b);
}

NeuronValue call(std::string_view function, const std::vector<NeuronValue>& args) {
  std::string text = cat(function, "(");
  for (std::size_t i = 0; i < args.size(); ++i) text += cat(i ? ", " : "", args[i].text());
  return neuron_value_from_text(text + ")");
}

NeuronValue spike(const NeuronValue& z, std::string_view surrogate, double alpha) {
  std::string s(surrogate);
  if (alpha >= 0) s += cat("(", number(alpha), ")");
  return neuron_value_from_text(cat("spike(", z.text(), ", ", s, ")"));
}

NeuronValue detach(const NeuronValue& z) {
  return neuron_value_from_text(cat("detach(", z.text(), ")"));
}

NeuronBuilder::NeuronBuilder(std::string name) : name_(std::move(name)) {}

NeuronValue NeuronBuilder::input(const std::string& name) {
  inputs_.push_back(name);
  return neuron_value_from_text(name);
}

NeuronValue NeuronBuilder::state(const std::string& name, double initial_value) {
  states_.push_back(name);
  if (initial_value != 0.0)
    declarations_.push_back(cat("init ", name, " = ", number(initial_value), ";"));
  return neuron_value_from_text(name);
}

NeuronValue NeuronBuilder::param(const std::string& name, double value, bool learnable,
                                 bool per_neuron) {
  // Parameters go before the inits that may read them.
  declarations_.insert(declarations_.begin(),
                       cat(learnable ? "learnable " : "", "param ", name, per_neuron ? "[]" : "",
                           " = ", std::signbit(value) ? "-" : "", number(std::fabs(value)), ";"));
  return neuron_value_from_text(name);
}

NeuronValue NeuronBuilder::let(const std::string& name, const NeuronValue& value) {
  statements_.push_back(cat(name, " = ", value.text(), ";"));
  return neuron_value_from_text(name);
}

void NeuronBuilder::output(const std::string& name, const NeuronValue& value) {
  outputs_.push_back(name);
  statements_.push_back(cat(name, " = ", value.text(), ";"));
}

void NeuronBuilder::update(const std::string& state, const NeuronValue& value) {
  statements_.push_back(cat(state, " = ", value.text(), ";"));
}

std::string NeuronBuilder::text() const {
  auto list = [](const std::vector<std::string>& names) {
    std::string out;
    for (const std::string& n : names) out += cat(out.empty() ? "" : ", ", n);
    return out;
  };
  std::string out = cat("neuron ", name_, "(", list(inputs_));
  if (!states_.empty()) out += cat("; ", list(states_));
  out += ") -> ";
  out += outputs_.size() == 1 ? outputs_[0] : cat("(", list(outputs_), ")");
  out += " {\n";
  for (const std::string& d : declarations_) out += cat("  ", d, "\n");
  for (const std::string& s : statements_) out += cat("  ", s, "\n");
  return out + "}\n";
}

Neuron NeuronBuilder::build() const {
  return Neuron::parse(text(), cat("builder ", name_));
}

}  // namespace flexkit
