// Array: a strided view of typed elements on one device. Copying an Array copies the handle;
// views (slicing, transpose, reshape, broadcast_to) share storage and never copy elements.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "flexkit/device.hpp"
#include "flexkit/dtype.hpp"
#include "flexkit/flex16.hpp"
#include "flexkit/index.hpp"
#include "flexkit/shape.hpp"

namespace flexkit {

namespace detail {
class Storage;
}
class Expr;
class Autoflex;

class Array {
 public:
  // An empty handle; every operation on it except defined() throws.
  Array() = default;
  Array(const Array&) = default;
  Array(Array&&) noexcept = default;
  ~Array() = default;

  // On a named array, `a = b` rebinds the handle (like any C++ value). On a temporary view,
  // `a.index("1:") = b` writes b's elements through the view, as NumPy's a[1:] = b does.
  Array& operator=(const Array&) & = default;
  Array& operator=(Array&&) & noexcept = default;
  Array& operator=(const Array& source) &&;
  // Evaluates an expression into the elements this array views (see expr.hpp).
  Array& operator=(const Expr& e);
  Array& operator+=(const Expr& e);
  Array& operator-=(const Expr& e);
  Array& operator*=(const Expr& e);
  Array& operator/=(const Expr& e);

  // ---- factories -------------------------------------------------------------------------
  // Uninitialised elements (flex16 starts at iwl 0).
  static Array empty(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Array zeros(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Array ones(const Shape& shape, DType dtype, Device device = Device::cpu());
  // flex16 picks the finest iwl holding `value`; NaN/inf into flex16 or u8/i32 throw ValueError.
  static Array full(const Shape& shape, double value, DType dtype, Device device = Device::cpu());
  // NumPy arange: ceil((stop - start) / step) elements start, start + step, ...
  static Array arange(double start, double stop, double step, DType dtype,
                      Device device = Device::cpu());
  static Array arange(std::int64_t n, DType dtype, Device device = Device::cpu()) {
    return arange(0.0, static_cast<double>(n), 1.0, dtype, device);
  }

  // Host data in, element type deciding the dtype: float f32, double f64, uint8_t u8,
  // int32_t i32, BF16 bf16. The span holds the elements in row-major order.
  template <class Element>
  static Array from_span(std::span<const Element> data, const Shape& shape,
                         Device device = Device::cpu());
  template <class Element>
  static Array from_vector(const std::vector<Element>& data, const Shape& shape,
                           Device device = Device::cpu()) {
    return from_span<Element>(std::span<const Element>(data), shape, device);
  }
  // Host floats converted to any dtype (flex16 encoded as `options` says; bf16 rounded to
  // nearest even; u8/i32 must hold integral values in range).
  static Array from_floats(std::span<const float> data, const Shape& shape, DType dtype,
                           Device device = Device::cpu(), const Flex16EncodeOptions& options = {});
  // Raw flex16 mantissas with their exponent.
  static Array from_flex16(std::span<const std::int16_t> mantissas, int iwl, const Shape& shape,
                           Device device = Device::cpu());

  // Memory another library owns (a NumPy array, a PyTorch or CuPy tensor), viewed without a
  // copy: `data` is element [0, 0, ...], strides are in elements (any sign, 0 allowed) and
  // `owner` is held until the last view of the result goes, then released (the memory is
  // never freed by flexkit). flex16 views start at `iwl`. Throws ShapeError (rank, negative
  // extents, strides of the wrong length), DTypeError (f64 on CUDA), ValueError (a null
  // pointer for a non-empty array).
  static Array from_external(void* data, DType dtype, const Shape& shape, const Strides& strides,
                             Device device, std::shared_ptr<void> owner, bool writable = true,
                             int iwl = 0);

  // ---- host data out (row-major order of this view) ----------------------------------------
  // T must be the dtype's element type (int16_t for flex16 mantissas, BF16 for bf16).
  template <class Element>
  std::vector<Element> to_vector() const;
  // Every dtype converted to float (flex16 decoded exactly; f64 rounded).
  std::vector<float> to_floats() const;
  std::vector<double> to_doubles() const;

  // ---- host data in, through this view ---------------------------------------------------
  template <class Element>
  void copy_from(std::span<const Element> data);
  // Floats converted to this dtype; flex16 encodes at this array's iwl (saturation counted).
  void assign_floats(std::span<const float> data);

  // ---- properties ------------------------------------------------------------------------
  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const;
  const Shape& shape() const { return shape_; }
  const Strides& strides() const { return strides_; }  // in elements
  std::int64_t offset() const { return offset_; }      // in elements from the storage start
  int rank() const { return static_cast<int>(shape_.size()); }
  std::int64_t size() const;
  std::int64_t dim(int axis) const;
  std::size_t nbytes() const { return static_cast<std::size_t>(size()) * itemsize(dtype_); }
  bool is_contiguous() const;
  bool writable() const { return writable_; }
  // Address of element [0, 0, ...] on the array's device.
  void* data() const;
  // One exponent per storage: every view of a flex16 tensor shares it.
  int iwl() const;
  // Re-labels the exponent (the mantissas are kept: values change by a power of two).
  void set_iwl(int iwl);
  // What the last flex16 write into this storage recorded.
  Flex16Stats stats() const;
  // The exponent manager that writes under IwlPolicy::autoflex consult (flexkit/autoflex.hpp):
  // one per storage, made on first use; set_autoflex shares another one (a manager that outlives
  // this storage, as a layer's fresh output buffer every step needs).
  Autoflex autoflex() const;
  void set_autoflex(const Autoflex& manager);
  bool shares_storage(const Array& other) const;
  // "f32[3, 4] cuda:0" — used in messages.
  std::string describe() const;
  // Values, NumPy-style.
  std::string str() const;

  // ---- views -----------------------------------------------------------------------------
  // A(1, slice(0, 5, 2), ellipsis): integers drop an axis, slices keep it, newaxis inserts one.
  template <class... I>
  Array operator()(const I&... index) const {
    const Index entries[] = {Index(index)...};
    return this->index(std::span<const Index>(entries, sizeof...(I)));
  }
  Array index(std::span<const Index> entries) const;
  Array index(std::string_view numpy_text) const;  // "1:, ::-2, ..."
  Array T() const;                                 // reverse all axes
  Array transpose(std::span<const int> perm) const;
  Array transpose(std::initializer_list<int> perm) const {
    return transpose(std::span<const int>(perm.begin(), perm.size()));
  }
  // A view with a new shape (one -1 is inferred); ShapeError if the layout forbids a view.
  Array reshape(const Shape& shape) const;
  // Read-only view repeating size-1 axes (stride 0), NumPy rules.
  Array broadcast_to(const Shape& shape) const;

  // ---- copies ----------------------------------------------------------------------------
  Array copy_to(Device device) const;  // contiguous copy on `device`
  Array contiguous() const;            // this if already contiguous, else a copy
  Array clone() const;                 // always a fresh contiguous copy
  // Writes src (same dtype, broadcastable, any device) into the elements this view covers.
  // Overlapping source and destination are handled by copying the source first.
  void assign(const Array& src);
  // Every viewed element set to value (flex16: encoded at this iwl, saturation counted).
  void fill(double value);

 private:
  Array(std::shared_ptr<detail::Storage> storage, DType dtype, Shape shape, Strides strides,
        std::int64_t offset, bool writable);
  void require_defined(const char* operation) const;
  void require_writable(const char* operation) const;
  friend struct ArrayAccess;

  std::shared_ptr<detail::Storage> storage_;
  DType dtype_ = DType::f32;
  Shape shape_;
  Strides strides_;
  std::int64_t offset_ = 0;
  bool writable_ = true;
};

}  // namespace flexkit
