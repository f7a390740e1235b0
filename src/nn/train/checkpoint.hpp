// Checkpoint files: everything a run needs to continue bit for bit.
//
// Layout (little-endian): magic "FLEXKITCKPT\n", u32 format version, u64 configuration hash,
// then length-prefixed sections (the configuration text, counters, RNG states, parameters,
// optimizer state, history), then a u64 FNV-1a checksum of every byte before it. Written to a
// temporary file in the same directory, flushed, then renamed over the target.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "flexkit/array.hpp"
#include "flexkit/train.hpp"

namespace flexkit::nn {

inline constexpr std::uint32_t kCheckpointVersion = 1;

struct Checkpoint {
  std::uint64_t config_hash = 0;
  std::string config_text;  // the resolved configuration, one `key=value` a line
  std::int64_t epochs_done = 0, global_step = 0;
  std::vector<std::uint64_t> rng_states;
  std::vector<std::pair<std::string, Array>> parameters;  // host f32
  std::string optimizer;
  std::int64_t optimizer_steps = 0;
  std::vector<Array> optimizer_state;  // host f32
  std::vector<EpochRecord> history;
  double best_test_accuracy = 0;
};

void save_checkpoint(const std::string& path, const Checkpoint& c);
// Throws FormatError naming the file for a bad magic, another format version, a truncated file
// or a checksum that does not match; IoError when it cannot be read.
Checkpoint load_checkpoint(const std::string& path);

std::uint64_t fnv1a(const void* data, std::size_t bytes, std::uint64_t h = 0xcbf29ce484222325ull);

}  // namespace flexkit::nn
