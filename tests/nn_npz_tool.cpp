// Writes .npz archives and JSON documents with flexkit, so that a Python script can check them
// with np.load and json.load (nn_npz_test.py), and re-saves archives NumPy wrote.
//
//   nn_npz_tool write OUT.npz      a fixed set of arrays and strings (listed in nn_npz_test.py)
//   nn_npz_tool copy IN.npz OUT.npz  load_npz + load_npz_strings, then save_npz
//   nn_npz_tool json OUT.json INDENT  a fixed JSON document, to_json(document, INDENT)
//
// Options: --device=cpu|cuda[:N] creates the arrays of `write` there (f64 stays on the cpu).
// Exit status: 0 on success, 2 for a malformed command line, 3 when flexkit throws (the message
// goes to stderr as "error: ...").
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "flexkit/flexkit.hpp"
#include "flexkit/nn_io.hpp"

namespace {

using namespace flexkit;
using namespace flexkit::nn;
using namespace std::literals;

constexpr int kUsageError = 2;
constexpr int kFlexkitError = 3;

constexpr char kUsage[] =
    "usage: nn_npz_tool write OUT.npz\n"
    "       nn_npz_tool copy IN.npz OUT.npz\n"
    "       nn_npz_tool json OUT.json INDENT\n"
    "options: --device=cpu|cuda[:N]\n";

void write_fixed(const std::string& path, Device device) {
  Array weights = Array::arange(-1.0, 2.0, 0.25, DType::f32, device).reshape({3, 4});
  Array labels =
      Array::from_vector(std::vector<std::int32_t>{std::numeric_limits<std::int32_t>::min(), -1, 0,
                                                   1, std::numeric_limits<std::int32_t>::max()},
                         {5}, device);
  Array spikes = Array::from_vector(
      std::vector<std::uint8_t>{0, 20, 40, 60, 80, 100, 120, 140, 160, 180, 200, 255}, {2, 2, 3},
      device);
  Array reference = Array::from_vector(std::vector<double>{0.1, 1.0 / 3.0, -1e300}, {3});
  Array flex = Array::from_floats(std::vector<float>{0.5f, -0.75f, 1.25f, 3.0f}, {2, 2},
                                  DType::flex16, device);
  Array bf = Array::from_floats(std::vector<float>{1.5f, -2.0f}, {2}, DType::bf16, device);
  Array scalar = Array::full({}, 42.5, DType::f32, device);
  Array empty = Array::zeros({0, 3}, DType::f32, device);
  Array sized = Array::full({1}, 7, DType::u8, device);
  save_npz(path,
           {{"weights", weights},
            {"transposed", weights.T()},
            {"reversed", weights.index("::-1, 1:")},
            {"labels", labels},
            {"spikes", spikes},
            {"reference", reference},
            {"flex", flex},
            {"bf", bf},
            {"scalar", scalar},
            {"empty", empty},
            {"gr\xc3\xb6\xc3\x9f"
             "e",
             sized}},
           {{"model", "neuron lif(x; v) -> s {\n  h = v + (x - v) / tau;\n}\n"},
            {"unicode",
             "\xc3\xbc"
             "n"
             "\xc3\xaf"
             "c"
             "\xc3\xb8"
             "d"
             "\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x9a\x80 \"q\" \\ tab\t"},
            {"empty_string", ""}});
}

void copy(const std::string& in, const std::string& out) {
  std::vector<std::pair<std::string, Array>> arrays;
  for (auto& [name, a] : load_npz(in)) arrays.emplace_back(name, a);
  std::vector<std::pair<std::string, std::string>> strings;
  for (auto& [name, s] : load_npz_strings(in)) strings.emplace_back(name, s);
  save_npz(out, arrays, strings);
}

void write_json(const std::string& path, int indent) {
  JsonValue doc = JsonValue::object({
      {"name", "run \"1\""},
      {"text", std::string("tab\t nl\n cr\r ctrl\x01\x1f del\x7f uni \xc3\xa9\xe2\x9c\x93"
                           "\xf0\x9f\x9a\x80 back\\ slash/ nul\0!"sv)},
      {"int", std::numeric_limits<std::int64_t>::max()},
      {"neg", std::numeric_limits<std::int64_t>::min()},
      {"float", 0.1},
      {"third", 1.0 / 3.0},
      {"tiny", 5e-324},
      {"big", std::numeric_limits<double>::max()},
      {"one", 1.0},
      {"negzero", -0.0},
      {"single", 0.1f},
      {"list", JsonValue::array(
                   {1, 2.5, "x", nullptr, true, false, JsonValue::array(), JsonValue::object()})},
      {"nested",
       JsonValue::object(
           {{"a",
             JsonValue::object({{"b", JsonValue::array({1, JsonValue::object({{"c", "d"}})})}})}})},
  });
  write_text_file_atomically(path, to_json(doc, indent) + "\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args;
  Device device = Device::cpu();
  try {
    for (int i = 1; i < argc; ++i) {
      std::string_view a = argv[i];
      if (a.starts_with("--device="))
        device = Device::parse(a.substr(9));
      else
        args.emplace_back(a);
    }
    if (args.size() == 2 && args[0] == "write") {
      write_fixed(args[1], device);
    } else if (args.size() == 3 && args[0] == "copy") {
      copy(args[1], args[2]);
    } else if (args.size() == 3 && args[0] == "json") {
      write_json(args[1], std::atoi(args[2].c_str()));
    } else {
      std::fputs(kUsage, stderr);
      return kUsageError;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kFlexkitError;
  }
  return 0;
}
