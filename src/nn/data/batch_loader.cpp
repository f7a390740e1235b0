// Batches for training: a per-epoch permutation, and a background thread that gathers,
// normalises and transposes the next batch while the caller computes on the current one.
#include <algorithm>
#include <array>
#include <cmath>
#include <exception>
#include <system_error>
#include <thread>

#include "core/text.hpp"
#include "core/upload.hpp"
#include "flexkit/data.hpp"
#include "flexkit/error.hpp"

namespace flexkit::nn {

using flexkit::detail::cat;

namespace {

// splitmix64 (Steele, Lea, Flood 2014): a fixed, portable generator; std::'s distributions
// differ between standard libraries.
std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t state) : state_(state) {}
  std::uint64_t next() { return mix64(state_ += 0x9E3779B97F4A7C15ull); }
  // Uniform in [0, bound), bound > 0, without modulo bias: draws below 2^64 mod bound are
  // rejected, which leaves a multiple of bound equally likely values.
  std::uint64_t below(std::uint64_t bound) {
    const std::uint64_t threshold = (0 - bound) % bound;
    while (true) {
      const std::uint64_t r = next();
      if (r >= threshold) return r % bound;
    }
  }

 private:
  std::uint64_t state_;
};

struct HostBatch {
  Array images;  // f32 (1, H, W, 1, B) on the cpu
  std::vector<std::int32_t> labels;
  std::int64_t index = 0;
  std::int64_t global_size = 0, global_offset = 0;
};

}  // namespace

std::vector<std::int64_t> epoch_permutation(std::int64_t n, std::uint64_t seed,
                                            std::int64_t epoch) {
  if (n < 0) throw ValueError(cat("epoch_permutation: n = ", n, " is negative"));
  if (epoch < 0) throw ValueError(cat("epoch_permutation: epoch ", epoch, " is negative"));
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
  // Seed and epoch both pass through the mixer, so that neighbouring epochs (or seeds) start
  // far apart in the generator's sequence instead of one step apart.
  SplitMix64 rng(mix64(seed) ^ mix64(static_cast<std::uint64_t>(epoch) ^ 0xD1B54A32D192ED03ull));
  for (std::int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(i) + 1));
    std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(j)]);
  }
  return order;
}

struct BatchLoader::State {
  // The dataset, on the host and contiguous.
  Array images, labels;
  const std::uint8_t* pixels = nullptr;
  const std::int32_t* label_values = nullptr;
  std::int64_t height = 0, width = 0;
  LoaderOptions options;
  std::int64_t samples = 0;
  std::int64_t batches = 0;
  std::array<float, 256> normalised{};  // pixel value -> float32 input

  // The epoch: its order (empty without shuffle: file order) and the next batch to return.
  std::int64_t epoch = -1;
  std::vector<std::int64_t> order;
  std::int64_t next_batch = 0;

  // The batch the worker prepares (-1: none). `prepared` and `error` are written by the worker
  // and read only after it is joined.
  std::thread worker;
  std::int64_t pending = -1;
  std::optional<HostBatch> prepared;
  std::exception_ptr error;

  HostBatch prepare(std::int64_t b) const {
    const std::int64_t global_first = b * options.batch_size;
    const std::int64_t global_count = std::min(options.batch_size, samples - global_first);
    // This shard's consecutive part of the global batch.
    const std::int64_t lo = global_count * options.shard / options.shards;
    const std::int64_t hi = global_count * (options.shard + 1) / options.shards;
    const std::int64_t first = global_first + lo, count = hi - lo;
    const std::int64_t pixels_per_image = height * width;
    HostBatch out;
    out.index = b;
    out.global_size = global_count;
    out.global_offset = lo;
    out.images = Array::empty({1, height, width, 1, count}, DType::f32, Device::cpu());
    out.labels.resize(static_cast<std::size_t>(count));
    std::vector<const std::uint8_t*> rows(static_cast<std::size_t>(count));
    for (std::int64_t j = 0; j < count; ++j) {
      const std::int64_t sample =
          order.empty() ? first + j : order[static_cast<std::size_t>(first + j)];
      rows[static_cast<std::size_t>(j)] = pixels + sample * pixels_per_image;
      out.labels[static_cast<std::size_t>(j)] = label_values[sample];
    }
    // Batch innermost: element (0, y, x, 0, j) is at (y * W + x) * B + j.
    auto* dst = static_cast<float*>(out.images.data());
    for (std::int64_t p = 0; p < pixels_per_image; ++p) {
      float* row = dst + p * count;
      for (std::int64_t j = 0; j < count; ++j)
        row[j] = normalised[rows[static_cast<std::size_t>(j)][p]];
    }
    return out;
  }

  void join() {
    if (worker.joinable()) worker.join();
  }

  // Drops whatever the worker was preparing.
  void abandon() {
    join();
    pending = -1;
    prepared.reset();
    error = nullptr;
  }

  // Starts preparing batch b in the background. Where no thread can be started, next()
  // prepares it itself.
  void launch(std::int64_t b) {
    abandon();
    if (b >= batches) return;
    try {
      worker = std::thread([this, b] {
        try {
          prepared = prepare(b);
        } catch (...) {
          error = std::current_exception();
        }
      });
      pending = b;
    } catch (const std::system_error&) {
      pending = -1;
    }
  }
};

BatchLoader::BatchLoader(const Dataset& dataset, LoaderOptions options)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  const Array& images = dataset.images;
  const Array& labels = dataset.labels;
  if (!images.defined() || !labels.defined())
    throw ValueError("BatchLoader: the dataset's images or labels are empty (default-constructed)");
  if (images.dtype() != DType::u8)
    throw DTypeError(cat("BatchLoader: the images are ", images.describe(), "; expected u8"));
  if (images.rank() != 3)
    throw ShapeError(
        cat("BatchLoader: the images are ", images.describe(), "; expected u8 [n, height, width]"));
  if (labels.dtype() != DType::i32)
    throw DTypeError(cat("BatchLoader: the labels are ", labels.describe(), "; expected i32"));
  if (labels.rank() != 1 || labels.dim(0) != images.dim(0))
    throw ShapeError(cat("BatchLoader: the labels are ", labels.describe(), " for images ",
                         images.describe(), "; expected i32 [", images.dim(0), "]"));
  if (options.batch_size < 1)
    throw ValueError(cat("BatchLoader: batch_size ", options.batch_size, " is below 1"));
  if (options.limit < 0)
    throw ValueError(cat("BatchLoader: limit ", options.limit, " is negative"));
  if (options.shards < 1 || options.shard < 0 || options.shard >= options.shards)
    throw ValueError(cat("BatchLoader: shard ", options.shard, " of ", options.shards,
                         " is not one of the shards"));
  if (!std::isfinite(options.mean))
    throw ValueError(cat("BatchLoader: mean ", options.mean, " is not finite"));
  if (!std::isfinite(options.std) || !(options.std > 0))
    throw ValueError(cat("BatchLoader: std ", options.std, " is not a positive finite number"));

  s.images = images.device().is_cpu() ? images.contiguous() : images.copy_to(Device::cpu());
  s.labels = labels.device().is_cpu() ? labels.contiguous() : labels.copy_to(Device::cpu());
  s.pixels = static_cast<const std::uint8_t*>(s.images.data());
  s.label_values = static_cast<const std::int32_t*>(s.labels.data());
  s.height = images.dim(1);
  s.width = images.dim(2);
  s.options = options;
  const std::int64_t n = images.dim(0);
  s.samples = options.limit > 0 ? std::min(options.limit, n) : n;
  s.batches = options.drop_last ? s.samples / options.batch_size
                                : (s.samples + options.batch_size - 1) / options.batch_size;
  for (int v = 0; v < 256; ++v)
    s.normalised[static_cast<std::size_t>(v)] =
        (static_cast<float>(v) / 255.0f - options.mean) / options.std;
  // Epoch 0's order now; its first batch is prepared on the first next().
  if (options.shuffle) s.order = epoch_permutation(s.samples, options.seed, 0);
  s.epoch = 0;
}

BatchLoader::~BatchLoader() {
  if (state_) state_->join();
}

std::int64_t BatchLoader::batches_per_epoch() const {
  return state_->batches;
}

std::int64_t BatchLoader::samples() const {
  return state_->samples;
}

void BatchLoader::start_epoch(std::int64_t epoch, std::int64_t first_batch) {
  State& s = *state_;
  if (epoch < 0) throw ValueError(cat("BatchLoader::start_epoch: epoch ", epoch, " is negative"));
  if (first_batch < 0 || first_batch > s.batches)
    throw ValueError(cat("BatchLoader::start_epoch: first_batch ", first_batch, " is outside [0, ",
                         s.batches, "] (the batches of an epoch)"));
  s.abandon();  // the worker reads the order: it must be done before the order changes
  if (epoch != s.epoch) {
    if (s.options.shuffle) s.order = epoch_permutation(s.samples, s.options.seed, epoch);
    s.epoch = epoch;
  }
  s.next_batch = first_batch;
  s.launch(first_batch);
}

std::optional<Batch> BatchLoader::next() {
  State& s = *state_;
  if (s.next_batch >= s.batches) return std::nullopt;
  HostBatch host;
  if (s.pending == s.next_batch) {
    s.join();
    s.pending = -1;
    if (s.error) {
      std::exception_ptr error = s.error;
      s.error = nullptr;
      std::rethrow_exception(error);  // the batch stays next: a later call tries it again
    }
    host = std::move(*s.prepared);
    s.prepared.reset();
  } else {
    s.abandon();
    host = s.prepare(s.next_batch);
  }
  Batch out;
  out.index = host.index;
  out.global_size = host.global_size;
  out.global_offset = host.global_offset;
  const Device device = s.options.device;
  const Shape label_shape{static_cast<std::int64_t>(host.labels.size())};
  // Queued behind the work before it without waiting for it (staged through pinned memory), so
  // that the host prepares the next step while the GPU runs this one. A failing copy leaves this
  // batch the next one.
  out.images = device.is_cpu() ? host.images : detail::upload_without_waiting(host.images, device);
  out.labels = detail::upload_without_waiting(
      Array::from_vector(host.labels, label_shape, Device::cpu()), device);
  out.host_labels = std::move(host.labels);

  ++s.next_batch;
  s.launch(s.next_batch);  // the following batch, while the caller works on this one
  return out;
}

}  // namespace flexkit::nn
