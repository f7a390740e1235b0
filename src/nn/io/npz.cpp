// .npz archives: a zip file (PKWARE APPNOTE 6.3, stored entries only) of .npy files (NumPy
// format 1.0).
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <set>

#include "core/npy_format.hpp"
#include "core/text.hpp"
#include "flexkit/error.hpp"
#include "flexkit/nn_io.hpp"
#include "nn/io/atomic_file.hpp"
#include "nn/io/utf8.hpp"

namespace flexkit::nn {

using flexkit::detail::cat;
using flexkit::detail::kNpyMagic;
using flexkit::detail::npy_descr;
using flexkit::detail::npy_preamble;

namespace {

static_assert(std::endian::native == std::endian::little,
              "the .npy payloads are written from host memory as little-endian data");

constexpr std::uint32_t kLocalHeaderSignature = 0x04034b50;
constexpr std::uint32_t kCentralHeaderSignature = 0x02014b50;
constexpr std::uint32_t kEndOfCentralDirectorySignature = 0x06054b50;
constexpr std::size_t kLocalHeaderSize = 30;
constexpr std::size_t kCentralHeaderSize = 46;
constexpr std::size_t kEndOfCentralDirectorySize = 22;
constexpr std::uint16_t kVersionNeeded = 20;                   // 2.0: the baseline
constexpr std::uint16_t kVersionMadeBy = (3 << 8) | 20;        // Unix, 2.0
constexpr std::uint32_t kExternalAttributes = 0100644u << 16;  // -rw-r--r--
constexpr std::uint16_t kFlagUtf8Name = 1 << 11;
constexpr std::uint16_t kDosDate1980 = (0 << 9) | (1 << 5) | 1;  // 1980-01-01, time 00:00
constexpr std::uint64_t kZipLimit = 0xFFFFFFFFu;                 // beyond it ZIP64 is needed

// ---- writing ---------------------------------------------------------------------------------

void put16(std::string& out, std::uint32_t v) {
  out += static_cast<char>(v & 0xff);
  out += static_cast<char>((v >> 8) & 0xff);
}
void put32(std::string& out, std::uint32_t v) {
  put16(out, v & 0xffff);
  put16(out, v >> 16);
}

void check_name(const std::string& name, std::set<std::string>& seen) {
  if (name.empty()) throw ValueError("save_npz: an entry has an empty name");
  if (name.find_first_of(std::string("/\\\0", 3)) != std::string::npos)
    throw ValueError(
        cat("save_npz: the entry name \"", name, "\" holds a '/', '\\' or NUL character"));
  for (std::size_t pos = 0; pos < name.size();)
    if (!detail::next_code_point(name, pos))
      throw ValueError(cat("save_npz: the entry name \"", name, "\" is not valid UTF-8"));
  if (!seen.insert(name).second)
    throw ValueError(cat("save_npz: the entry name \"", name, "\" is used twice"));
}

std::u32string utf32_of(const std::string& name, const std::string& text) {
  std::u32string out;
  for (std::size_t pos = 0; pos < text.size();) {
    auto cp = detail::next_code_point(text, pos);
    if (!cp)
      throw ValueError(
          cat("save_npz: the string \"", name, "\" is not valid UTF-8 (at byte ", pos, ")"));
    if (*cp == 0)
      throw ValueError(cat("save_npz: the string \"", name, "\" holds a NUL character, which ",
                           "NumPy's unicode arrays cannot keep"));
    out += *cp;
  }
  return out;
}

// What one entry's .npy file holds: the preamble and a pointer to the elements, kept alive by
// `host` or `floats`.
struct NpyPayload {
  std::string preamble;  // format 1.0: rank <= 8 keeps the header far below 65536 bytes
  const void* data = nullptr;
  std::size_t bytes = 0;
  Array host;
  std::vector<float> floats;
  std::u32string text;
};

// flex16 and bf16 are stored decoded, as float32.
const char* descr_of(DType dtype) {
  const bool decoded = dtype == DType::flex16 || dtype == DType::bf16;
  return npy_descr(decoded ? DType::f32 : dtype);
}

std::size_t stored_itemsize(DType dtype) {
  return dtype == DType::flex16 || dtype == DType::bf16 ? sizeof(float) : itemsize(dtype);
}

NpyPayload array_payload(const Array& a) {
  NpyPayload p;
  p.preamble = npy_preamble(descr_of(a.dtype()), a.shape());
  p.host = a.device().is_cpu() ? a.contiguous() : a.copy_to(Device::cpu());
  if (a.dtype() == DType::flex16 || a.dtype() == DType::bf16) {
    p.floats = p.host.to_floats();
    p.host = Array();
    p.data = p.floats.data();
    p.bytes = p.floats.size() * sizeof(float);
  } else {
    p.data = p.host.data();
    p.bytes = p.host.nbytes();
  }
  return p;
}

NpyPayload string_payload(std::u32string text) {
  NpyPayload p;
  // NumPy has no '<U0' scalar: an empty string is one NUL, which NumPy strips on reading.
  if (text.empty()) text.push_back(U'\0');
  p.preamble = npy_preamble(cat("<U", text.size()), {});
  p.text = std::move(text);
  p.data = p.text.data();
  p.bytes = p.text.size() * sizeof(char32_t);
  return p;
}

struct CentralEntry {
  std::string name;
  std::uint16_t flags = 0;
  std::uint32_t crc = 0;
  std::uint32_t size = 0;
  std::uint32_t offset = 0;
};

bool is_ascii(const std::string& s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

std::uint32_t crc_of(std::uint32_t crc, const void* data, std::size_t bytes) {
  if (bytes == 0) return crc;
  return static_cast<std::uint32_t>(
      crc32_z(crc, static_cast<const Bytef*>(data), static_cast<z_size_t>(bytes)));
}

// ---- reading ---------------------------------------------------------------------------------

class Reader {
 public:
  explicit Reader(const std::string& path) : path_(path) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec))
      throw IoError(cat("load_npz: ", path, " is a directory, not an .npz file"));
    std::ifstream in(path, std::ios::binary);
    if (!in) throw IoError(cat("load_npz: cannot open ", path, ": ", std::strerror(errno)));
    bytes_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (in.bad()) throw IoError(cat("load_npz: reading ", path, " failed"));
  }

  struct Entry {
    std::string name;
    std::string_view data;  // the stored .npy file
  };

  std::vector<Entry> entries() const {
    const std::size_t eocd = find_end_of_central_directory();
    const std::uint32_t count = get16(eocd + 10);
    const std::uint64_t cd_size = get32(eocd + 12);
    std::uint64_t pos = get32(eocd + 16);
    if (count == 0xFFFF || pos == kZipLimit || cd_size == kZipLimit)
      fail("is a ZIP64 archive, which this reader does not support");
    if (pos + cd_size > eocd) fail("has a central directory outside the file");
    std::vector<Entry> out;
    for (std::uint32_t i = 0; i < count; ++i) {
      need(pos, kCentralHeaderSize, "central directory");
      if (get32(pos) != kCentralHeaderSignature) fail("has a corrupt central directory");
      const std::uint32_t flags = get16(pos + 8), method = get16(pos + 10);
      const std::uint32_t crc = get32(pos + 16);
      std::uint64_t compressed = get32(pos + 20), size = get32(pos + 24);
      const std::size_t name_len = get16(pos + 28), extra_len = get16(pos + 30),
                        comment_len = get16(pos + 32);
      std::uint64_t local = get32(pos + 42);
      need(pos + kCentralHeaderSize, name_len + extra_len + comment_len, "central directory");
      std::string name = bytes_.substr(pos + kCentralHeaderSize, name_len);
      read_zip64_extra(pos + kCentralHeaderSize + name_len, extra_len, size, compressed, local);
      pos += kCentralHeaderSize + name_len + extra_len + comment_len;

      if (flags & 1) fail(cat("entry ", name, " is encrypted"));
      if (method != 0)
        fail(cat("entry ", name, " is compressed (method ", method,
                 ", as np.savez_compressed writes); only stored entries are read"));
      if (compressed != size) fail(cat("entry ", name, " has inconsistent sizes"));
      need(local, kLocalHeaderSize, cat("local header of ", name));
      if (get32(local) != kLocalHeaderSignature)
        fail(cat("entry ", name, " has a corrupt local header"));
      const std::uint64_t start = local + kLocalHeaderSize + get16(local + 26) + get16(local + 28);
      need(start, size, cat("data of ", name));
      std::string_view data(bytes_.data() + start, size);
      const std::uint32_t actual = crc_of(0, data.data(), data.size());
      if (actual != crc)
        fail(cat("entry ", name, " fails its CRC check (stored ", std::hex, crc, ", computed ",
                 actual, std::dec, ")"));
      out.push_back({std::move(name), data});
    }
    return out;
  }

  [[noreturn]] void fail(const std::string& why) const {
    throw FormatError(cat("load_npz: ", path_, " ", why));
  }

  const std::string& path() const { return path_; }

 private:
  std::uint32_t get16(std::uint64_t pos) const {
    return static_cast<unsigned char>(bytes_[pos]) |
           (static_cast<std::uint32_t>(static_cast<unsigned char>(bytes_[pos + 1])) << 8);
  }
  std::uint32_t get32(std::uint64_t pos) const { return get16(pos) | (get16(pos + 2) << 16); }
  std::uint64_t get64(std::uint64_t pos) const {
    return get32(pos) | (static_cast<std::uint64_t>(get32(pos + 4)) << 32);
  }
  void need(std::uint64_t pos, std::uint64_t bytes, const std::string& what) const {
    if (pos > bytes_.size() || bytes > bytes_.size() - pos)
      fail(cat("is truncated (the ", what, " runs past the end of the file)"));
  }

  std::size_t find_end_of_central_directory() const {
    if (bytes_.size() < kEndOfCentralDirectorySize)
      fail("is not a zip archive (too short for an end-of-central-directory record)");
    // The record is the last 22 bytes, unless a comment (at most 65535 bytes) follows it.
    const std::size_t last = bytes_.size() - kEndOfCentralDirectorySize;
    const std::size_t first = last > 0xFFFF ? last - 0xFFFF : 0;
    for (std::size_t pos = last + 1; pos-- > first;)
      if (get32(pos) == kEndOfCentralDirectorySignature) return pos;
    fail("is not a zip archive (no end-of-central-directory record)");
  }

  // Python's zipfile (np.savez) may add ZIP64 fields even to small entries: the 32-bit fields
  // set to 0xFFFFFFFF are then in extra field 0x0001, in this order.
  void read_zip64_extra(std::uint64_t pos, std::size_t len, std::uint64_t& size,
                        std::uint64_t& compressed, std::uint64_t& local) const {
    const std::uint64_t end = pos + len;
    while (pos + 4 <= end) {
      const std::uint32_t id = get16(pos), field_len = get16(pos + 2);
      std::uint64_t p = pos + 4;
      if (p + field_len > end) fail("has a corrupt extra field");
      if (id == 0x0001) {
        for (std::uint64_t* field : {&size, &compressed, &local}) {
          if (*field != kZipLimit) continue;
          if (p + 8 > pos + 4 + field_len) fail("has a corrupt ZIP64 extra field");
          *field = get64(p);
          p += 8;
        }
      }
      pos += 4 + field_len;
    }
  }

  std::string path_;
  std::string bytes_;
};

struct NpyView {
  std::string descr;
  bool fortran_order = false;
  Shape shape;
  std::string_view data;
};

NpyView parse_npy(std::string_view npy, const Reader& reader, const std::string& entry) {
  if (npy.size() < 10 || npy.substr(0, kNpyMagic.size()) != kNpyMagic)
    reader.fail(cat("entry ", entry, " is not a .npy file"));
  const int major = static_cast<unsigned char>(npy[6]);
  std::size_t header_len = 0, start = 0;
  const auto byte = [&](std::size_t i) {
    return static_cast<std::size_t>(static_cast<unsigned char>(npy[i]));
  };
  if (major == 1) {
    header_len = byte(8) | (byte(9) << 8);
    start = 10;
  } else if ((major == 2 || major == 3) && npy.size() >= 12) {
    header_len = byte(8) | (byte(9) << 8) | (byte(10) << 16) | (byte(11) << 24);
    start = 12;
  } else {
    reader.fail(cat("entry ", entry, " has .npy version ", major, ".x; versions 1-3 are read"));
  }
  if (npy.size() - start < header_len)
    reader.fail(cat("entry ", entry, " is truncated inside its .npy header"));
  const flexkit::detail::NpyHeaderErrors errors{
      cat("load_npz: ", reader.path(), " entry ", entry, " has a bad .npy header"), ""};
  flexkit::detail::NpyHeader h =
      flexkit::detail::parse_npy_header(npy.substr(start, header_len), errors);
  return {std::move(h.descr), h.fortran_order, std::move(h.shape), npy.substr(start + header_len)};
}

// The element count of a shape read from a file, with overflow checks.
std::size_t checked_count(const Shape& shape, std::size_t item, const Reader& reader,
                          const std::string& entry) {
  std::size_t count = 1;
  for (std::int64_t extent : shape)
    if (__builtin_mul_overflow(count, static_cast<std::size_t>(extent), &count))
      reader.fail(cat("entry ", entry, " has a shape too large to address"));
  if (__builtin_mul_overflow(count, item, &count))
    reader.fail(cat("entry ", entry, " has a shape too large to address"));
  return count;
}

std::string strip_npy(const std::string& name) {
  constexpr std::string_view suffix = ".npy";
  if (name.size() > suffix.size() && name.ends_with(suffix))
    return name.substr(0, name.size() - suffix.size());
  return name;
}

bool is_unicode_descr(const std::string& descr) {
  return descr.size() >= 3 && (descr[0] == '<' || descr[0] == '|' || descr[0] == '=') &&
         descr[1] == 'U';
}

}  // namespace

void save_npz(const std::string& path, const std::vector<std::pair<std::string, Array>>& arrays,
              const std::vector<std::pair<std::string, std::string>>& strings) {
  // Everything that can be refused is checked before the file is created.
  std::set<std::string> seen;
  std::vector<std::u32string> texts;
  std::uint64_t total = kEndOfCentralDirectorySize;
  const auto account = [&](const std::string& name, std::uint64_t entry_bytes) {
    if (entry_bytes >= kZipLimit)
      throw ValueError(cat("save_npz: the entry ", name, " needs ", entry_bytes,
                           " bytes; entries of 4 GiB or more need ZIP64, which is not supported"));
    total += kLocalHeaderSize + kCentralHeaderSize + 2 * (name.size() + 4) + entry_bytes;
  };
  for (const auto& [name, array] : arrays) {
    check_name(name, seen);
    if (!array.defined())
      throw ValueError(cat("save_npz: the array ", name, " is empty (default-constructed)"));
    account(name, npy_preamble(descr_of(array.dtype()), array.shape()).size() +
                      static_cast<std::uint64_t>(array.size()) * stored_itemsize(array.dtype()));
  }
  for (const auto& [name, text] : strings) {
    check_name(name, seen);
    texts.push_back(utf32_of(name, text));
    const std::size_t length = std::max<std::size_t>(texts.back().size(), 1);
    account(name, npy_preamble(cat("<U", length), {}).size() + 4 * length);
  }
  if (total >= kZipLimit)
    throw ValueError(cat("save_npz: ", path, " would hold ", total,
                         " bytes; archives of 4 GiB or more need ZIP64, which is not supported"));
  if (seen.size() > 0xFFFF)
    throw ValueError(cat("save_npz: ", seen.size(), " entries need ZIP64 (more than 65535)"));

  detail::AtomicFile file(path, "save_npz");
  std::vector<CentralEntry> central;
  const auto add = [&](const std::string& name, const NpyPayload& payload) {
    CentralEntry e;
    e.name = name + ".npy";
    e.flags = is_ascii(e.name) ? 0 : kFlagUtf8Name;
    e.crc = crc_of(crc_of(0, payload.preamble.data(), payload.preamble.size()), payload.data,
                   payload.bytes);
    e.size = static_cast<std::uint32_t>(payload.preamble.size() + payload.bytes);
    e.offset = static_cast<std::uint32_t>(file.written());
    std::string header;
    put32(header, kLocalHeaderSignature);
    put16(header, kVersionNeeded);
    put16(header, e.flags);
    put16(header, 0);  // stored
    put16(header, 0);  // time
    put16(header, kDosDate1980);
    put32(header, e.crc);
    put32(header, e.size);  // compressed
    put32(header, e.size);  // uncompressed
    put16(header, static_cast<std::uint32_t>(e.name.size()));
    put16(header, 0);  // extra field length
    header += e.name;
    file.write(header);
    file.write(payload.preamble);
    file.write(payload.data, payload.bytes);
    central.push_back(std::move(e));
  };
  for (const auto& [name, array] : arrays) add(name, array_payload(array));
  for (std::size_t i = 0; i < strings.size(); ++i)
    add(strings[i].first, string_payload(std::move(texts[i])));

  const std::uint64_t cd_offset = file.written();
  std::string cd;
  for (const CentralEntry& e : central) {
    put32(cd, kCentralHeaderSignature);
    put16(cd, kVersionMadeBy);
    put16(cd, kVersionNeeded);
    put16(cd, e.flags);
    put16(cd, 0);  // stored
    put16(cd, 0);  // time
    put16(cd, kDosDate1980);
    put32(cd, e.crc);
    put32(cd, e.size);
    put32(cd, e.size);
    put16(cd, static_cast<std::uint32_t>(e.name.size()));
    put16(cd, 0);  // extra field length
    put16(cd, 0);  // comment length
    put16(cd, 0);  // disk number
    put16(cd, 0);  // internal attributes
    put32(cd, kExternalAttributes);
    put32(cd, e.offset);
    cd += e.name;
  }
  const std::size_t cd_size = cd.size();
  put32(cd, kEndOfCentralDirectorySignature);
  put16(cd, 0);  // this disk
  put16(cd, 0);  // the central directory's disk
  put16(cd, static_cast<std::uint32_t>(central.size()));
  put16(cd, static_cast<std::uint32_t>(central.size()));
  put32(cd, static_cast<std::uint32_t>(cd_size));
  put32(cd, static_cast<std::uint32_t>(cd_offset));
  put16(cd, 0);  // comment length
  file.write(cd);
  file.commit();
}

std::map<std::string, Array> load_npz(const std::string& path) {
  Reader reader(path);
  std::map<std::string, Array> out;
  for (const Reader::Entry& entry : reader.entries()) {
    NpyView v = parse_npy(entry.data, reader, entry.name);
    if (is_unicode_descr(v.descr)) continue;
    DType dtype;
    const std::string kind = v.descr.size() == 3 ? v.descr.substr(1) : v.descr;
    const char order = v.descr.empty() ? '?' : v.descr[0];
    if (kind == "f4" && order == '<')
      dtype = DType::f32;
    else if (kind == "f8" && order == '<')
      dtype = DType::f64;
    else if (kind == "i4" && order == '<')
      dtype = DType::i32;
    else if (kind == "u1" && (order == '|' || order == '<' || order == '>'))
      dtype = DType::u8;
    else
      reader.fail(cat("entry ", entry.name, " has dtype '", v.descr,
                      "'; float32 (<f4), float64 (<f8), int32 (<i4) and uint8 (|u1) are read"));
    if (v.shape.size() > static_cast<std::size_t>(kMaxRank))
      reader.fail(cat("entry ", entry.name, " has rank ", v.shape.size(), "; at most ", kMaxRank,
                      " is supported"));
    const std::size_t bytes = checked_count(v.shape, itemsize(dtype), reader, entry.name);
    if (v.data.size() != bytes)
      reader.fail(cat("entry ", entry.name, " holds ", v.data.size(), " bytes of data; its shape ",
                      shape_str(v.shape), " needs ", bytes));
    Shape stored = v.shape;
    if (v.fortran_order) std::reverse(stored.begin(), stored.end());
    Array host = Array::empty(stored, dtype, Device::cpu());
    if (bytes) std::memcpy(host.data(), v.data.data(), bytes);
    if (v.fortran_order) host = host.T().clone();
    out.emplace(strip_npy(entry.name), std::move(host));
  }
  return out;
}

std::map<std::string, std::string> load_npz_strings(const std::string& path) {
  Reader reader(path);
  std::map<std::string, std::string> out;
  for (const Reader::Entry& entry : reader.entries()) {
    NpyView v = parse_npy(entry.data, reader, entry.name);
    if (!is_unicode_descr(v.descr) || !v.shape.empty()) continue;
    std::size_t length = 0;
    auto [end, ec] = std::from_chars(v.descr.data() + 2, v.descr.data() + v.descr.size(), length);
    if (ec != std::errc() || end != v.descr.data() + v.descr.size() || length > v.data.size() / 4 ||
        v.data.size() != 4 * length)
      reader.fail(cat("entry ", entry.name, " has a unicode dtype '", v.descr,
                      "' that does not match its ", v.data.size(), " bytes of data"));
    std::string text;
    std::size_t used = length;
    const auto code = [&](std::size_t i) {
      char32_t c;
      std::memcpy(&c, v.data.data() + 4 * i, 4);
      return c;
    };
    while (used > 0 && code(used - 1) == 0) --used;  // NumPy's padding
    for (std::size_t i = 0; i < used; ++i) {
      const char32_t c = code(i);
      if (c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
        reader.fail(cat("entry ", entry.name, " holds an invalid code point"));
      detail::append_utf8(text, c);
    }
    out.emplace(strip_npy(entry.name), std::move(text));
  }
  return out;
}

}  // namespace flexkit::nn
