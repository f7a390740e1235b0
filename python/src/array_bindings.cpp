// flexkit.Array: properties, NumPy-style indexing to views, writes through views, factories,
// and the operators that build fused expressions.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cmath>

#include "bindings.hpp"
#include "flexkit/error.hpp"

namespace flexkit::python {

namespace {

std::optional<std::int64_t> optional_int(nb::handle value) {
  if (value.is_none()) return std::nullopt;
  return nb::cast<std::int64_t>(value);
}

Index index_entry(nb::handle key) {
  if (PySlice_Check(key.ptr())) {
    Slice s;
    s.start = optional_int(key.attr("start"));
    s.stop = optional_int(key.attr("stop"));
    nb::object step = key.attr("step");
    s.step = step.is_none() ? 1 : nb::cast<std::int64_t>(step);
    return s;
  }
  if (key.ptr() == Py_Ellipsis) return ellipsis;
  if (key.is_none()) return newaxis;
  if (PyBool_Check(key.ptr()))
    throw nb::type_error("flexkit.Array: boolean indices are not supported (use fk.where)");
  if (PyIndex_Check(key.ptr())) return nb::cast<std::int64_t>(nb::int_(key));
  throw nb::type_error(
      ("flexkit.Array: an index must be an int, a slice, ..., None or a tuple of them (got " +
       nb::cast<std::string>(nb::str(nb::handle(reinterpret_cast<PyObject*>(Py_TYPE(key.ptr()))))) +
       ")")
          .c_str());
}

std::vector<Index> index_entries(nb::handle key) {
  std::vector<Index> entries;
  if (PyTuple_Check(key.ptr())) {
    for (nb::handle item : nb::borrow<nb::tuple>(key)) entries.push_back(index_entry(item));
  } else {
    entries.push_back(index_entry(key));
  }
  return entries;
}

Array view_of(const Array& a, nb::handle key) {
  const std::vector<Index> entries = index_entries(key);
  return a.index(std::span<const Index>(entries));
}

// out[key] = value: expressions and numbers are evaluated into the view (any dtype); an array
// of the same dtype is copied exactly (flex16 keeps its mantissas), broadcasting as NumPy does.
void set_item(const Array& a, nb::handle key, nb::handle value) {
  Array view = view_of(a, key);
  if (PyFloat_Check(value.ptr()) || PyLong_Check(value.ptr())) {
    view.fill(nb::cast<double>(value));
    return;
  }
  if (nb::isinstance<Array>(value)) {
    const Array& source = nb::cast<const Array&>(value);
    if (source.dtype() == view.dtype()) {
      view.assign(source);
      return;
    }
  }
  assign(view, to_expr(value));
}

Shape shape_from(nb::handle value, const char* what) {
  if (PyLong_Check(value.ptr())) return {nb::cast<std::int64_t>(value)};
  try {
    return nb::cast<Shape>(value);
  } catch (const nb::cast_error&) {
    throw nb::type_error((std::string(what) + ": a shape is an int or a sequence of ints").c_str());
  }
}

Shape shape_from_args(const nb::args& args, const char* what) {
  if (args.size() == 1) return shape_from(args[0], what);
  Shape shape;
  for (nb::handle item : args) shape.push_back(nb::cast<std::int64_t>(item));
  return shape;
}

nb::tuple to_tuple(const std::vector<std::int64_t>& values) {
  nb::list list;
  for (auto v : values) list.append(v);
  return nb::tuple(list);
}

template <class Class>
void add_operators(Class& cls) {
  auto binary = [&cls](const char* name, Expr (*op)(const Expr&, const Expr&), bool reflected) {
    if (reflected) {
      cls.def(name, [op](nb::handle a, nb::handle b) { return op(to_expr(b), to_expr(a)); });
    } else {
      cls.def(name, [op](nb::handle a, nb::handle b) { return op(to_expr(a), to_expr(b)); });
    }
  };
  using BinaryOp = Expr (*)(const Expr&, const Expr&);
  binary("__add__", static_cast<BinaryOp>(flexkit::operator+), false);
  binary("__radd__", static_cast<BinaryOp>(flexkit::operator+), true);
  binary("__sub__", static_cast<BinaryOp>(flexkit::operator-), false);
  binary("__rsub__", static_cast<BinaryOp>(flexkit::operator-), true);
  binary("__mul__", static_cast<BinaryOp>(flexkit::operator*), false);
  binary("__rmul__", static_cast<BinaryOp>(flexkit::operator*), true);
  binary("__truediv__", static_cast<BinaryOp>(flexkit::operator/), false);
  binary("__rtruediv__", static_cast<BinaryOp>(flexkit::operator/), true);
  binary("__pow__", static_cast<BinaryOp>(flexkit::pow), false);
  binary("__rpow__", static_cast<BinaryOp>(flexkit::pow), true);
  binary("__lt__", static_cast<BinaryOp>(flexkit::lt), false);
  binary("__le__", static_cast<BinaryOp>(flexkit::le), false);
  binary("__gt__", static_cast<BinaryOp>(flexkit::gt), false);
  binary("__ge__", static_cast<BinaryOp>(flexkit::ge), false);
  binary("__eq__", static_cast<BinaryOp>(flexkit::eq), false);
  binary("__ne__", static_cast<BinaryOp>(flexkit::ne), false);
  cls.def("__neg__", [](nb::handle a) { return -to_expr(a); });
  cls.def("__pos__", [](nb::handle a) { return to_expr(a); });
  cls.def("__abs__", [](nb::handle a) { return flexkit::abs(to_expr(a)); });
}

}  // namespace

void bind_array(nb::module_& m) {
  nb::class_<Array> array(m, "Array",
                          "A strided view of typed elements on one device (cpu or cuda:N).\n\n"
                          "Indexing gives views that share memory (a[1:, ::2], a[..., None]);\n"
                          "assignment through a view writes the elements it covers:\n"
                          "``out[...] = a * b + c`` evaluates the expression as one fused kernel.\n"
                          "Arithmetic on arrays builds a lazy flexkit.Expr.");
  array
      .def_prop_ro(
          "shape", [](const Array& a) { return to_tuple(a.shape()); }, "The extents.")
      .def_prop_ro(
          "strides", [](const Array& a) { return to_tuple(a.strides()); },
          "Strides in elements (not bytes, unlike NumPy).")
      .def_prop_ro(
          "dtype", [](const Array& a) { return std::string(dtype_name(a.dtype())); },
          "'f32', 'f64', 'flex16', 'bf16', 'u8' or 'i32'.")
      .def_prop_ro(
          "device", [](const Array& a) { return a.device().str(); }, "'cpu' or 'cuda:N'.")
      .def_prop_ro("ndim", &Array::rank)
      .def_prop_ro("size", &Array::size, "The number of elements.")
      .def_prop_ro("itemsize", [](const Array& a) { return itemsize(a.dtype()); })
      .def_prop_ro("nbytes", &Array::nbytes)
      .def_prop_ro("writable", &Array::writable)
      .def_prop_ro("is_contiguous", &Array::is_contiguous)
      .def_prop_ro(
          "data_ptr", [](const Array& a) { return reinterpret_cast<std::uintptr_t>(a.data()); },
          "The address of element [0, 0, ...] on the array's device.")
      .def_prop_rw("iwl", &Array::iwl, &Array::set_iwl,
                   "flex16: the shared exponent (integer word length) of the storage; setting it\n"
                   "re-labels the mantissas (values change by a power of two).")
      .def(
          "stats",
          [](const Array& a) {
            const Flex16Stats s = a.stats();
            nb::dict d;
            d["max_abs_mantissa"] = s.max_abs_m;
            d["saturated"] = s.saturated;
            d["nan_count"] = s.nan_count;
            return d;
          },
          "What the last flex16 write into this storage recorded: the largest |mantissa|, the\n"
          "number of saturated values and of NaNs written as zero.")
      .def("__len__",
           [](const Array& a) {
             if (a.rank() == 0) throw nb::type_error("len() of a 0-d flexkit.Array");
             return a.dim(0);
           })
      .def("__getitem__", [](const Array& a, nb::handle key) { return view_of(a, key); })
      .def("__setitem__",
           [](const Array& a, nb::handle key, nb::handle value) { set_item(a, key, value); })
      .def_prop_ro("T", &Array::T, "The view with every axis reversed.")
      .def(
          "transpose",
          [](const Array& a, const nb::args& axes) {
            if (axes.size() == 0) return a.T();
            const Shape perm = shape_from_args(axes, "transpose");
            std::vector<int> p(perm.begin(), perm.end());
            return a.transpose(std::span<const int>(p));
          },
          "A view with the axes permuted (no arguments: reversed).")
      .def(
          "reshape",
          [](const Array& a, const nb::args& shape) {
            return a.reshape(shape_from_args(shape, "reshape"));
          },
          "A view with a new shape (one -1 is inferred); ShapeError if the layout forbids it.")
      .def(
          "broadcast_to",
          [](const Array& a, nb::handle shape) {
            return a.broadcast_to(shape_from(shape, "broadcast_to"));
          },
          "A read-only view repeating size-1 axes, NumPy's rules.")
      .def(
          "copy_to",
          [](const Array& a, nb::handle device) { return a.copy_to(device_from(device)); },
          nb::arg("device"), "A contiguous copy on `device` ('cpu', 'cuda', 'cuda:1').")
      .def("cpu", [](const Array& a) { return a.device().is_cpu() ? a : a.copy_to(Device::cpu()); })
      .def("contiguous", &Array::contiguous, "This array if contiguous, else a contiguous copy.")
      .def("clone", &Array::clone, "A fresh contiguous copy.")
      .def("fill", &Array::fill, nb::arg("value"), "Sets every viewed element to value.")
      .def("shares_memory", &Array::shares_storage, nb::arg("other"))
      .def("__repr__",
           [](const Array& a) { return "flexkit.Array(" + a.str() + ", " + a.describe() + ")"; })
      .def("__str__", &Array::str)
      .def("__bool__", [](const Array&) -> bool {
        throw nb::type_error(
            "the truth value of a flexkit.Array is ambiguous; evaluate a reduction first");
      });
  add_operators(array);
  auto in_place = [&array](const char* name, Expr (*op)(const Expr&, const Expr&)) {
    array.def(name, [op](nb::handle self, nb::handle other) {
      const Array& a = nb::cast<const Array&>(self);
      assign(a, op(Expr(a), to_expr(other)));
      return nb::borrow(self);
    });
  };
  using BinaryOp = Expr (*)(const Expr&, const Expr&);
  in_place("__iadd__", static_cast<BinaryOp>(flexkit::operator+));
  in_place("__isub__", static_cast<BinaryOp>(flexkit::operator-));
  in_place("__imul__", static_cast<BinaryOp>(flexkit::operator*));
  in_place("__itruediv__", static_cast<BinaryOp>(flexkit::operator/));

  nb::class_<Expr> expr(m, "Expr",
                        "A lazy expression over arrays and numbers; nothing runs until it is\n"
                        "assigned (``out[...] = e``) or evaluated (``fk.evaluate(e)``), and then\n"
                        "the whole tree runs as one generated kernel.");
  expr.def_prop_ro(
          "shape", [](const Expr& e) { return to_tuple(e.shape()); },
          "The broadcast shape the expression evaluates to.")
      .def("__repr__",
           [](const Expr& e) { return "flexkit.Expr(shape=" + shape_str(e.shape()) + ")"; })
      .def("__bool__", [](const Expr&) -> bool {
        throw nb::type_error(
            "the truth value of a flexkit.Expr is ambiguous; use fk.where or evaluate it first");
      });
  add_operators(expr);

  m.def(
      "empty",
      [](nb::handle shape, nb::handle dtype, nb::handle device) {
        return Array::empty(shape_from(shape, "empty"), dtype_from(dtype), device_from(device));
      },
      nb::arg("shape"), nb::arg("dtype") = "f32", nb::arg("device") = "cpu",
      "An array of uninitialised elements.");
  m.def(
      "zeros",
      [](nb::handle shape, nb::handle dtype, nb::handle device) {
        return Array::zeros(shape_from(shape, "zeros"), dtype_from(dtype), device_from(device));
      },
      nb::arg("shape"), nb::arg("dtype") = "f32", nb::arg("device") = "cpu");
  m.def(
      "ones",
      [](nb::handle shape, nb::handle dtype, nb::handle device) {
        return Array::ones(shape_from(shape, "ones"), dtype_from(dtype), device_from(device));
      },
      nb::arg("shape"), nb::arg("dtype") = "f32", nb::arg("device") = "cpu");
  m.def(
      "full",
      [](nb::handle shape, double value, nb::handle dtype, nb::handle device) {
        return Array::full(shape_from(shape, "full"), value, dtype_from(dtype),
                           device_from(device));
      },
      nb::arg("shape"), nb::arg("value"), nb::arg("dtype") = "f32", nb::arg("device") = "cpu",
      "flex16 picks the finest exponent that holds value.");
  m.def(
      "arange",
      [](double start, std::optional<double> stop, double step, nb::handle dtype,
         nb::handle device) {
        if (!stop) return Array::arange(0.0, start, step, dtype_from(dtype), device_from(device));
        return Array::arange(start, *stop, step, dtype_from(dtype), device_from(device));
      },
      nb::arg("start"), nb::arg("stop") = nb::none(), nb::arg("step") = 1.0,
      nb::arg("dtype") = "f32", nb::arg("device") = "cpu",
      "NumPy's arange: arange(n) or arange(start, stop, step).");
}

}  // namespace flexkit::python
