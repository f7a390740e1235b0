#include "core/environment.hpp"

#include <cerrno>
#include <cstdlib>

#include "core/text.hpp"
#include "flexkit/error.hpp"

namespace flexkit::detail {

std::optional<std::string> env_value(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

void throw_bad_env_value(const char* name, std::string_view value, std::string_view accepted) {
  throw ValueError(cat(name, "='", value, "': expected ", accepted));
}

bool env_flag(const char* name) {
  const std::optional<std::string> value = env_value(name);
  return value && *value == "1";
}

std::optional<std::int64_t> env_int(const char* name, std::int64_t least, std::int64_t most) {
  const std::optional<std::string> value = env_value(name);
  if (!value) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long parsed = std::strtoll(value->c_str(), &end, 10);
  if (*end != '\0' || errno == ERANGE || parsed < least || parsed > most)
    throw_bad_env_value(name, *value, cat("an integer from ", least, " to ", most));
  return static_cast<std::int64_t>(parsed);
}

}  // namespace flexkit::detail
