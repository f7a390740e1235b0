// Runs one flexkit convolution on .npy files, so that a PyTorch script (conv_torch_test.py) can
// check fprop / bprop / update against torch's own convolution and its autograd.
//
//   conv_npy_tool fprop  DIR   reads I.npy, F.npy          writes O.npy
//   conv_npy_tool bprop  DIR   reads F.npy, E.npy, I.npy   writes gradI.npy
//   conv_npy_tool update DIR   reads I.npy, E.npy, F.npy   writes gradF.npy
//
// Layouts are the seed's: I = (C, [D, [H,]] W, N), F = (C, [T, [R,]] S, K), E and O =
// (K, [M, [P,]] Q, N). bprop reads I.npy and update F.npy only for their shapes: with stride > 1
// several input sizes give the same output size, so a gradient's shape cannot be derived from
// the other two operands alone.
// Operands are f32, or flex16 (<i2 mantissas with the "<file>.iwl" sidecar).
//
// Options, anywhere on the line:
//   --device=cpu|cuda[:N]          run there (the operands are loaded onto it)
//   --padding=a[,b[,c]]            ConvParams lists: one value for every dim or one per dim
//   --stride=.. --dilation=.. --upscale=..
//   --out-dtype=f32|flex16         the result's dtype (default: the operands' dtype)
//   --out-iwl=N                    a flex16 result's iwl (default: the smallest that holds it)
//
// Exit status: 0 on success, 2 for a malformed command line, 3 when flexkit throws (the message
// goes to stderr as "error: ...").
#include <charconv>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "flexkit/flexkit.hpp"

namespace {

constexpr int kUsageError = 2;
constexpr int kFlexkitError = 3;

constexpr char kUsage[] =
    "usage: conv_npy_tool fprop|bprop|update DIR [--device=cpu|cuda[:N]]\n"
    "         [--padding=LIST] [--stride=LIST] [--dilation=LIST] [--upscale=LIST]\n"
    "         [--out-dtype=f32|flex16] [--out-iwl=N]\n"
    "fprop: I.npy, F.npy -> O.npy; bprop: F.npy, E.npy (+ I.npy's shape) -> gradI.npy;\n"
    "update: I.npy, E.npy (+ F.npy's shape) -> gradF.npy\n";

// A bad command line, as opposed to a flexkit error: exit status 2, not 3.
struct UsageError {
  std::string message;
};

std::int64_t parse_int(std::string_view token, std::string_view context) {
  std::int64_t v = 0;
  auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), v);
  if (token.empty() || ec != std::errc() || end != token.data() + token.size())
    throw UsageError{"'" + std::string(token) + "' in \"" + std::string(context) +
                     "\" is not an integer"};
  return v;
}

// "1,2" -> {1, 2}. Range checks are left to ConvPlan, whose messages name the rule broken.
std::vector<std::int64_t> parse_int_list(std::string_view text) {
  std::vector<std::int64_t> out;
  std::string_view rest = text;
  while (true) {
    const std::size_t comma = rest.find(',');
    out.push_back(parse_int(rest.substr(0, comma), text));
    if (comma == std::string_view::npos) return out;
    rest.remove_prefix(comma + 1);
  }
}

struct Command {
  std::string direction;
  std::filesystem::path dir;
  flexkit::Device device = flexkit::Device::cpu();
  flexkit::ConvParams params;
  std::optional<flexkit::DType> out_dtype;
  std::optional<int> out_iwl;
};

Command parse_command_line(int argc, char** argv) {
  Command c;
  std::vector<std::string_view> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const auto value = [&](std::string_view option) { return arg.substr(option.size()); };
    if (arg.starts_with("--device=")) {
      c.device = flexkit::Device::parse(value("--device="));
    } else if (arg.starts_with("--padding=")) {
      c.params.padding = parse_int_list(value("--padding="));
    } else if (arg.starts_with("--stride=")) {
      c.params.stride = parse_int_list(value("--stride="));
    } else if (arg.starts_with("--dilation=")) {
      c.params.dilation = parse_int_list(value("--dilation="));
    } else if (arg.starts_with("--upscale=")) {
      c.params.upscale = parse_int_list(value("--upscale="));
    } else if (arg.starts_with("--out-dtype=")) {
      const std::string_view name = value("--out-dtype=");
      if (name == "f32") {
        c.out_dtype = flexkit::DType::f32;
      } else if (name == "flex16") {
        c.out_dtype = flexkit::DType::flex16;
      } else {
        throw UsageError{"--out-dtype must be f32 or flex16, not '" + std::string(name) + "'"};
      }
    } else if (arg.starts_with("--out-iwl=")) {
      c.out_iwl = static_cast<int>(parse_int(value("--out-iwl="), arg));
    } else if (arg.starts_with("--")) {
      throw UsageError{"unknown option '" + std::string(arg) + "'"};
    } else {
      positional.push_back(arg);
    }
  }
  if (positional.size() != 2) throw UsageError{"expected a direction and a directory"};
  c.direction = positional[0];
  if (c.direction != "fprop" && c.direction != "bprop" && c.direction != "update")
    throw UsageError{"unknown direction '" + c.direction + "'"};
  c.dir = positional[1];
  return c;
}

int run(const Command& c) {
  const auto load = [&](const char* name) { return flexkit::load_npy(c.dir / name, c.device); };
  // The plan validates the geometry once and gives the result's shape for fprop and update.
  const flexkit::Array input = load("I.npy");
  const bool need_filter = c.direction != "update";
  const flexkit::Array filter_or_grad = need_filter ? load("F.npy") : load("E.npy");
  const flexkit::DType operand_dtype = input.dtype();
  const flexkit::DType out_dtype = c.out_dtype.value_or(
      operand_dtype == flexkit::DType::flex16 ? flexkit::DType::flex16 : flexkit::DType::f32);

  flexkit::ConvOptions options;
  if (out_dtype == flexkit::DType::flex16) {
    options.iwl_policy = c.out_iwl ? flexkit::IwlPolicy::fixed : flexkit::IwlPolicy::exact;
    options.iwl = c.out_iwl;
  }

  flexkit::Array result;
  const char* out_name = nullptr;
  if (c.direction == "fprop") {
    const flexkit::ConvPlan plan(input.shape(), filter_or_grad.shape(), c.params);
    result = flexkit::Array::empty(plan.output_shape(), out_dtype, c.device);
    plan.fprop(input, filter_or_grad, result, options);
    out_name = "O.npy";
  } else if (c.direction == "bprop") {
    const flexkit::Array grad_output = load("E.npy");
    const flexkit::ConvPlan plan(input.shape(), filter_or_grad.shape(), c.params);
    result = flexkit::Array::empty(input.shape(), out_dtype, c.device);
    plan.bprop(filter_or_grad, grad_output, result, options);
    out_name = "gradI.npy";
  } else {
    // update's filter shape is (C, [T, [R,]] S, K): C from the input, K from E, and the taps
    // from F.npy, which the caller writes for every direction (its values are not read here).
    const flexkit::Array filter_like = load("F.npy");
    const flexkit::ConvPlan plan(input.shape(), filter_like.shape(), c.params);
    result = flexkit::Array::empty(filter_like.shape(), out_dtype, c.device);
    plan.update(input, filter_or_grad, result, options);
    out_name = "gradF.npy";
  }
  flexkit::save_npy(c.dir / out_name, result.copy_to(flexkit::Device::cpu()));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse_command_line(argc, argv));
  } catch (const UsageError& e) {
    std::fprintf(stderr, "conv_npy_tool: %s\n%s", e.message.c_str(), kUsage);
    return kUsageError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kFlexkitError;
  }
}
