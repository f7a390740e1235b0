// The .npy header dict and preamble (NumPy format spec, versions 1.0-3.0).
#include "core/npy_format.hpp"

#include <cctype>
#include <charconv>
#include <cstdint>

#include "core/text.hpp"
#include "flexkit/error.hpp"

namespace flexkit::detail {

namespace {

constexpr std::size_t kHeaderAlignment = 64;

// A minimal reader for the Python dict literal NumPy writes as the header.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const NpyHeaderErrors& errors)
      : text_(text), errors_(errors) {}

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
        h.descr = quoted();
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
  [[noreturn]] void fail(const std::string& why, bool with_suffix = true) const {
    errors_.fail(why, with_suffix);
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
      const bool negative = peek() == '-';
      if (negative) ++pos_;
      const std::size_t digits_start = pos_;
      while (std::isdigit(static_cast<unsigned char>(peek()))) ++pos_;
      if (digits_start == pos_) fail(cat("expected a dimension at offset ", start));
      auto digits = text_.substr(start, pos_ - start);
      if (negative) fail(cat("dimension ", shape.size(), " is negative: ", digits), false);
      std::int64_t extent = 0;
      auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), extent);
      if (ec != std::errc() || end != digits.data() + digits.size())
        fail(cat("dimension ", shape.size(), " does not fit in 64 bits: ", digits), false);
      shape.push_back(extent);
      skip_space();
      if (peek() == 'L') ++pos_;  // Python 2 longs in old files
      skip_space();
      if (peek() == ',') ++pos_;
    }
  }

  std::string_view text_;
  std::size_t pos_ = 0;
  const NpyHeaderErrors& errors_;
};

}  // namespace

void NpyHeaderErrors::fail(const std::string& why, bool with_suffix) const {
  throw FormatError(cat(prefix, " (", why, ")", with_suffix ? suffix : std::string()));
}

NpyHeader parse_npy_header(std::string_view text, const NpyHeaderErrors& errors) {
  return HeaderParser(text, errors).parse();
}

std::string npy_preamble(std::string_view descr, const Shape& shape) {
  std::string dict =
      cat("{'descr': '", descr, "', 'fortran_order': False, 'shape': ", shape_str(shape), ", }");
  // Pad with spaces so the data starts on a 64-byte boundary, newline last (as NumPy does).
  // Version 1.0 holds the length in 16 bits; a longer header needs 2.0 and its 32-bit length.
  std::size_t prefix = kNpyMagic.size() + 2 + 2;
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
  std::string head(kNpyMagic);
  head += static_cast<char>(v2 ? 2 : 1);
  head += '\0';
  for (int i = 0; i < (v2 ? 4 : 2); ++i) head += static_cast<char>((header_len >> (8 * i)) & 0xff);
  return head + dict;
}

const char* npy_descr(DType dtype) {
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

}  // namespace flexkit::detail
