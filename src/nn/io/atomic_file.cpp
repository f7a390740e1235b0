#include "nn/io/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/text.hpp"
#include "flexkit/error.hpp"
#include "flexkit/nn_io.hpp"

namespace flexkit::nn {

using flexkit::detail::cat;

namespace detail {

namespace {

std::atomic<std::uint64_t> g_temporary_counter{0};

// Flushes the directory entry of a rename to disk. Best effort: some file systems refuse
// fsync on a directory, and the data itself is already on disk.
void sync_directory(const std::string& path) {
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (parent.empty()) parent = ".";
  int fd = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

}  // namespace

AtomicFile::AtomicFile(const std::string& path, std::string operation)
    : path_(path), operation_(std::move(operation)) {
  if (path.empty()) throw IoError(cat(operation_, ": the path is empty"));
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw IoError(cat(operation_, ": ", path, " is a directory"));
  // A name no other writer (thread or process) uses; O_EXCL makes sure of it. Mode 0666 lets
  // the umask decide the permissions, as for any newly created file.
  for (int attempt = 0; fd_ < 0; ++attempt) {
    temporary_ = cat(path, ".tmp.", ::getpid(), ".", g_temporary_counter.fetch_add(1));
    fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0 && (errno != EEXIST || attempt >= 100)) {
      int error = errno;
      temporary_.clear();
      throw IoError(cat(operation_, ": cannot create a temporary file next to ", path, ": ",
                        std::strerror(error)));
    }
  }
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !temporary_.empty()) ::unlink(temporary_.c_str());
}

void AtomicFile::fail(const std::string& what, int error) const {
  throw IoError(cat(operation_, ": ", what, " ", path_, " (through ", temporary_,
                    ") failed: ", std::strerror(error)));
}

void AtomicFile::write(const void* data, std::size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd_, p, bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("writing", errno);
    }
    p += n;
    bytes -= static_cast<std::size_t>(n);
    written_ += static_cast<std::uint64_t>(n);
  }
}

void AtomicFile::commit() {
  if (::fsync(fd_) != 0) fail("flushing", errno);
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("closing", errno);
  if (::rename(temporary_.c_str(), path_.c_str()) != 0) fail("renaming into place", errno);
  committed_ = true;
  sync_directory(path_);
}

}  // namespace detail

void write_text_file_atomically(const std::string& path, const std::string& text) {
  detail::AtomicFile file(path, "write_text_file_atomically");
  file.write(text);
  file.commit();
}

}  // namespace flexkit::nn
