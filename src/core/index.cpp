#include "flexkit/index.hpp"

#include <algorithm>
#include <charconv>

#include "core/text.hpp"
#include "flexkit/error.hpp"

namespace flexkit {

ResolvedSlice resolve_slice(const Slice& s, std::int64_t n) {
  if (s.step == 0) throw ValueError("slice: step cannot be zero");
  const std::int64_t step = s.step;
  std::int64_t start, stop;
  if (step > 0) {
    start = s.start ? *s.start : 0;
    stop = s.stop ? *s.stop : n;
    if (start < 0) start = std::max<std::int64_t>(start + n, 0);
    if (stop < 0) stop = std::max<std::int64_t>(stop + n, 0);
    start = std::min(start, n);
    stop = std::min(stop, n);
  } else {
    start = s.start ? *s.start : n - 1;
    stop = s.stop ? *s.stop : -1;  // "before index 0", only reachable through the default
    if (s.start && start < 0) start = std::max<std::int64_t>(start + n, -1);
    if (s.stop && stop < 0) stop = std::max<std::int64_t>(stop + n, -1);
    start = std::min(start, n - 1);
    stop = std::min(stop, n - 1);
  }
  std::int64_t length = 0;
  if (step > 0 && stop > start) length = (stop - start + step - 1) / step;
  if (step < 0 && start > stop) length = (start - stop + (-step) - 1) / (-step);
  return {start, step, length};
}

std::string to_string(const Slice& s) {
  std::string out;
  if (s.start) out += std::to_string(*s.start);
  out += ":";
  if (s.stop) out += std::to_string(*s.stop);
  if (s.step != 1) {
    out += ':';
    out += std::to_string(s.step);
  }
  return out;
}

namespace {

std::string_view trim(std::string_view t) {
  while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.remove_prefix(1);
  while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) t.remove_suffix(1);
  return t;
}

std::optional<std::int64_t> parse_int(std::string_view token, std::string_view whole) {
  token = trim(token);
  if (token.empty()) return std::nullopt;
  std::string_view digits = token.front() == '+' ? token.substr(1) : token;
  std::int64_t v = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec != std::errc() || end != digits.data() + digits.size())
    throw ValueError(
        detail::cat("parse_index: '", token, "' in \"", whole, "\" is not an integer"));
  return v;
}

}  // namespace

std::vector<Index> parse_index(std::string_view text) {
  std::vector<Index> out;
  std::string_view rest = text;
  if (trim(rest).empty()) return out;
  for (;;) {
    std::size_t comma = rest.find(',');
    std::string_view entry = trim(rest.substr(0, comma));
    if (entry.empty()) {
      // Only a trailing comma ("1,") may leave an empty entry, as in a Python tuple.
      if (comma == std::string_view::npos && !out.empty()) break;
      throw ValueError(detail::cat("parse_index: empty entry in \"", text, "\""));
    }
    if (entry == "..." || entry == "Ellipsis") {
      out.emplace_back(ellipsis);
    } else if (entry == "None" || entry == "newaxis") {
      out.emplace_back(newaxis);
    } else if (entry.find(':') != std::string_view::npos) {
      std::size_t c1 = entry.find(':');
      std::size_t c2 = entry.find(':', c1 + 1);
      if (c2 != std::string_view::npos && entry.find(':', c2 + 1) != std::string_view::npos)
        throw ValueError(detail::cat("parse_index: '", entry, "' has more than two ':'"));
      Slice s;
      s.start = parse_int(entry.substr(0, c1), text);
      s.stop = parse_int(
          entry.substr(c1 + 1, c2 == std::string_view::npos ? std::string_view::npos : c2 - c1 - 1),
          text);
      if (c2 != std::string_view::npos) {
        auto step = parse_int(entry.substr(c2 + 1), text);
        if (step) s.step = *step;
      }
      if (s.step == 0)
        throw ValueError(detail::cat("parse_index: slice '", entry, "' has step zero"));
      out.emplace_back(s);
    } else {
      out.emplace_back(*parse_int(entry, text));
    }
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return out;
}

}  // namespace flexkit
