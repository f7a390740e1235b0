// Training data: IDX files (the MNIST family's format), the Fashion-MNIST data set, and a batch
// loader that shuffles, normalises and lays out batches for the batch-innermost layers.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "flexkit/array.hpp"

namespace flexkit::nn {

// ---- IDX files -------------------------------------------------------------------------------

// The contents of an IDX file of unsigned bytes: its dims (outermost first) and its elements in
// row-major order (shape_numel(dims) bytes).
struct IdxData {
  std::vector<std::int64_t> dims;
  std::vector<std::uint8_t> bytes;
};

// Reads an IDX file of type 0x08 (unsigned byte), gzip-compressed or not. Throws IoError (the
// file cannot be opened or read; the message names the path and the system's reason) or
// FormatError (bad magic or element type, corrupt or truncated gzip data, fewer or more bytes
// than the dims promise: "truncated: expected N bytes of data, found M").
IdxData read_idx(const std::string& path);

// ---- Fashion-MNIST ---------------------------------------------------------------------------

// Where Debian's package dataset-fashion-mnist installs the four files.
inline constexpr const char* kFashionMnistDirectory = "/usr/share/datasets/fashion-mnist";

// The directory load_fashion_mnist reads when given "": the environment variable
// FLEXKIT_DATA_DIR when it is set and not empty (it names the directory that holds the four
// .gz files itself), kFashionMnistDirectory otherwise.
std::string default_fashion_mnist_directory();

// A labelled image set, on the host.
struct Dataset {
  Array images;  // u8 [n, 28, 28] on the cpu
  Array labels;  // i32 [n] on the cpu, each in [0, 10)
  std::int64_t size() const { return images.defined() ? images.dim(0) : 0; }
};

// Reads train-images-idx3-ubyte.gz and train-labels-idx1-ubyte.gz (train) or t10k-images-
// idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz (test) from `directory` ("" means
// default_fashion_mnist_directory()). Checks that the images are 28x28, that there are as many
// labels as images and that every label is below 10. Errors are read_idx's (IoError,
// FormatError), their message naming the file and how to get it.
Dataset load_fashion_mnist(const std::string& directory, bool train);

// ---- batches ---------------------------------------------------------------------------------

// One batch, laid out for the layers: channels, height, width, time, batch innermost.
struct Batch {
  Array images;  // f32 (1, H, W, 1, B) on LoaderOptions::device, normalised; (1, 28, 28, 1, B)
                 // for Fashion-MNIST. B is batch_size, or fewer for the last batch.
  Array labels;  // i32 [B] on the same device
  std::vector<std::int32_t> host_labels;
  std::int64_t index = 0;          // batch index in the epoch
  std::int64_t global_size = 0;    // the samples of the whole batch, over every shard
  std::int64_t global_offset = 0;  // where this shard's samples start in the whole batch
};

struct LoaderOptions {
  std::int64_t batch_size = 128;
  bool shuffle = true;  // false: the samples in file order every epoch
  std::uint64_t seed = 0;
  // Each pixel becomes (pixel / 255 - mean) / std, in float32. The defaults are the training
  // set's mean and standard deviation.
  float mean = 0.2860f, std = 0.3530f;
  std::int64_t limit = 0;  // use the first `limit` samples only (0, or more than n: all)
  bool drop_last = false;  // drop the last batch when it is smaller than batch_size
  Device device = Device::cpu();
  // Data-parallel training: each batch of batch_size samples (the global batch) is cut into
  // `shards` consecutive parts as equal as can be (sizes differ by one at most), and this loader
  // yields part `shard` of each; Batch::global_size tells the whole batch's size.
  std::int64_t shard = 0, shards = 1;
};

// The order in which an epoch visits n samples: a permutation of 0..n-1 that is a pure function
// of (n, seed, epoch), the same on every platform and standard library (a splitmix64 generator
// and Fisher-Yates shuffle), so that a run resumed at an epoch sees the same batches.
std::vector<std::int64_t> epoch_permutation(std::int64_t n, std::uint64_t seed, std::int64_t epoch);

// Iterates over the batches of one epoch at a time. A background thread prepares the next
// batch on the host (gather, normalise, transpose) while the caller computes on the current one;
// next() then moves it to the device. Batch b of epoch e holds the samples
// epoch_permutation(samples(), seed, e)[b * batch_size, ...) (file order without shuffle), so the
// batches depend only on the options, the epoch and the batch index.
//
// The loader shares the dataset's storage (contiguous host arrays are not copied), whose
// elements must not change while it is in use. Not thread-safe: one thread calls start_epoch and
// next.
class BatchLoader {
 public:
  // Throws ShapeError / DTypeError for a dataset that is not u8 [n, H, W] with i32 [n] labels,
  // ValueError for options out of range (batch_size < 1, limit < 0, std not positive and
  // finite, mean not finite).
  BatchLoader(const Dataset& dataset, LoaderOptions options);
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // ceil(samples() / batch_size), or floor with drop_last.
  std::int64_t batches_per_epoch() const;
  // The samples an epoch visits: min(limit, n), or n without a limit.
  std::int64_t samples() const;
  // Starts epoch `epoch` (>= 0) at batch `first_batch` (0 <= first_batch <= batches_per_epoch()),
  // abandoning whatever the current epoch had left. The loader starts at epoch 0, batch 0.
  void start_epoch(std::int64_t epoch, std::int64_t first_batch = 0);
  // The next batch of the current epoch, or nullopt when the epoch is over. Errors of the
  // background preparation are thrown here.
  std::optional<Batch> next();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace flexkit::nn
