// The process environment as flexkit reads it. Unset and empty mean the same ("not given"), and a
// value a setting does not accept is a ValueError naming the variable, the value and what it
// accepts, so that a misspelt setting fails instead of silently running the default.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace flexkit::detail {

// The value of `name`; nullopt when it is unset or empty.
std::optional<std::string> env_value(const char* name);

// Throws ValueError("<name>='<value>': expected <accepted>").
[[noreturn]] void throw_bad_env_value(const char* name, std::string_view value,
                                      std::string_view accepted);

// The choice whose spelling is the value, `fallback` when the variable is not given; any other
// value throws, listing the spellings.
template <typename T>
T env_choice(const char* name, T fallback,
             std::initializer_list<std::pair<std::string_view, T>> choices) {
  const std::optional<std::string> value = env_value(name);
  if (!value) return fallback;
  std::string accepted;
  for (const auto& [spelling, choice] : choices) {
    if (*value == spelling) return choice;
    if (!accepted.empty()) accepted += ", ";
    accepted += spelling;
  }
  throw_bad_env_value(name, *value, "one of " + accepted);
}

// A debugging switch: on exactly when the value is "1" (anything else leaves it off).
bool env_flag(const char* name);

// A decimal integer in [least, most]; nullopt when the variable is not given, ValueError for
// anything else.
std::optional<std::int64_t> env_int(const char* name, std::int64_t least, std::int64_t most);

}  // namespace flexkit::detail
