// The extension module flexkit._flexkit, and the conversions from Python values the binding
// files share. The package's pure-Python layer (python/flexkit) builds on it.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "bindings.hpp"
#include "flexkit/error.hpp"
#include "flexkit/version.hpp"

namespace flexkit::python {

DType dtype_from(nb::handle value) {
  if (value.is_none()) throw nb::type_error("dtype: None is not a dtype");
  std::string name = nb::cast<std::string>(nb::str(value));
  // numpy.float32 prints as "<class 'numpy.float32'>", torch.float32 as "torch.float32".
  if (nb::hasattr(value, "__name__") && !nb::isinstance<nb::str>(value))
    name = nb::cast<std::string>(value.attr("__name__"));
  if (name.rfind("torch.", 0) == 0) name = name.substr(6);
  if (name == "bfloat16") name = "bf16";
  if (name == "bool") name = "u8";
  return parse_dtype(name);
}

Device device_from(nb::handle value) {
  if (value.is_none()) return Device::cpu();
  if (PyLong_Check(value.ptr())) return Device::cuda(nb::cast<int>(value));
  return Device::parse(nb::cast<std::string>(nb::str(value)));
}

Array to_array(nb::handle value) {
  if (nb::isinstance<Array>(value)) return nb::cast<Array>(value);
  // Held for the life of the process and never released: a static nb::object would be
  // decref'd by exit()'s destructors after the interpreter is gone (a crash at exit).
  static nb::handle array_function =
      nb::object(nb::module_::import_("flexkit").attr("array")).release();
  return nb::cast<Array>(array_function(value));
}

Expr to_expr(nb::handle value) {
  if (nb::isinstance<Expr>(value)) return nb::cast<Expr>(value);
  if (nb::isinstance<Array>(value)) return Expr(nb::cast<const Array&>(value));
  if (PyFloat_Check(value.ptr()) || PyLong_Check(value.ptr())) return Expr(nb::cast<double>(value));
  return Expr(to_array(value));
}

IwlPolicy iwl_policy_from(const std::string& name) {
  if (name == "fixed") return IwlPolicy::fixed;
  if (name == "exact") return IwlPolicy::exact;
  if (name == "autoflex") return IwlPolicy::autoflex;
  throw nb::value_error(
      ("iwl_policy: '" + name + "' is not 'fixed', 'exact' or 'autoflex'").c_str());
}

const char* iwl_policy_name(IwlPolicy policy) {
  switch (policy) {
    case IwlPolicy::exact:
      return "exact";
    case IwlPolicy::autoflex:
      return "autoflex";
    case IwlPolicy::fixed:
      break;
  }
  return "fixed";
}

NamedArrays named_arrays_from(nb::handle mapping, const char* what) {
  NamedArrays arrays;
  if (mapping.is_none()) return arrays;
  if (!nb::isinstance<nb::dict>(mapping))
    throw nb::type_error((std::string(what) + ": a dict of arrays by name, or None").c_str());
  for (auto [key, value] : nb::borrow<nb::dict>(mapping))
    arrays.emplace(nb::cast<std::string>(key), to_array(value));
  return arrays;
}

nb::dict named_arrays_to_dict(const NamedArrays& arrays) {
  nb::dict d;
  for (const auto& [name, array] : arrays) d[name.c_str()] = nb::cast(array);
  return d;
}

}  // namespace flexkit::python

NB_MODULE(_flexkit, m) {
  using namespace flexkit::python;
  m.doc() = "flexkit's C++ core (import flexkit, not this module)";
  // Objects still referenced when the interpreter exits (a torch module holding a neuron, an
  // autograd graph) are not leaks worth a report at every exit.
  nb::set_leak_warnings(false);
  m.attr("__version__") = std::string(flexkit::kVersion);
  bind_errors(m);
  bind_array(m);
  auto array_class = nb::borrow<nb::class_<flexkit::Array>>(m.attr("Array"));
  bind_dlpack(m, array_class);
  bind_expr(m);
  bind_ops(m);
  bind_neuron(m);
  bind_train(m);
  m.def("_dtype_name",
        [](nb::handle d) { return std::string(flexkit::dtype_name(dtype_from(d))); });
  m.def("_device_name", [](nb::handle d) { return device_from(d).str(); });
}
