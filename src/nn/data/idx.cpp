// IDX files (the format of MNIST and its relatives): a big-endian header, magic 0x0000TTNN (T
// the element type, N the number of dims), N 32-bit dims, then the elements in row-major order.
// Read through zlib's gz* functions, which take gzip and plain files alike.
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>

#include "core/text.hpp"
#include "flexkit/data.hpp"
#include "flexkit/error.hpp"

namespace flexkit::nn {

using flexkit::detail::cat;

namespace {

constexpr unsigned kUnsignedByte = 0x08;
constexpr std::size_t kChunk = std::size_t{1} << 24;  // gzread takes an unsigned, returns an int

const char* idx_type_name(unsigned type) {
  switch (type) {
    case 0x08:
      return "unsigned byte";
    case 0x09:
      return "signed byte";
    case 0x0B:
      return "int16";
    case 0x0C:
      return "int32";
    case 0x0D:
      return "float32";
    case 0x0E:
      return "float64";
  }
  return "unknown";
}

class GzFile {
 public:
  explicit GzFile(const std::string& path) : path_(path) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec))
      throw IoError(cat("read_idx: cannot read ", path, ": it is a directory"));
    errno = 0;
    file_ = gzopen(path.c_str(), "rb");
    if (!file_) {
      const int error = errno;
      throw IoError(cat("read_idx: cannot open ", path, ": ",
                        error ? std::strerror(error) : "out of memory"));
    }
    gzbuffer(file_, 1 << 18);
  }
  ~GzFile() { gzclose_r(file_); }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;

  // Reads up to `bytes` bytes; fewer only at the end of the data. Throws IoError for a failing
  // read and FormatError for corrupt gzip data; a gzip stream cut short is remembered
  // (truncated_stream()) and reads as the end of the data.
  std::size_t read(void* out, std::size_t bytes) {
    std::size_t got = 0;
    while (got < bytes) {
      const auto want = static_cast<unsigned>(std::min(bytes - got, kChunk));
      const int n = gzread(file_, static_cast<char*>(out) + got, want);
      if (n < 0) fail();
      got += static_cast<std::size_t>(n);
      if (static_cast<unsigned>(n) < want) {
        check_end();
        break;
      }
    }
    return got;
  }

  // Set when the gzip stream ended before its end marker (zlib's "unexpected end of file").
  const std::string& truncated_stream() const { return truncated_stream_; }

 private:
  std::string message(int* code) const {
    std::string text = gzerror(file_, code);
    const std::string prefix = path_ + ": ";  // zlib prefixes its messages with the path
    if (text.compare(0, prefix.size(), prefix) == 0) text.erase(0, prefix.size());
    return text;
  }
  [[noreturn]] void fail() const {
    int code = Z_OK;
    const int error = errno;
    std::string text = message(&code);
    if (code == Z_ERRNO)
      throw IoError(cat("read_idx: reading ", path_, " failed: ", std::strerror(error)));
    if (code == Z_MEM_ERROR)
      throw OutOfMemoryError(cat("read_idx: zlib ran out of memory reading ", path_));
    throw FormatError(cat("read_idx: ", path_, " holds corrupt gzip data (", text, ")"));
  }
  void check_end() {
    int code = Z_OK;
    std::string text = message(&code);
    if (code == Z_BUF_ERROR)
      truncated_stream_ = text;
    else if (code != Z_OK)
      fail();
  }

  std::string path_;
  gzFile file_ = nullptr;
  std::string truncated_stream_;
};

}  // namespace

IdxData read_idx(const std::string& path) {
  GzFile file(path);
  const auto truncated = [&](const std::string& what) {
    std::string reason = file.truncated_stream().empty()
                             ? std::string()
                             : cat(" (gzip: ", file.truncated_stream(), ")");
    return FormatError(cat("read_idx: ", path, " is truncated: ", what, reason));
  };

  unsigned char magic[4];
  std::size_t got = file.read(magic, sizeof magic);
  if (got < sizeof magic)
    throw truncated(cat("expected a 4-byte magic number, found ", got, " bytes"));
  if (magic[0] != 0 || magic[1] != 0)
    throw FormatError(cat("read_idx: ", path, " is not an IDX file (its magic number ",
                          "does not start with two zero bytes)"));
  if (magic[2] != kUnsignedByte)
    throw FormatError(cat("read_idx: ", path, " holds elements of type 0x", std::hex,
                          static_cast<unsigned>(magic[2]), std::dec, " (", idx_type_name(magic[2]),
                          "); only unsigned bytes (0x08) are read"));
  const std::size_t rank = magic[3];
  if (rank == 0) throw FormatError(cat("read_idx: ", path, " declares 0 dims"));

  std::vector<unsigned char> header(4 * rank);
  got = file.read(header.data(), header.size());
  if (got < header.size())
    throw truncated(
        cat("expected ", rank, " dims (", header.size(), " bytes), found ", got, " bytes"));
  IdxData data;
  std::size_t expected = 1;
  for (std::size_t i = 0; i < rank; ++i) {
    const std::uint32_t extent = (std::uint32_t{header[4 * i]} << 24) |
                                 (std::uint32_t{header[4 * i + 1]} << 16) |
                                 (std::uint32_t{header[4 * i + 2]} << 8) | header[4 * i + 3];
    data.dims.push_back(extent);
    if (__builtin_mul_overflow(expected, std::size_t{extent}, &expected))
      throw FormatError(cat("read_idx: ", path, " declares dims ", shape_str(data.dims),
                            ", more bytes than memory can address"));
  }

  // Grow as the data arrives rather than trusting the header with one allocation.
  got = 0;
  while (got < expected) {
    const std::size_t step = std::min(expected - got, kChunk * 4);
    data.bytes.resize(got + step);
    const std::size_t n = file.read(data.bytes.data() + got, step);
    got += n;
    if (n < step) break;
  }
  data.bytes.resize(got);
  if (got < expected) throw truncated(cat("expected ", expected, " bytes of data, found ", got));
  // Reading on to the end checks the gzip trailer (its CRC and length) and finds extra data.
  unsigned char extra[256];
  const std::size_t beyond = file.read(extra, sizeof extra);
  if (!file.truncated_stream().empty())
    throw truncated(cat("the gzip stream ends before its trailer"));
  if (beyond > 0)
    throw FormatError(cat("read_idx: ", path, " holds more than the ", expected,
                          " bytes of data its dims ", shape_str(data.dims), " promise"));
  return data;
}

}  // namespace flexkit::nn
