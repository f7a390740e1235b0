// What the binding files share: the registration functions module.cpp calls and the
// conversions from Python values (dtype and device spellings, array-likes, expressions).
#pragma once
#include <nanobind/nanobind.h>

#include <string>

#include "flexkit/array.hpp"
#include "flexkit/expr.hpp"
#include "flexkit/neuron.hpp"

namespace flexkit::python {

namespace nb = nanobind;

void bind_errors(nb::module_& m);
void bind_array(nb::module_& m);
void bind_dlpack(nb::module_& m, nb::class_<Array>& array_class);
void bind_expr(nb::module_& m);
void bind_ops(nb::module_& m);
void bind_neuron(nb::module_& m);
void bind_train(nb::module_& m);

// "f32", "float32", "bfloat16", numpy.float32, numpy.dtype('uint8'), torch.int32, ...
DType dtype_from(nb::handle value);
// "cpu", "cuda", "cuda:1", a torch.device, or an int (a CUDA device index).
Device device_from(nb::handle value);
// A flexkit.Array as it is; anything else through flexkit.array (zero-copy where it can be).
Array to_array(nb::handle value);
// Arrays and numbers as expression leaves; other array-likes through to_array.
Expr to_expr(nb::handle value);
// IwlPolicy from "fixed" / "exact".
IwlPolicy iwl_policy_from(const std::string& name);
const char* iwl_policy_name(IwlPolicy policy);

// A zero-copy import of an object with __dlpack__ or the buffer protocol; TypeError for a dtype
// flexkit has no equivalent of, ValueError for a device it cannot address.
Array import_dlpack(nb::handle value, bool writable);

// Dict of array-likes (or None) to NamedArrays; `what` names the argument in errors.
NamedArrays named_arrays_from(nb::handle mapping, const char* what);
nb::dict named_arrays_to_dict(const NamedArrays& arrays);

}  // namespace flexkit::python
