// Applies one flexkit view operation to a .npy file and saves the result, so that a NumPy script
// can compare flexkit's views, .npy reader and writer against NumPy's own.
//
//   npy_view_tool view IN.npy INDEX OUT.npy          a.index(INDEX), e.g. "1:, ::-2, ..., None"
//   npy_view_tool transpose IN.npy PERM OUT.npy      a.transpose(PERM), "2,0,1"; "T" for a.T()
//   npy_view_tool reshape IN.npy SHAPE OUT.npy       a.reshape(SHAPE), "3,-1"; "" for shape ()
//   npy_view_tool roundtrip IN.npy OUT.npy           load and save again
//   npy_view_tool assign IN.npy INDEX VALUE OUT.npy  a.index(INDEX).fill(VALUE), then save a
//
// Options, anywhere on the line:
//   --device=cpu|cuda[:N]   load onto this device (the result is saved from there)
//   --pre-index=INDEX       applied to the loaded array before the command, in command-line
//   --pre-transpose=PERM    order; they make strided inputs out of the C-ordered files on disk
//
// Exit status: 0 on success, 2 for a malformed command line, 3 when flexkit throws (the message
// goes to stderr as "error: ..."), which is how callers check that invalid views are refused.
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "flexkit/flexkit.hpp"

namespace {

constexpr int kUsageError = 2;
constexpr int kFlexkitError = 3;

constexpr char kUsage[] =
    "usage: npy_view_tool view IN.npy INDEX OUT.npy\n"
    "       npy_view_tool transpose IN.npy PERM|T OUT.npy\n"
    "       npy_view_tool reshape IN.npy SHAPE OUT.npy\n"
    "       npy_view_tool roundtrip IN.npy OUT.npy\n"
    "       npy_view_tool assign IN.npy INDEX VALUE OUT.npy\n"
    "options: --device=cpu|cuda[:N] --pre-index=INDEX --pre-transpose=PERM|T\n";

// A bad command line, as opposed to a flexkit error: exit status 2, not 3.
struct UsageError {
  std::string message;
};

std::string_view trim(std::string_view t) {
  while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.remove_prefix(1);
  while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) t.remove_suffix(1);
  return t;
}

// "2, 0,-1" -> {2, 0, -1}; "" -> {} (the shape of a 0-d array, the permutation of one).
std::vector<std::int64_t> parse_int_list(std::string_view text) {
  std::vector<std::int64_t> out;
  if (trim(text).empty()) return out;
  while (true) {
    const std::size_t comma = text.find(',');
    const std::string_view token = trim(text.substr(0, comma));
    std::int64_t v = 0;
    auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), v);
    if (token.empty() || ec != std::errc() || end != token.data() + token.size())
      throw UsageError{"'" + std::string(token) + "' in \"" + std::string(text) +
                       "\" is not an integer"};
    out.push_back(v);
    if (comma == std::string_view::npos) return out;
    text.remove_prefix(comma + 1);
  }
}

double parse_value(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0') throw UsageError{"'" + text + "' is not a number"};
  return v;
}

flexkit::Array transpose(const flexkit::Array& a, std::string_view perm_text) {
  if (trim(perm_text) == "T") return a.T();
  std::vector<int> perm;
  for (std::int64_t p : parse_int_list(perm_text)) perm.push_back(static_cast<int>(p));
  return a.transpose(std::span<const int>(perm));
}

struct Command {
  std::vector<std::string> positional;
  flexkit::Device device = flexkit::Device::cpu();
  // (option, argument) in command-line order.
  std::vector<std::pair<std::string, std::string>> pre_ops;
};

Command parse_command_line(int argc, char** argv) {
  Command c;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.starts_with("--device=")) {
      c.device = flexkit::Device::parse(arg.substr(9));
    } else if (arg.starts_with("--pre-index=")) {
      c.pre_ops.emplace_back("index", std::string(arg.substr(12)));
    } else if (arg.starts_with("--pre-transpose=")) {
      c.pre_ops.emplace_back("transpose", std::string(arg.substr(16)));
    } else if (arg.starts_with("--")) {
      throw UsageError{"unknown option " + std::string(arg)};
    } else {
      // Index texts such as "-1, ::2" start with '-' and are positional.
      c.positional.emplace_back(arg);
    }
  }
  return c;
}

void expect_arguments(const Command& c, std::size_t count) {
  if (c.positional.size() != count)
    throw UsageError{c.positional[0] + " takes " + std::to_string(count - 1) + " arguments, got " +
                     std::to_string(c.positional.size() - 1)};
}

int run(const Command& c) {
  if (c.positional.empty()) throw UsageError{"no command"};
  const std::string& name = c.positional[0];
  const bool known = name == "view" || name == "transpose" || name == "reshape" ||
                     name == "roundtrip" || name == "assign";
  if (!known) throw UsageError{"unknown command '" + name + "'"};
  expect_arguments(c, name == "roundtrip" ? 3 : name == "assign" ? 5 : 4);

  flexkit::Array a = flexkit::load_npy(c.positional[1], c.device);
  for (const auto& [op, arg] : c.pre_ops) a = op == "index" ? a.index(arg) : transpose(a, arg);

  if (name == "view") {
    flexkit::save_npy(c.positional[3], a.index(c.positional[2]));
  } else if (name == "transpose") {
    flexkit::save_npy(c.positional[3], transpose(a, c.positional[2]));
  } else if (name == "reshape") {
    flexkit::save_npy(c.positional[3], a.reshape(parse_int_list(c.positional[2])));
  } else if (name == "roundtrip") {
    flexkit::save_npy(c.positional[2], a);
  } else {
    const double value = parse_value(c.positional[3]);
    a.index(c.positional[2]).fill(value);
    flexkit::save_npy(c.positional[4], a);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse_command_line(argc, argv));
  } catch (const UsageError& e) {
    std::fprintf(stderr, "npy_view_tool: %s\n%s", e.message.c_str(), kUsage);
    return kUsageError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kFlexkitError;
  }
}
