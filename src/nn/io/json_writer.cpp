// JSON values and their text.
#include "nn/io/json_writer.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/text.hpp"
#include "flexkit/error.hpp"
#include "flexkit/nn_io.hpp"
#include "nn/io/utf8.hpp"

namespace flexkit::nn {

using flexkit::detail::cat;

namespace {

const char* kind_name(JsonValue::Kind kind) {
  switch (kind) {
    case JsonValue::Kind::null:
      return "null";
    case JsonValue::Kind::boolean:
      return "a bool";
    case JsonValue::Kind::integer:
      return "an integer";
    case JsonValue::Kind::number:
      return "a number";
    case JsonValue::Kind::string:
      return "a string";
    case JsonValue::Kind::array:
      return "an array";
    case JsonValue::Kind::object:
      return "an object";
  }
  return "?";
}

class Printer {
 public:
  explicit Printer(int indent) : indent_(indent > 0 ? indent : 0) {}

  void value(const JsonValue& v, int depth) {
    switch (v.kind()) {
      case JsonValue::Kind::null:
        out_ += "null";
        return;
      case JsonValue::Kind::boolean:
        out_ += v.as_bool() ? "true" : "false";
        return;
      case JsonValue::Kind::integer:
        out_ += std::to_string(v.as_int());
        return;
      case JsonValue::Kind::number:
        out_ += detail::format_json_double(v.as_double());
        return;
      case JsonValue::Kind::string:
        detail::append_json_string(out_, v.as_string());
        return;
      case JsonValue::Kind::array: {
        const auto& elements = v.elements();
        out_ += '[';
        for (std::size_t i = 0; i < elements.size(); ++i) {
          if (i) out_ += ',';
          newline(depth + 1);
          value(elements[i], depth + 1);
        }
        if (!elements.empty()) newline(depth);
        out_ += ']';
        return;
      }
      case JsonValue::Kind::object: {
        const auto& members = v.members();
        out_ += '{';
        for (std::size_t i = 0; i < members.size(); ++i) {
          if (i) out_ += ',';
          newline(depth + 1);
          detail::append_json_string(out_, members[i].first);
          out_ += indent_ ? ": " : ":";
          value(members[i].second, depth + 1);
        }
        if (!members.empty()) newline(depth);
        out_ += '}';
        return;
      }
    }
  }

  std::string take() { return std::move(out_); }

 private:
  void newline(int depth) {
    if (!indent_) return;
    out_ += '\n';
    out_.append(static_cast<std::size_t>(depth) * static_cast<std::size_t>(indent_), ' ');
  }

  int indent_;
  std::string out_;
};

}  // namespace

namespace detail {

void append_json_string(std::string& out, std::string_view text) {
  out += '"';
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t start = pos;
    auto cp = next_code_point(text, pos);
    if (!cp)
      throw ValueError(
          cat("to_json: a string is not valid UTF-8: byte 0x", std::hex,
              static_cast<int>(static_cast<unsigned char>(text[start])), std::dec, " at offset ",
              start, " (after \"",
              text.substr(start > 40 ? start - 40 : 0, std::min<std::size_t>(start, 40)), "\")"));
    switch (*cp) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (*cp < 0x20) {
          char escape[8];
          std::snprintf(escape, sizeof escape, "\\u%04x", static_cast<unsigned>(*cp));
          out += escape;
        } else {
          out.append(text.substr(start, pos - start));
        }
    }
  }
  out += '"';
}

std::string format_json_double(double value) {
  if (!std::isfinite(value))
    throw ValueError(cat("to_json: ", value, " has no JSON form (JSON has no NaN or infinity)"));
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
  std::string text(buffer, end);
  if (text.find_first_of(".eE") == std::string::npos) text += ".0";
  return text;
}

}  // namespace detail

JsonValue::JsonValue(double value) : kind_(Kind::number), number_(value) {
  if (!std::isfinite(value))
    throw ValueError(cat("JsonValue: ", value, " cannot be stored (JSON has no NaN or infinity)"));
}

void JsonValue::out_of_range(unsigned long long value) {
  throw ValueError(
      cat("JsonValue: ", value, " does not fit in the int64 that JSON integers are kept in"));
}

JsonValue JsonValue::array(Elements elements) {
  JsonValue v;
  v.kind_ = Kind::array;
  v.elements_ = std::move(elements);
  return v;
}

JsonValue JsonValue::object(Members members) {
  JsonValue v;
  v.kind_ = Kind::object;
  for (auto& [key, value] : members) {
    if (v.find(key))
      throw ValueError(cat("JsonValue::object: the key \"", key, "\" appears twice"));
    v.members_.emplace_back(std::move(key), std::move(value));
  }
  return v;
}

void JsonValue::require(Kind kind, const char* operation) const {
  if (kind_ != kind)
    throw ValueError(cat("JsonValue::", operation, ": the value is ", kind_name(kind_), ", not ",
                         kind_name(kind)));
}

JsonValue& JsonValue::push_back(JsonValue value) {
  require(Kind::array, "push_back");
  elements_.push_back(std::move(value));
  return *this;
}

JsonValue& JsonValue::set(std::string_view key, JsonValue value) {
  require(Kind::object, "set");
  for (auto& member : members_) {
    if (member.first == key) {
      member.second = std::move(value);
      return *this;
    }
  }
  members_.emplace_back(std::string(key), std::move(value));
  return *this;
}

const JsonValue* JsonValue::find(std::string_view key) const {
  require(Kind::object, "find");
  for (const auto& member : members_)
    if (member.first == key) return &member.second;
  return nullptr;
}

bool JsonValue::as_bool() const {
  require(Kind::boolean, "as_bool");
  return bool_;
}

std::int64_t JsonValue::as_int() const {
  require(Kind::integer, "as_int");
  return int_;
}

double JsonValue::as_double() const {
  if (kind_ == Kind::integer) return static_cast<double>(int_);
  require(Kind::number, "as_double");
  return number_;
}

const std::string& JsonValue::as_string() const {
  require(Kind::string, "as_string");
  return string_;
}

const JsonValue::Elements& JsonValue::elements() const {
  require(Kind::array, "elements");
  return elements_;
}

const JsonValue::Members& JsonValue::members() const {
  require(Kind::object, "members");
  return members_;
}

std::string to_json(const JsonValue& value, int indent) {
  Printer printer(indent);
  printer.value(value, 0);
  return printer.take();
}

}  // namespace flexkit::nn
