// The parts of the NumPy .npy format that load_npy/save_npy and the .npz archives share: the
// header dict, the preamble written before the data, and the descr strings of the dtypes.
#pragma once
#include <string>
#include <string_view>

#include "flexkit/dtype.hpp"
#include "flexkit/shape.hpp"

namespace flexkit::detail {

inline constexpr std::string_view kNpyMagic{"\x93NUMPY", 6};

// What a header's dict literal says: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }.
struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  Shape shape;
};

// How a reader reports a bad header: a FormatError reading prefix + " (" + why + ")" + suffix, so
// each reader keeps its own wording around the reason. A reason that quotes the offending value
// itself (a bad dimension) leaves the suffix out: with_suffix false.
struct NpyHeaderErrors {
  std::string prefix;
  std::string suffix;

  [[noreturn]] void fail(const std::string& why, bool with_suffix = true) const;
};

// Parses the header text (the dict, without the preamble before it). The descr is returned as
// written; what it means is the caller's to decide. Throws through `errors`.
NpyHeader parse_npy_header(std::string_view text, const NpyHeaderErrors& errors);

// The preamble before the data: magic, version, header length, and the dict in C order.
std::string npy_preamble(std::string_view descr, const Shape& shape);

// The descr of a dtype's elements as held in memory: flex16 is its int16 mantissas (<i2), bf16
// its raw uint16 bits (<u2).
const char* npy_descr(DType dtype);

}  // namespace flexkit::detail
