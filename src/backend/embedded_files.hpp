// Device headers embedded in the library at build time (see cmake/embed_files.cmake).
#pragma once
#include <cstddef>
#include <span>
#include <string_view>

namespace flexkit::backend {

struct EmbeddedFile {
  const char* name;  // the include name, e.g. "flexkit/portable/flex16_codec.hpp"
  const char* data;  // NUL-terminated contents
  std::size_t size;
};

std::span<const EmbeddedFile> embedded_device_headers();

}  // namespace flexkit::backend
