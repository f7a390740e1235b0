#include <cstdlib>

#include "flexkit/version.hpp"

namespace flexkit {

std::filesystem::path cache_directory() {
  auto env = [](const char* name) -> const char* {
    const char* v = std::getenv(name);
    return v && *v ? v : nullptr;
  };
  if (const char* dir = env("FLEXKIT_CACHE_DIR")) return dir;
  if (const char* xdg = env("XDG_CACHE_HOME")) return std::filesystem::path(xdg) / "flexkit";
  if (const char* home = env("HOME")) return std::filesystem::path(home) / ".cache" / "flexkit";
  return std::filesystem::temp_directory_path() / "flexkit-cache";
}

}  // namespace flexkit
