// NumPy .npy files: the format NumPy and PyTorch users already hold their tensors in.
//
// dtypes map as f32 <f4, f64 <f8, u8 |u1, i32 <i4, flex16 <i2 (the mantissas) with its iwl in a
// sidecar text file "<path>.iwl", and bf16 <u2 (its raw bits) with a sidecar "<path>.bf16" that
// marks the uint16 elements as bf16 bits. NumPy has no bf16 and flexkit no uint16, so a <u2 file
// without that sidecar (NumPy's uint16) is refused. Headers v1-v3 are read; Fortran-order files
// are read into C order; big-endian files are byte-swapped.
#pragma once
#include <filesystem>

#include "flexkit/array.hpp"

namespace flexkit {

// Throws IoError (cannot open/read) or FormatError (bad magic, bad header, unsupported dtype,
// truncated data, flex16 or bf16 without its sidecar). An IoError for a file that cannot be
// opened carries the system's reason.
Array load_npy(const std::filesystem::path& path, Device device = Device::cpu());

// Writes atomically (a temporary file renamed into place): the file is either the complete new
// array or untouched. Throws IoError on failure.
void save_npy(const std::filesystem::path& path, const Array& array);

// The sidecar that holds a flex16 array's iwl.
std::filesystem::path flex16_sidecar_path(const std::filesystem::path& npy_path);

// The sidecar that marks a <u2 file as a bf16 array's raw bits.
std::filesystem::path bf16_sidecar_path(const std::filesystem::path& npy_path);

}  // namespace flexkit
