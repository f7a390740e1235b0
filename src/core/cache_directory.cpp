#include "core/environment.hpp"
#include "flexkit/version.hpp"

namespace flexkit {

std::filesystem::path cache_directory() {
  using detail::env_value;
  if (const auto dir = env_value("FLEXKIT_CACHE_DIR")) return *dir;
  if (const auto xdg = env_value("XDG_CACHE_HOME")) return std::filesystem::path(*xdg) / "flexkit";
  if (const auto home = env_value("HOME"))
    return std::filesystem::path(*home) / ".cache" / "flexkit";
  return std::filesystem::temp_directory_path() / "flexkit-cache";
}

}  // namespace flexkit
