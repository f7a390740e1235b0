// The pieces of JSON text the writer is made of, for other writers that emit JSON fragments.
#pragma once
#include <string>
#include <string_view>

namespace flexkit::nn::detail {

// Appends `text` as a JSON string literal, quotes included. Throws ValueError when `text` is not
// valid UTF-8.
void append_json_string(std::string& out, std::string_view text);

// The shortest decimal form that reads back as `value`, with a '.' or an exponent ("1.0",
// "0.1", "1e+300"). `value` must be finite.
std::string format_json_double(double value);

}  // namespace flexkit::nn::detail
