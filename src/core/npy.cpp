// .npy reading and writing (NumPy format spec, versions 1.0-3.0).
#include "flexkit/npy.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/npy_format.hpp"
#include "core/storage.hpp"
#include "core/text.hpp"
#include "flexkit/error.hpp"

namespace flexkit {

using detail::cat;

namespace {

// What load_npy makes of a header's descr.
struct ElementType {
  char byte_order = '<';
  DType dtype = DType::f32;
};

ElementType element_type(const std::string& d, const detail::NpyHeaderErrors& errors,
                         const std::filesystem::path& path) {
  if (d.size() < 3) errors.fail(cat("dtype '", d, "' is not understood"));
  ElementType t;
  t.byte_order = d[0];
  std::string kind = d.substr(1);
  if (t.byte_order == '=') t.byte_order = '<';
  if (t.byte_order != '<' && t.byte_order != '>' && t.byte_order != '|')
    errors.fail(cat("dtype '", d, "' has an unknown byte order"));
  if (kind == "f4")
    t.dtype = DType::f32;
  else if (kind == "f8")
    t.dtype = DType::f64;
  else if (kind == "i2")
    t.dtype = DType::flex16;
  else if (kind == "u2")
    t.dtype = DType::bf16;
  else if (kind == "u1")
    t.dtype = DType::u8;
  else if (kind == "i4")
    t.dtype = DType::i32;
  else
    throw FormatError(cat("load_npy: ", path.string(), ": dtype '", d,
                          "' is not supported; expected float32 (<f4), float64 (<f8), uint8 "
                          "(|u1), int32 (<i4), int16 (<i2, flex16 mantissas with a .iwl sidecar) "
                          "or uint16 (<u2, bf16 bits with a .bf16 sidecar)"));
  return t;
}

void byteswap(char* data, std::size_t count, std::size_t size) {
  for (std::size_t i = 0; i < count; ++i) std::reverse(data + i * size, data + (i + 1) * size);
}

// The reason the last failed call gave, as ": <reason>", or nothing when it left none.
std::string errno_reason(int error) {
  if (error == 0) return "";
  return cat(": ", std::strerror(error));
}

// '<u2' is both NumPy's uint16 and the raw bits of a bf16 array saved by flexkit; the sidecar
// that save_npy writes next to a bf16 file tells the two apart.
void check_bf16_sidecar(const std::filesystem::path& npy_path, const std::string& descr) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(bf16_sidecar_path(npy_path), ec)) return;
  throw FormatError(cat("load_npy: ", npy_path.string(), " holds uint16 values ('", descr,
                        "'); flexkit has no uint16 dtype (convert to int32 or float32 in NumPy); "
                        "a bf16 array saved by flexkit has a .bf16 sidecar next to it"));
}

int read_sidecar_iwl(const std::filesystem::path& npy_path) {
  auto sidecar = flex16_sidecar_path(npy_path);
  std::ifstream in(sidecar);
  if (!in)
    throw FormatError(cat("load_npy: ", npy_path.string(), " holds int16 data, read as flex16 ",
                          "mantissas, but its iwl sidecar ", sidecar.string(), " is missing"));
  int iwl = 0;
  std::string rest;
  if (!(in >> iwl) || (in >> rest))
    throw FormatError(
        cat("load_npy: the sidecar ", sidecar.string(), " should hold one integer (the iwl)"));
  if (iwl < kFlex16MinIwl || iwl > kFlex16MaxIwl)
    throw FormatError(cat("load_npy: the sidecar ", sidecar.string(), " holds iwl ", iwl,
                          ", outside [", kFlex16MinIwl, ", ", kFlex16MaxIwl, "]"));
  return iwl;
}

void write_atomically(const std::filesystem::path& path, const std::string& head, const void* data,
                      std::size_t bytes) {
  auto tmp = path;
  tmp += cat(".tmp.", ::getpid());
  {
    errno = 0;
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) {
      const int error = errno;
      throw IoError(
          cat("save_npy: cannot open ", tmp.string(), " for writing", errno_reason(error)));
    }
    out.write(head.data(), static_cast<std::streamsize>(head.size()));
    if (bytes) out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
    out.flush();
    if (!out) {
      out.close();
      std::filesystem::remove(tmp);
      throw IoError(cat("save_npy: writing ", tmp.string(), " failed (disk full?)"));
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp);
    throw IoError(
        cat("save_npy: cannot move ", tmp.string(), " to ", path.string(), ": ", ec.message()));
  }
}

}  // namespace

std::filesystem::path flex16_sidecar_path(const std::filesystem::path& npy_path) {
  auto p = npy_path;
  p += ".iwl";
  return p;
}

std::filesystem::path bf16_sidecar_path(const std::filesystem::path& npy_path) {
  auto p = npy_path;
  p += ".bf16";
  return p;
}

Array load_npy(const std::filesystem::path& path, Device device) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw IoError(cat("load_npy: ", path.string(), " is a directory, not a .npy file"));
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error = errno;
    throw IoError(cat("load_npy: cannot open ", path.string(), errno_reason(error)));
  }
  std::string bytes;
  try {
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  } catch (const std::ios_base::failure& e) {
    throw IoError(cat("load_npy: reading ", path.string(), " failed: ", e.what()));
  }
  if (in.bad()) throw IoError(cat("load_npy: reading ", path.string(), " failed"));
  if (bytes.size() < detail::kNpyMagic.size() + 4 ||
      std::string_view(bytes).substr(0, detail::kNpyMagic.size()) != detail::kNpyMagic)
    throw FormatError(cat("load_npy: ", path.string(),
                          " is not a .npy file (it does not start with \\x93NUMPY)"));
  const int major = static_cast<unsigned char>(bytes[6]);
  std::size_t header_len = 0, header_start = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) |
                 (static_cast<std::size_t>(static_cast<unsigned char>(bytes[9])) << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) throw FormatError(cat("load_npy: ", path.string(), " is truncated"));
    for (int i = 3; i >= 0; --i)
      header_len = (header_len << 8) | static_cast<unsigned char>(bytes[8 + i]);
    header_start = 12;
  } else {
    throw FormatError(cat("load_npy: ", path.string(), " has .npy version ", major,
                          ".x; versions 1-3 are supported"));
  }
  if (bytes.size() < header_start + header_len)
    throw FormatError(cat("load_npy: ", path.string(), " is truncated inside its header"));
  const std::string_view header_text = std::string_view(bytes).substr(header_start, header_len);
  // Syntax errors quote the dict, without the padding after it.
  std::string_view dict = header_text;
  while (!dict.empty() && std::isspace(static_cast<unsigned char>(dict.back())))
    dict.remove_suffix(1);
  const detail::NpyHeaderErrors errors{cat("load_npy: ", path.string(), ": bad header"),
                                       cat(": ", dict)};
  const detail::NpyHeader h = detail::parse_npy_header(header_text, errors);
  const auto [byte_order, dtype] = element_type(h.descr, errors, path);
  if (dtype == DType::bf16) check_bf16_sidecar(path, h.descr);
  if (h.shape.size() > static_cast<std::size_t>(kMaxRank))
    throw ShapeError(cat("load_npy: ", path.string(), " has shape ", shape_str(h.shape),
                         " of rank ", h.shape.size(), "; at most ", kMaxRank, " is supported"));

  const std::size_t data_start = header_start + header_len;
  // Extents come from the file: multiply with overflow checks before trusting the product.
  std::size_t count = 1, data_bytes = 0;
  for (std::int64_t extent : h.shape)
    if (__builtin_mul_overflow(count, static_cast<std::size_t>(extent), &count))
      throw FormatError(cat("load_npy: ", path.string(), ": shape ", shape_str(h.shape),
                            " has more elements than memory can address"));
  if (__builtin_mul_overflow(count, itemsize(dtype), &data_bytes))
    throw FormatError(cat("load_npy: ", path.string(), ": shape ", shape_str(h.shape),
                          " needs more bytes than memory can address"));
  if (bytes.size() - data_start < data_bytes)
    throw FormatError(cat("load_npy: ", path.string(), " is truncated: shape ", shape_str(h.shape),
                          " of ", dtype_name(dtype), " needs ", data_bytes,
                          " bytes of data, the file has ", bytes.size() - data_start));
  int iwl = dtype == DType::flex16 ? read_sidecar_iwl(path) : 0;

  // Fortran order is C order of the reversed shape; transpose back and copy into C order.
  Shape stored = h.shape;
  if (h.fortran_order) std::reverse(stored.begin(), stored.end());
  Array host = Array::empty(stored, dtype, Device::cpu());
  if (data_bytes) std::memcpy(host.data(), bytes.data() + data_start, data_bytes);
  if (byte_order == '>') byteswap(static_cast<char*>(host.data()), count, itemsize(dtype));
  if (dtype == DType::flex16) {
    host.set_iwl(iwl);
    Flex16Stats stats{};
    auto* m = static_cast<const std::int16_t*>(host.data());
    for (std::size_t i = 0; i < count; ++i)
      stats.max_abs_m = std::max<int32_t>(stats.max_abs_m, std::abs(int32_t{m[i]}));
    ArrayAccess::storage(host).set_stats(stats);
  }
  if (h.fortran_order) host = host.T().clone();
  return device.is_cpu() ? host : host.copy_to(device);
}

void save_npy(const std::filesystem::path& path, const Array& array) {
  if (!array.defined()) throw ValueError("save_npy: the array is empty (default-constructed)");
  Array host = array.device().is_cpu() ? array.contiguous() : array.copy_to(Device::cpu());
  const std::string head = detail::npy_preamble(detail::npy_descr(array.dtype()), array.shape());
  if (array.dtype() == DType::flex16) {
    std::ostringstream iwl_text;
    iwl_text << array.iwl() << "\n";
    write_atomically(flex16_sidecar_path(path), iwl_text.str(), nullptr, 0);
  }
  if (array.dtype() == DType::bf16) write_atomically(bf16_sidecar_path(path), "bf16\n", nullptr, 0);
  write_atomically(path, head, host.data(), host.nbytes());
}

}  // namespace flexkit
