// .npy reading and writing (NumPy format spec, versions 1.0-3.0).
#include "flexkit/npy.hpp"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/storage.hpp"
#include "core/text.hpp"
#include "flexkit/error.hpp"

namespace flexkit {

using detail::cat;

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr std::size_t kMagicSize = 6;
constexpr std::size_t kHeaderAlignment = 64;

struct NpyHeader {
  char byte_order = '<';
  DType dtype = DType::f32;
  bool fortran_order = false;
  Shape shape;
};

std::string descr_of(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "<f4";
    case DType::f64:
      return "<f8";
    case DType::flex16:
      return "<i2";
    case DType::bf16:
      return "<u2";
    case DType::u8:
      return "|u1";
    case DType::i32:
      return "<i4";
  }
  return "";
}

// A minimal reader for the Python dict literal NumPy writes as the header.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::filesystem::path& path)
      : text_(text), path_(path) {}

  NpyHeader parse() {
    NpyHeader h;
    bool have_descr = false, have_order = false, have_shape = false;
    expect('{');
    while (true) {
      skip_space();
      if (peek() == '}') break;
      std::string key = quoted();
      expect(':');
      if (key == "descr") {
        skip_space();
        if (peek() != '\'' && peek() != '"')
          fail("structured dtypes (a list 'descr') are not supported");
        parse_descr(quoted(), h);
        have_descr = true;
      } else if (key == "fortran_order") {
        skip_space();
        if (text_.substr(pos_, 4) == "True")
          h.fortran_order = true, pos_ += 4;
        else if (text_.substr(pos_, 5) == "False")
          h.fortran_order = false, pos_ += 5;
        else
          fail("'fortran_order' is neither True nor False");
        have_order = true;
      } else if (key == "shape") {
        h.shape = tuple();
        have_shape = true;
      } else {
        fail(cat("unexpected key '", key, "'"));
      }
      skip_space();
      if (peek() == ',') ++pos_;
    }
    if (!have_descr || !have_order || !have_shape)
      fail("the header lacks one of 'descr', 'fortran_order', 'shape'");
    return h;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw FormatError(cat("load_npy: ", path_.string(), ": bad header (", why, "): ", text_));
  }
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  void expect(char c) {
    skip_space();
    if (peek() != c) fail(cat("expected '", c, "' at offset ", pos_));
    ++pos_;
  }
  std::string quoted() {
    skip_space();
    char q = peek();
    if (q != '\'' && q != '"') fail(cat("expected a quoted string at offset ", pos_));
    std::size_t end = text_.find(q, pos_ + 1);
    if (end == std::string_view::npos) fail("unterminated string");
    std::string s(text_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return s;
  }
  Shape tuple() {
    expect('(');
    Shape shape;
    while (true) {
      skip_space();
      if (peek() == ')') {
        ++pos_;
        return shape;
      }
      std::size_t start = pos_;
      while (std::isdigit(static_cast<unsigned char>(peek()))) ++pos_;
      if (start == pos_) fail(cat("expected a dimension at offset ", pos_));
      std::int64_t extent = 0;
      auto digits = text_.substr(start, pos_ - start);
      auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), extent);
      if (ec != std::errc() || end != digits.data() + digits.size())
        fail(cat("dimension ", digits, " does not fit in 64 bits"));
      shape.push_back(extent);
      skip_space();
      if (peek() == 'L') ++pos_;  // Python 2 longs in old files
      skip_space();
      if (peek() == ',') ++pos_;
    }
  }
  void parse_descr(const std::string& d, NpyHeader& h) const {
    if (d.size() < 3) fail(cat("dtype '", d, "' is not understood"));
    h.byte_order = d[0];
    std::string kind = d.substr(1);
    if (h.byte_order == '=') h.byte_order = '<';
    if (h.byte_order != '<' && h.byte_order != '>' && h.byte_order != '|')
      fail(cat("dtype '", d, "' has an unknown byte order"));
    if (kind == "f4")
      h.dtype = DType::f32;
    else if (kind == "f8")
      h.dtype = DType::f64;
    else if (kind == "i2")
      h.dtype = DType::flex16;
    else if (kind == "u2")
      h.dtype = DType::bf16;
    else if (kind == "u1")
      h.dtype = DType::u8;
    else if (kind == "i4")
      h.dtype = DType::i32;
    else
      throw FormatError(cat("load_npy: ", path_.string(), ": dtype '", d,
                            "' is not supported; expected float32 (<f4), float64 (<f8), uint8 "
                            "(|u1), int32 (<i4), int16 (<i2, flex16 mantissas) or uint16 (<u2, "
                            "bf16 bits)"));
  }

  std::string_view text_;
  std::size_t pos_ = 0;
  const std::filesystem::path& path_;
};

void byteswap(char* data, std::size_t count, std::size_t size) {
  for (std::size_t i = 0; i < count; ++i) std::reverse(data + i * size, data + (i + 1) * size);
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
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw IoError(cat("save_npy: cannot open ", tmp.string(), " for writing"));
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

Array load_npy(const std::filesystem::path& path, Device device) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw IoError(cat("load_npy: ", path.string(), " is a directory, not a .npy file"));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(cat("load_npy: cannot open ", path.string()));
  std::string bytes;
  try {
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  } catch (const std::ios_base::failure& e) {
    throw IoError(cat("load_npy: reading ", path.string(), " failed: ", e.what()));
  }
  if (in.bad()) throw IoError(cat("load_npy: reading ", path.string(), " failed"));
  if (bytes.size() < kMagicSize + 4 || bytes.compare(0, kMagicSize, kMagic, kMagicSize) != 0)
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
  NpyHeader h =
      HeaderParser(std::string_view(bytes).substr(header_start, header_len), path).parse();
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
  if (__builtin_mul_overflow(count, itemsize(h.dtype), &data_bytes))
    throw FormatError(cat("load_npy: ", path.string(), ": shape ", shape_str(h.shape),
                          " needs more bytes than memory can address"));
  if (bytes.size() - data_start < data_bytes)
    throw FormatError(cat("load_npy: ", path.string(), " is truncated: shape ", shape_str(h.shape),
                          " of ", dtype_name(h.dtype), " needs ", data_bytes,
                          " bytes of data, the file has ", bytes.size() - data_start));
  int iwl = h.dtype == DType::flex16 ? read_sidecar_iwl(path) : 0;

  // Fortran order is C order of the reversed shape; transpose back and copy into C order.
  Shape stored = h.shape;
  if (h.fortran_order) std::reverse(stored.begin(), stored.end());
  Array host = Array::empty(stored, h.dtype, Device::cpu());
  if (data_bytes) std::memcpy(host.data(), bytes.data() + data_start, data_bytes);
  if (h.byte_order == '>') byteswap(static_cast<char*>(host.data()), count, itemsize(h.dtype));
  if (h.dtype == DType::flex16) {
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
  std::string dict = cat("{'descr': '", descr_of(array.dtype()),
                         "', 'fortran_order': False, 'shape': ", shape_str(array.shape()), ", }");
  // Pad with spaces so the data starts on a 64-byte boundary, newline last (as NumPy does).
  std::size_t prefix = kMagicSize + 2 + 2;
  bool v2 = false;
  std::size_t total =
      (prefix + dict.size() + 1 + kHeaderAlignment - 1) / kHeaderAlignment * kHeaderAlignment;
  if (total - prefix > 65535) {
    v2 = true;
    prefix += 2;
    total = (prefix + dict.size() + 1 + kHeaderAlignment - 1) / kHeaderAlignment * kHeaderAlignment;
  }
  std::size_t header_len = total - prefix;
  dict.append(header_len - dict.size() - 1, ' ');
  dict += '\n';
  std::string head(kMagic, kMagicSize);
  head += static_cast<char>(v2 ? 2 : 1);
  head += '\0';
  for (int i = 0; i < (v2 ? 4 : 2); ++i) head += static_cast<char>((header_len >> (8 * i)) & 0xff);
  head += dict;
  if (array.dtype() == DType::flex16) {
    std::ostringstream iwl_text;
    iwl_text << array.iwl() << "\n";
    write_atomically(flex16_sidecar_path(path), iwl_text.str(), nullptr, 0);
  }
  write_atomically(path, head, host.data(), host.nbytes());
}

}  // namespace flexkit
