// Typed errors. Each derives from the standard exception a caller would catch for that kind of
// mistake, and its message names the operation, the operands and what was expected.
#pragma once
#include <stdexcept>
#include <string>

namespace flexkit {

// Wrong shape, rank or broadcast.
class ShapeError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Wrong or unsupported dtype.
class DTypeError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Operands on the wrong device, or a device that does not exist.
class DeviceError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// A bad value: zero step, non-finite number into flex16, bad permutation, ...
class ValueError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// A file whose contents are not what its format promises (bad magic, truncated, foreign dtype).
class FormatError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// An index outside an axis, or too many indices.
class IndexError : public std::out_of_range {
 public:
  using std::out_of_range::out_of_range;
};

// A file that cannot be opened, read or written.
class IoError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A failing CUDA runtime / driver call; the message carries the statement, file:line and device.
class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Memory exhausted (host or device); the message names the request and what is held.
class OutOfMemoryError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Run-time compilation (NVRTC) failed; the message carries the compile log.
class CompileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The operation needs a backend this build or machine does not have.
class UnsupportedError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace flexkit
