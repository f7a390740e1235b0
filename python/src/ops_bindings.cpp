// The heavy operations and files: fk.dot, fk.conv.fprop / bprop / update, the kernels they would
// run (fk.dot_kernel_name, fk.conv.kernel_name), .npy files, and what the CUDA runtime reports.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "flexkit/conv.hpp"
#include "flexkit/cuda.hpp"
#include "flexkit/error.hpp"
#include "flexkit/gemm.hpp"
#include "flexkit/npy.hpp"

namespace flexkit::python {

namespace {

std::vector<std::int64_t> geometry(nb::handle value) {
  if (value.is_none()) return {};
  if (PyLong_Check(value.ptr())) return {nb::cast<std::int64_t>(value)};
  return nb::cast<std::vector<std::int64_t>>(value);
}

ConvParams conv_params(nb::handle padding, nb::handle stride, nb::handle dilation,
                       nb::handle upscale) {
  ConvParams p;
  p.padding = geometry(padding);
  p.stride = geometry(stride);
  p.dilation = geometry(dilation);
  p.upscale = geometry(upscale);
  return p;
}

// dot's and the convolutions' options (one struct, HeavyOpOptions) from their keyword arguments.
HeavyOpOptions heavy_op_options(double alpha, double beta, const std::string& policy,
                                std::optional<int> iwl) {
  HeavyOpOptions o;
  o.alpha = alpha;
  o.beta = beta;
  o.iwl_policy = iwl_policy_from(policy);
  o.iwl = iwl;
  return o;
}

// The dtype of an output the caller did not give: f32 for f32 operands, otherwise flex16 with
// the exact policy unless out_dtype says f32.
DType integer_output(const Array& a, const Array& b, nb::handle out_dtype) {
  if (!out_dtype.is_none()) return dtype_from(out_dtype);
  return a.dtype() == DType::f32 && b.dtype() == DType::f32 ? DType::f32 : DType::flex16;
}

// A fresh output for a call given none, on a's device: integer_output's dtype; a flex16 one
// takes the exact policy unless an exponent was asked for.
template <class Options>
Array fresh_output(const Shape& shape, const Array& a, const Array& b, nb::handle out_dtype,
                   Options& options) {
  const DType dtype = integer_output(a, b, out_dtype);
  if (dtype == DType::flex16 && !options.iwl) options.iwl_policy = IwlPolicy::exact;
  return Array::empty(shape, dtype, a.device());
}

// The output fk.dot makes when given none: its shape from the operands, the exact policy unless
// told otherwise.
Array fresh_dot_output(const Array& a, const Array& b, nb::handle out_dtype, DotOptions& options) {
  Shape shape = a.rank() == 3 ? Shape{a.dim(0), a.dim(1), 0} : Shape{a.dim(0), 0};
  if (b.rank() == 3 && a.rank() == 2) shape = {b.dim(0), a.dim(0), 0};
  shape.back() = b.dim(b.rank() - 1);
  return fresh_output(shape, a, b, out_dtype, options);
}

ConvDirection conv_direction(const std::string& name) {
  if (name == "fprop") return ConvDirection::fprop;
  if (name == "bprop") return ConvDirection::bprop;
  if (name == "update") return ConvDirection::update;
  throw nb::value_error(
      ("conv.kernel_name: direction '" + name + "': expected 'fprop', 'bprop' or 'update'")
          .c_str());
}

Shape shape_of(nb::handle value) {
  if (nb::isinstance<Array>(value)) return nb::cast<const Array&>(value).shape();
  return nb::cast<Shape>(value);
}

#define FLEXKIT_CONV_GEOMETRY_ARGS                                                           \
  nb::arg("padding") = nb::none(), nb::arg("stride") = nb::none(),                           \
  nb::arg("dilation") = nb::none(), nb::arg("upscale") = nb::none(), nb::arg("alpha") = 1.0, \
  nb::arg("beta") = 0.0, nb::arg("iwl_policy") = "fixed", nb::arg("iwl") = nb::none(),       \
  nb::arg("out_dtype") = nb::none()

}  // namespace

void bind_ops(nb::module_& m) {
  m.def(
      "dot",
      [](nb::handle a_like, nb::handle b_like, std::optional<Array> out, double alpha, double beta,
         const std::string& iwl_policy, std::optional<int> iwl, nb::handle out_dtype) {
        const Array a = to_array(a_like), b = to_array(b_like);
        DotOptions options = heavy_op_options(alpha, beta, iwl_policy, iwl);
        if (out) {
          dot(a, b, *out, options);
          return *out;
        }
        if (beta != 0.0) throw nb::value_error("dot: beta != 0 needs an `out` to accumulate into");
        const DType dtype = integer_output(a, b, out_dtype);
        if (alpha == 1.0 && !iwl && options.iwl_policy == IwlPolicy::fixed)
          return dot(a, b, std::optional<DType>(dtype));
        Array result = fresh_dot_output(a, b, out_dtype, options);
        dot(a, b, result, options);
        return result;
      },
      nb::arg("a"), nb::arg("b"), nb::arg("out") = nb::none(), nb::kw_only(),
      nb::arg("alpha") = 1.0, nb::arg("beta") = 0.0, nb::arg("iwl_policy") = "fixed",
      nb::arg("iwl") = nb::none(), nb::arg("out_dtype") = nb::none(),
      "out = alpha * a @ b + beta * out, batched over a leading axis. f32 x f32 gives f32;\n"
      "flex16 x flex16, flex16 x u8 and u8 x flex16 are exact integer products, rounded once\n"
      "(bit-identical on every backend), into flex16 (a fresh output takes the smallest exponent\n"
      "that holds it) or f32 (out_dtype='f32'). Transposes come from views: fk.dot(a.T, b).\n"
      "Returns out, or the new array.");
  m.def(
      "dot_kernel_name",
      [](nb::handle a_like, nb::handle b_like, std::optional<Array> out, double alpha, double beta,
         const std::string& iwl_policy, std::optional<int> iwl, nb::handle out_dtype) {
        const Array a = to_array(a_like), b = to_array(b_like);
        DotOptions options = heavy_op_options(alpha, beta, iwl_policy, iwl);
        if (!out) out = fresh_dot_output(a, b, out_dtype, options);
        return dot_kernel_name(a, b, *out, options);
      },
      nb::arg("a"), nb::arg("b"), nb::arg("out") = nb::none(), nb::kw_only(),
      nb::arg("alpha") = 1.0, nb::arg("beta") = 0.0, nb::arg("iwl_policy") = "fixed",
      nb::arg("iwl") = nb::none(), nb::arg("out_dtype") = nb::none(),
      "The kernel fk.dot would run with these arguments, by its stable name ('cpu.avx2',\n"
      "'cuda.planar', ...; docs/kernels.md), without running it; raises as fk.dot would.");

  nb::module_ conv = m.def_submodule(
      "conv",
      "Convolutions with 1-3 spatial dims, batch innermost: input (C, [D, [H,]] W, N), filter\n"
      "(C, [T, [R,]] S, K), output (K, [M, [P,]] Q, N). fk.conv.to_layout turns PyTorch's NCHW\n"
      "activations and KCRS weights into these layouts; from_layout turns them back.");
  conv.def(
      "output_shape",
      [](nb::handle input, nb::handle filter, nb::handle padding, nb::handle stride,
         nb::handle dilation, nb::handle upscale) {
        return conv_output_shape(shape_of(input), shape_of(filter),
                                 conv_params(padding, stride, dilation, upscale));
      },
      nb::arg("input_shape"), nb::arg("filter_shape"), nb::kw_only(),
      nb::arg("padding") = nb::none(), nb::arg("stride") = nb::none(),
      nb::arg("dilation") = nb::none(), nb::arg("upscale") = nb::none());
  conv.def(
      "fprop",
      [](nb::handle input_like, nb::handle filter_like, std::optional<Array> output,
         nb::handle padding, nb::handle stride, nb::handle dilation, nb::handle upscale,
         double alpha, double beta, const std::string& policy, std::optional<int> iwl,
         nb::handle out_dtype) {
        const Array input = to_array(input_like), filter = to_array(filter_like);
        const ConvParams params = conv_params(padding, stride, dilation, upscale);
        ConvOptions options = heavy_op_options(alpha, beta, policy, iwl);
        if (!output)
          output = fresh_output(conv_output_shape(input.shape(), filter.shape(), params), input,
                                filter, out_dtype, options);
        fprop(input, filter, *output, params, options);
        return *output;
      },
      nb::arg("input"), nb::arg("filter"), nb::arg("output") = nb::none(), nb::kw_only(),
      FLEXKIT_CONV_GEOMETRY_ARGS,
      "output = alpha * conv(input, filter) + beta * output; returns output (a new array when\n"
      "none is given: f32 for f32 operands, else flex16 with the smallest exponent that holds\n"
      "it).");
  conv.def(
      "bprop",
      [](nb::handle filter_like, nb::handle grad_output_like, std::optional<Array> grad_input,
         std::optional<Shape> input_shape, nb::handle padding, nb::handle stride,
         nb::handle dilation, nb::handle upscale, double alpha, double beta,
         const std::string& policy, std::optional<int> iwl, nb::handle out_dtype) {
        const Array filter = to_array(filter_like), grad_output = to_array(grad_output_like);
        const ConvParams params = conv_params(padding, stride, dilation, upscale);
        ConvOptions options = heavy_op_options(alpha, beta, policy, iwl);
        if (!grad_input) {
          if (!input_shape)
            throw nb::value_error("bprop: give grad_input or input_shape (the forward's input)");
          grad_input = fresh_output(*input_shape, filter, grad_output, out_dtype, options);
        }
        bprop(filter, grad_output, *grad_input, params, options);
        return *grad_input;
      },
      nb::arg("filter"), nb::arg("grad_output"), nb::arg("grad_input") = nb::none(), nb::kw_only(),
      nb::arg("input_shape") = nb::none(), FLEXKIT_CONV_GEOMETRY_ARGS,
      "grad_input = alpha * d<output, grad_output>/d input + beta * grad_input.");
  conv.def(
      "update",
      [](nb::handle input_like, nb::handle grad_output_like, std::optional<Array> grad_filter,
         std::optional<Shape> filter_shape, nb::handle padding, nb::handle stride,
         nb::handle dilation, nb::handle upscale, double alpha, double beta,
         const std::string& policy, std::optional<int> iwl, nb::handle out_dtype) {
        const Array input = to_array(input_like), grad_output = to_array(grad_output_like);
        const ConvParams params = conv_params(padding, stride, dilation, upscale);
        ConvOptions options = heavy_op_options(alpha, beta, policy, iwl);
        if (!grad_filter) {
          if (!filter_shape) throw nb::value_error("update: give grad_filter or filter_shape");
          grad_filter = fresh_output(*filter_shape, input, grad_output, out_dtype, options);
        }
        update(input, grad_output, *grad_filter, params, options);
        return *grad_filter;
      },
      nb::arg("input"), nb::arg("grad_output"), nb::arg("grad_filter") = nb::none(), nb::kw_only(),
      nb::arg("filter_shape") = nb::none(), FLEXKIT_CONV_GEOMETRY_ARGS,
      "grad_filter = alpha * d<output, grad_output>/d filter + beta * grad_filter (summed over\n"
      "the batch and every output position).");
  conv.def(
      "kernel_name",
      [](const std::string& direction, nb::handle x_like, nb::handle y_like, const Array& out,
         nb::handle padding, nb::handle stride, nb::handle dilation, nb::handle upscale,
         double alpha, double beta, const std::string& policy, std::optional<int> iwl) {
        return conv_kernel_name(conv_direction(direction), to_array(x_like), to_array(y_like), out,
                                conv_params(padding, stride, dilation, upscale),
                                heavy_op_options(alpha, beta, policy, iwl));
      },
      nb::arg("direction"), nb::arg("x"), nb::arg("y"), nb::arg("out"), nb::kw_only(),
      nb::arg("padding") = nb::none(), nb::arg("stride") = nb::none(),
      nb::arg("dilation") = nb::none(), nb::arg("upscale") = nb::none(), nb::arg("alpha") = 1.0,
      nb::arg("beta") = 0.0, nb::arg("iwl_policy") = "fixed", nb::arg("iwl") = nb::none(),
      "The kernel the call in `direction` ('fprop', 'bprop', 'update') would run on (x, y, out)\n"
      "in that call's operand order, by its stable name ('cpu.avx2', 'cuda.implicit_gemm.lean',\n"
      "...; docs/kernels.md), without running it; raises as the call would.");
  conv.def(
      "to_layout", [](nb::handle x) { return to_conv_layout(to_array(x)); }, nb::arg("x"),
      "PyTorch's (N, C, ...) or (K, C, ...) as flexkit's (C, ..., N) / (C, ..., K) (a copy).");
  conv.def(
      "from_layout", [](nb::handle x) { return from_conv_layout(to_array(x)); }, nb::arg("x"),
      "The inverse of to_layout (a copy).");

  m.def(
      "load_npy",
      [](const std::string& path, nb::handle device) {
        return load_npy(path, device_from(device));
      },
      nb::arg("path"), nb::arg("device") = "cpu",
      "Reads a .npy file (flex16 and bf16 with their sidecar files).");
  m.def(
      "save_npy", [](const std::string& path, nb::handle a) { save_npy(path, to_array(a)); },
      nb::arg("path"), nb::arg("array"),
      "Writes a .npy file atomically (flex16 and bf16 with a sidecar file).");

  nb::module_ cuda_module = m.def_submodule("cuda", "The CUDA runtime as flexkit sees it.");
  cuda_module.def("built_with_cuda", &cuda::built_with_cuda,
                  "True when this build has the CUDA backend.");
  cuda_module.def("device_count", &cuda::device_count,
                  "The number of usable CUDA devices (0 without a GPU; never raises).");
  cuda_module.def("is_available", [] { return cuda::device_count() > 0; });
  cuda_module.def("synchronize", &cuda::synchronize, nb::arg("device") = 0,
                  "Waits for the work flexkit queued on the device's current stream.");
  cuda_module.def(
      "allocator_stats",
      [](int device) {
        const cuda::AllocatorStats s = cuda::allocator_stats(device);
        nb::dict d;
        d["in_use_bytes"] = s.in_use_bytes;
        d["cached_bytes"] = s.cached_bytes;
        d["peak_in_use_bytes"] = s.peak_in_use_bytes;
        d["device_allocations"] = s.device_allocations;
        d["cache_hits"] = s.cache_hits;
        return d;
      },
      nb::arg("device") = 0);
  cuda_module.def("empty_cache", &cuda::empty_cache,
                  "Returns the caching allocator's free blocks to the driver.");
}

}  // namespace flexkit::python
