// A file written in place of another all at once: readers see the old file or the complete new
// one, never a part, and a failure leaves nothing behind.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace flexkit::nn::detail {

// A temporary file next to `path` (same directory, so the rename stays on one file system).
// commit() flushes it to disk and renames it over `path`; destroyed without a commit (an
// exception on the way), the temporary file is removed. Errors throw IoError, the message
// starting with `operation` and naming the file and the system's reason.
class AtomicFile {
 public:
  AtomicFile(const std::string& path, std::string operation);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, std::size_t bytes);
  void write(const std::string& bytes) { write(bytes.data(), bytes.size()); }
  std::uint64_t written() const { return written_; }
  void commit();

 private:
  [[noreturn]] void fail(const std::string& what, int error) const;

  std::string path_;
  std::string temporary_;
  std::string operation_;
  int fd_ = -1;
  std::uint64_t written_ = 0;
  bool committed_ = false;
};

}  // namespace flexkit::nn::detail
