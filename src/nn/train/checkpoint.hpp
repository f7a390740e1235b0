// Checkpoint files: everything a run needs to continue bit for bit.
//
// Layout (little-endian): magic "FLEXKITCKPT\n", u32 format version, u64 configuration hash,
// then length-prefixed sections (the configuration text, counters, RNG states, parameters,
// optimizer state, history; from version 2 also the flex16 values of parameters with an f32
// master copy and every exponent manager's history), then a u64 FNV-1a checksum of every byte
// before it. Arrays are f32 values, or from version 2 flex16 values with their iwl (re-encoded
// exactly). Written to a temporary file in the same directory, flushed, then renamed over the
// target. Version 1 files (f32 runs) still load.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "flexkit/array.hpp"
#include "flexkit/nn.hpp"
#include "flexkit/portable/autoflex.hpp"
#include "flexkit/train.hpp"

namespace flexkit::nn {

inline constexpr std::uint32_t kCheckpointVersion = 2;

struct Checkpoint {
  std::uint64_t config_hash = 0;
  std::string config_text;  // the resolved configuration, one `key=value` a line
  std::int64_t epochs_done = 0, global_step = 0;
  std::vector<std::uint64_t> rng_states;
  // Host arrays, f32 or flex16: the master copy where a flex16 run keeps one, else the value.
  std::vector<std::pair<std::string, Array>> parameters;
  std::string optimizer;
  std::int64_t optimizer_steps = 0;
  std::vector<Array> optimizer_state;  // host, f32 or flex16
  // flex16 runs: the flex16 values of the parameters that have a master copy, and every
  // exponent manager's history by its ManagedTensor name ("optimizer.<i>" for optimizer state).
  std::vector<std::pair<std::string, Array>> published;
  struct Manager {
    std::string name;
    TensorClass tensor_class = TensorClass::activations;
    portable::AutoflexState state{};
  };
  std::vector<Manager> managers;
  std::vector<EpochRecord> history;
  double best_test_accuracy = 0;
};

void save_checkpoint(const std::string& path, const Checkpoint& c);
// Throws FormatError naming the file for a bad magic, another format version, a truncated file
// or a checksum that does not match; IoError when it cannot be read.
Checkpoint load_checkpoint(const std::string& path);

std::uint64_t fnv1a(const void* data, std::size_t bytes, std::uint64_t h = 0xcbf29ce484222325ull);

// A checkpoint's option text (ResolvedConfig::text: one key=value a line) as key → value.
std::map<std::string, std::string> parse_config_lines(const std::string& text);

}  // namespace flexkit::nn
