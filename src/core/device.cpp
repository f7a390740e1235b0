#include "flexkit/device.hpp"

#include <charconv>

#include "core/text.hpp"
#include "flexkit/error.hpp"

namespace flexkit {

Device Device::parse(std::string_view text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text.starts_with("cuda:")) {
    std::string_view digits = text.substr(5);
    int index = -1;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && end == digits.data() + digits.size() && index >= 0) return cuda(index);
  }
  throw DeviceError(
      detail::cat("Device::parse: '", text, "' is not a device; expected cpu, cuda or cuda:N"));
}

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : detail::cat("cuda:", index);
}

}  // namespace flexkit
