// Zero-copy exchange with NumPy, PyTorch and CuPy: DLPack (and the buffer protocol) in, DLPack
// and NumPy views out. The other library's object is held for as long as a flexkit view of its
// memory lives, and a flexkit array for as long as a NumPy or DLPack view of it does.
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <memory>

#include "bindings.hpp"
#include "flexkit/cuda.hpp"
#include "flexkit/error.hpp"

#ifdef FLEXKIT_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace flexkit::python {

namespace {

namespace dl = nb::dlpack;
constexpr int kDeviceCpu = 1, kDeviceCuda = 2, kDeviceCudaHost = 3;

std::optional<DType> dtype_of(dl::dtype t) {
  if (t.lanes != 1) return std::nullopt;
  const auto code = static_cast<dl::dtype_code>(t.code);
  if (code == dl::dtype_code::Float && t.bits == 32) return DType::f32;
  if (code == dl::dtype_code::Float && t.bits == 64) return DType::f64;
  if (code == dl::dtype_code::Bfloat && t.bits == 16) return DType::bf16;
  if (code == dl::dtype_code::UInt && t.bits == 8) return DType::u8;
  if (code == dl::dtype_code::Bool && t.bits == 8) return DType::u8;  // 0/1 bytes
  if (code == dl::dtype_code::Int && t.bits == 32) return DType::i32;
  return std::nullopt;
}

std::string dl_dtype_name(dl::dtype t) {
  const char* kind = "type code ";
  switch (static_cast<dl::dtype_code>(t.code)) {
    case dl::dtype_code::Int:
      kind = "int";
      break;
    case dl::dtype_code::UInt:
      kind = "uint";
      break;
    case dl::dtype_code::Float:
      kind = "float";
      break;
    case dl::dtype_code::Bfloat:
      kind = "bfloat";
      break;
    case dl::dtype_code::Complex:
      kind = "complex";
      break;
    case dl::dtype_code::Bool:
      kind = "bool";
      break;
    default:
      return "type code " + std::to_string(t.code) + " with " + std::to_string(t.bits) + " bits";
  }
  return kind + std::to_string(t.bits);
}

dl::dtype dl_dtype_of(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return nb::dtype<float>();
    case DType::f64:
      return nb::dtype<double>();
    case DType::u8:
      return nb::dtype<std::uint8_t>();
    case DType::i32:
      return nb::dtype<std::int32_t>();
    case DType::flex16:
      return nb::dtype<std::int16_t>();  // the mantissas
    case DType::bf16:
      return {static_cast<std::uint8_t>(dl::dtype_code::Bfloat), 16, 1};
  }
  return {};
}

// A capsule that owns a handle of `a`, so that a view handed to another library keeps the
// memory alive.
nb::capsule owner_of(const Array& a) {
  return nb::capsule(new Array(a), [](void* p) noexcept { delete static_cast<Array*>(p); });
}

template <class Framework>
nb::object view_as(const Array& a, dl::dtype dtype) {
  const std::size_t rank = static_cast<std::size_t>(a.rank());
  std::vector<std::size_t> shape(a.shape().begin(), a.shape().end());
  const Device device = a.device();
  nb::ndarray<Framework> view(a.data(), rank, shape.data(), owner_of(a), a.strides().data(), dtype,
                              device.is_cuda() ? kDeviceCuda : kDeviceCpu,
                              device.is_cuda() ? device.index : 0);
  return nb::cast(view, nb::rv_policy::reference);
}

void require_exportable(const Array& a, const char* operation) {
  if (a.dtype() == DType::flex16)
    throw nb::type_error((std::string(operation) +
                          ": a flex16 array has no DLPack/NumPy dtype; use .numpy() for "
                          "its values (a float32 copy) or .mantissas() with .iwl")
                             .c_str());
}

// Makes `consumer` (a DLPack stream number: 1 the legacy default stream, 2 the per-thread
// one, else a cudaStream_t) wait for the work flexkit queued on its current stream, without
// blocking the host.
void order_streams(const Array& a, nb::handle stream) {
#ifdef FLEXKIT_HAVE_CUDA
  if (stream.is_none()) return;
  const auto value = nb::cast<std::intptr_t>(stream);
  if (value == -1) return;  // the consumer asked for no synchronisation
  const int device = a.device().index;
  auto producer = static_cast<cudaStream_t>(cuda::current_stream(device));
  cudaStream_t consumer = value == 1   ? cudaStreamLegacy
                          : value == 2 ? cudaStreamPerThread
                                       : reinterpret_cast<cudaStream_t>(value);
  // The null stream is the legacy default stream (1 or 0 in DLPack's numbering).
  if (consumer == producer || ((value == 0 || value == 1) && producer == nullptr)) return;
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(device);
  cudaEvent_t event;
  cudaError_t status = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
  if (status == cudaSuccess) {
    status = cudaEventRecord(event, producer);
    if (status == cudaSuccess) status = cudaStreamWaitEvent(consumer, event, 0);
    cudaEventDestroy(event);
  }
  cudaSetDevice(previous);
  if (status != cudaSuccess)
    throw CudaError(std::string("__dlpack__: ordering the consumer's stream: ") +
                    cudaGetErrorString(status));
#else
  (void)a;
  (void)stream;
#endif
}

}  // namespace

Array import_dlpack(nb::handle value, bool writable) {
  nb::ndarray<nb::ro> source;
  if (!nb::try_cast(value, source, false)) {
    nb::str type_name = nb::str(nb::handle(reinterpret_cast<PyObject*>(Py_TYPE(value.ptr()))));
    throw nb::type_error(("flexkit: a " + std::string(type_name.c_str()) +
                          " supports neither DLPack nor the buffer protocol (or has a dtype or "
                          "device nanobind cannot read)")
                             .c_str());
  }
  const std::optional<DType> dtype = dtype_of(source.dtype());
  if (!dtype)
    throw nb::type_error(("flexkit: dtype " + dl_dtype_name(source.dtype()) +
                          " has no flexkit equivalent (float32, float64, bfloat16, uint8, bool, "
                          "int32); convert it first, e.g. fk.array(x, dtype='f32')")
                             .c_str());
  Device device;
  if (source.device_type() == kDeviceCpu || source.device_type() == kDeviceCudaHost)
    device = Device::cpu();
  else if (source.device_type() == kDeviceCuda)
    device = Device::cuda(source.device_id());
  else
    throw nb::value_error(("flexkit: DLPack device type " + std::to_string(source.device_type()) +
                           " is neither the cpu nor a CUDA device")
                              .c_str());
  if (device.is_cuda() && !cuda::built_with_cuda())
    throw nb::value_error("flexkit: a CUDA tensor, but this flexkit was built without CUDA");
  Shape shape(source.ndim());
  Strides strides(source.ndim());
  for (std::size_t i = 0; i < source.ndim(); ++i) {
    shape[i] = static_cast<std::int64_t>(source.shape(i));
    strides[i] = source.stride(i);
  }
  // The ndarray handle keeps the other library's tensor alive; it is released under the GIL.
  auto* held = new nb::ndarray<nb::ro>(source);
  std::shared_ptr<void> owner(held, [](void* p) {
    if (!nb::is_alive()) return;  // the interpreter is gone: nothing left to release
    nb::gil_scoped_acquire gil;
    delete static_cast<nb::ndarray<nb::ro>*>(p);
  });
  return Array::from_external(const_cast<void*>(static_cast<const void*>(source.data())), *dtype,
                              shape, strides, device, std::move(owner), writable);
}

void bind_dlpack(nb::module_& m, nb::class_<Array>& array) {
  array
      .def(
          "__dlpack__",
          [](const Array& a, nb::handle stream, nb::handle max_version, nb::handle dl_device,
             nb::handle copy) {
            require_exportable(a, "__dlpack__");
            if (!copy.is_none() && nb::cast<bool>(copy))
              throw nb::buffer_error(
                  "flexkit.Array.__dlpack__: copy=True is not supported; "
                  "export a.clone() instead");
            if (a.device().is_cuda()) order_streams(a, stream);
            nb::object view = view_as<nb::array_api>(a, dl_dtype_of(a.dtype()));
            nb::kwargs kwargs;
            if (!max_version.is_none()) kwargs["max_version"] = max_version;
            if (!dl_device.is_none()) kwargs["dl_device"] = dl_device;
            return view.attr("__dlpack__")(**kwargs);
          },
          nb::kw_only(), nb::arg("stream") = nb::none(), nb::arg("max_version") = nb::none(),
          nb::arg("dl_device") = nb::none(), nb::arg("copy") = nb::none(),
          "A DLPack capsule viewing this array's memory (no copy); the array stays alive while\n"
          "the capsule's consumer holds it. flex16 arrays are refused (TypeError).")
      .def("__dlpack_device__",
           [](const Array& a) {
             const Device d = a.device();
             return nb::make_tuple(d.is_cuda() ? kDeviceCuda : kDeviceCpu,
                                   d.is_cuda() ? d.index : 0);
           })
      .def(
          "numpy",
          [](const Array& a) -> nb::object {
            if (a.device().is_cpu() && a.dtype() != DType::flex16 && a.dtype() != DType::bf16)
              return view_as<nb::numpy>(a, dl_dtype_of(a.dtype()));
            // NumPy has no bf16 or flex16: their values as float32 (exact), in a copy.
            Array host = a.device().is_cpu() ? a : a.copy_to(Device::cpu());
            if (host.dtype() == DType::flex16 || host.dtype() == DType::bf16)
              host = evaluate(Expr(host), DType::f32);
            return view_as<nb::numpy>(host, dl_dtype_of(host.dtype()));
          },
          "A NumPy array: a view of the same memory for cpu f32/f64/u8/i32 arrays; a copy for\n"
          "cuda arrays; float32 values (a copy, exact) for flex16 and bf16.")
      .def(
          "mantissas",
          [](const Array& a) {
            if (a.dtype() != DType::flex16)
              throw nb::type_error("mantissas(): only flex16 arrays have mantissas");
            Array host = a.device().is_cpu() ? a : a.copy_to(Device::cpu());
            return view_as<nb::numpy>(host, nb::dtype<std::int16_t>());
          },
          "flex16: the int16 mantissas as NumPy (a view on the cpu); value = m * 2**(iwl - 15).")
      .def(
          "__array__",
          [](nb::handle self, nb::handle dtype, nb::handle copy) {
            nb::object result = self.attr("numpy")();
            if (!dtype.is_none()) result = result.attr("astype")(dtype, nb::arg("copy") = false);
            if (!copy.is_none() && nb::cast<bool>(copy)) result = result.attr("copy")();
            return result;
          },
          nb::arg("dtype") = nb::none(), nb::kw_only(), nb::arg("copy") = nb::none());

  m.def(
      "from_dlpack",
      [](nb::handle value) {
        if (nb::isinstance<Array>(value)) return nb::cast<Array>(value);
        return import_dlpack(value, true);
      },
      nb::arg("obj"),
      "A flexkit.Array viewing the memory of `obj` (a NumPy array, a PyTorch or CuPy tensor:\n"
      "anything with __dlpack__ or the buffer protocol), never a copy: its shape and strides\n"
      "are kept. TypeError for dtypes without a flexkit equivalent (e.g. int64, float16),\n"
      "ValueError for devices other than the cpu and CUDA.");
  m.def("_import_dlpack", &import_dlpack, nb::arg("obj"), nb::arg("writable"));
}

}  // namespace flexkit::python
