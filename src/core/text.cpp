#include "core/text.hpp"

#include <cstdio>

namespace flexkit::detail {

std::string human_bytes(double bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 6) {
    bytes /= 1024;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, unit ? "%.2f %s" : "%.0f %s", bytes, kUnits[unit]);
  return buf;
}

}  // namespace flexkit::detail
