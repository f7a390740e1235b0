// libFuzzer entry point for the neuron language (build with -DFLEXKIT_FUZZ=ON, see
// tests/CMakeLists.txt). Any input must either parse or throw a std::exception: a crash, a
// sanitizer report, a hang or a stack overflow is a bug. Inputs that parse must also print back
// to an equal spec.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <string_view>

#include "flexkit/neuron_language.hpp"
#include "snn/neuron_ast.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    flexkit::snn::NeuronSpec spec = flexkit::parse_neuron(text, "<fuzz>");
    std::string printed = flexkit::to_string(spec);
    flexkit::snn::NeuronSpec again = flexkit::parse_neuron(printed, "<printed>");
    if (!(again == spec) || flexkit::to_string(again) != printed) std::abort();
  } catch (const std::exception&) {
    // Rejected inputs are expected.
  }
  return 0;
}
