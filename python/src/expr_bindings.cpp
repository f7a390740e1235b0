// Fused expressions from Python: the functions of expr.hpp, fk.evaluate and fk.assign.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include "bindings.hpp"

namespace flexkit::python {

namespace {

using Unary = Expr (*)(const Expr&);
using Binary = Expr (*)(const Expr&, const Expr&);
using Reduction = Expr (*)(const Expr&, int);
using FullReduction = Expr (*)(const Expr&);

void unary(nb::module_& m, const char* name, Unary op, const char* doc) {
  m.def(
      name, [op](nb::handle a) { return op(to_expr(a)); }, nb::arg("x"), doc);
}

void binary(nb::module_& m, const char* name, Binary op, const char* doc) {
  m.def(
      name, [op](nb::handle a, nb::handle b) { return op(to_expr(a), to_expr(b)); }, nb::arg("a"),
      nb::arg("b"), doc);
}

void reduction(nb::module_& m, const char* name, Reduction op, FullReduction full,
               const char* doc) {
  m.def(
      name,
      [op, full](nb::handle a, std::optional<int> axis) {
        return axis ? op(to_expr(a), *axis) : full(to_expr(a));
      },
      nb::arg("x"), nb::arg("axis") = nb::none(), doc);
}

}  // namespace

void bind_expr(nb::module_& m) {
  unary(m, "abs", static_cast<Unary>(flexkit::abs), "|x|");
  unary(m, "negative", static_cast<Unary>(flexkit::neg), "-x");
  unary(m, "square", static_cast<Unary>(flexkit::sqr), "x * x");
  unary(m, "sqrt", static_cast<Unary>(flexkit::sqrt), "The square root.");
  unary(m, "exp", static_cast<Unary>(flexkit::exp), "e ** x");
  unary(m, "exp2", static_cast<Unary>(flexkit::exp2), "2 ** x");
  unary(m, "log", static_cast<Unary>(flexkit::log), "The natural logarithm.");
  unary(m, "log2", static_cast<Unary>(flexkit::log2), "The base-2 logarithm.");
  unary(m, "sig", static_cast<Unary>(flexkit::sig), "The logistic function 1 / (1 + e ** -x).");
  unary(m, "sig2", static_cast<Unary>(flexkit::sig2), "1 / (1 + 2 ** -x).");
  unary(m, "tanh", static_cast<Unary>(flexkit::tanh), "tanh (±1 for large |x|, never NaN).");
  unary(m, "tanh2", static_cast<Unary>(flexkit::tanh2), "tanh(x * ln 2).");
  unary(m, "reciprocal", static_cast<Unary>(flexkit::reciprocal), "1 / x");
  unary(m, "floor", static_cast<Unary>(flexkit::floor), "Rounds down.");
  unary(m, "ceil", static_cast<Unary>(flexkit::ceil), "Rounds up.");
  unary(m, "sign", static_cast<Unary>(flexkit::sign), "-1, 0 or 1.");
  binary(m, "maximum", static_cast<Binary>(flexkit::maximum), "The elementwise maximum.");
  binary(m, "minimum", static_cast<Binary>(flexkit::minimum), "The elementwise minimum.");
  binary(m, "power", static_cast<Binary>(flexkit::pow), "a ** b");
  binary(m, "pow", static_cast<Binary>(flexkit::pow), "a ** b");
  binary(m, "equal", static_cast<Binary>(flexkit::eq), "1.0 where a == b, else 0.0.");
  binary(m, "not_equal", static_cast<Binary>(flexkit::ne), "1.0 where a != b, else 0.0.");
  binary(m, "less", static_cast<Binary>(flexkit::lt), "1.0 where a < b, else 0.0.");
  binary(m, "less_equal", static_cast<Binary>(flexkit::le), "1.0 where a <= b, else 0.0.");
  binary(m, "greater", static_cast<Binary>(flexkit::gt), "1.0 where a > b, else 0.0.");
  binary(m, "greater_equal", static_cast<Binary>(flexkit::ge), "1.0 where a >= b, else 0.0.");
  m.def(
      "clip",
      [](nb::handle a, nb::handle lo, nb::handle hi) {
        return clip(to_expr(a), to_expr(lo), to_expr(hi));
      },
      nb::arg("x"), nb::arg("lo"), nb::arg("hi"), "min(max(x, lo), hi)");
  m.def(
      "where",
      [](nb::handle c, nb::handle a, nb::handle b) {
        return where(to_expr(c), to_expr(a), to_expr(b));
      },
      nb::arg("condition"), nb::arg("a"), nb::arg("b"), "a where condition != 0, else b.");
  reduction(m, "sum", static_cast<Reduction>(flexkit::sum),
            static_cast<FullReduction>(flexkit::sum),
            "The sum over `axis` (kept with size 1), or over every axis.");
  reduction(m, "max", static_cast<Reduction>(flexkit::max),
            static_cast<FullReduction>(flexkit::max),
            "The maximum over `axis` (kept with size 1), or over every axis.");
  reduction(m, "min", static_cast<Reduction>(flexkit::min),
            static_cast<FullReduction>(flexkit::min),
            "The minimum over `axis` (kept with size 1), or over every axis.");
  reduction(m, "mean", static_cast<Reduction>(flexkit::mean),
            static_cast<FullReduction>(flexkit::mean),
            "The mean over `axis` (kept with size 1), or over every axis.");
  reduction(m, "argmax", static_cast<Reduction>(flexkit::argmax),
            static_cast<FullReduction>(flexkit::argmax),
            "The index of the maximum over `axis` (ties: the lowest), as a number.");
  reduction(m, "argmin", static_cast<Reduction>(flexkit::argmin),
            static_cast<FullReduction>(flexkit::argmin),
            "The index of the minimum over `axis` (ties: the lowest), as a number.");

  m.def(
      "evaluate",
      [](nb::handle e, nb::handle dtype) { return evaluate(to_expr(e), dtype_from(dtype)); },
      nb::arg("expr"), nb::arg("dtype") = "f32",
      "Evaluates an expression into a new contiguous array on its operands' device (one fused\n"
      "kernel); flex16 results take the smallest exponent that holds them.");
  m.def(
      "assign",
      [](const Array& out, nb::handle e, const std::string& iwl_policy, std::optional<int> iwl,
         const std::string& rounding, std::uint64_t seed) {
        AssignOptions options;
        options.iwl_policy = iwl_policy_from(iwl_policy);
        options.iwl = iwl;
        if (rounding == "stochastic")
          options.rounding = Rounding::stochastic;
        else if (rounding != "nearest")
          throw nb::value_error(
              ("rounding: '" + rounding + "' is not 'nearest' or 'stochastic'").c_str());
        options.seed = seed;
        assign(out, to_expr(e), options);
        return out;
      },
      nb::arg("out"), nb::arg("expr"), nb::kw_only(), nb::arg("iwl_policy") = "fixed",
      nb::arg("iwl") = nb::none(), nb::arg("rounding") = "nearest", nb::arg("seed") = 0,
      "Evaluates expr into every element `out` views; for flex16 outputs, iwl_policy 'fixed'\n"
      "keeps out's exponent (or sets `iwl` first), 'exact' picks the smallest that holds the\n"
      "result, and 'autoflex' stores at the exponent out's manager predicts from its history\n"
      "(exact on its first write; saturating values widen the next one). rounding 'stochastic'\n"
      "rounds flex16 values up with probability equal to the fraction dropped, drawn from\n"
      "(seed, element offset): the same seed gives the same bits on CPU and CUDA. Returns out.");
}

}  // namespace flexkit::python
