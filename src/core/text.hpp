// Building error messages from pieces without a formatting dependency.
#pragma once
#include <sstream>
#include <string>

namespace flexkit::detail {

template <class... Parts>
std::string cat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

}  // namespace flexkit::detail

namespace flexkit::detail {

// 1536 -> "1.50 KiB": sizes in messages people read.
std::string human_bytes(double bytes);

}  // namespace flexkit::detail
