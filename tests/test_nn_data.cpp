// Training data and run files: the IDX reader against Debian's Fashion-MNIST files (and broken
// copies of them), the batch loader's permutations, layout and normalisation, .npz archives
// read back, and the JSON writer's text.
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "flexkit/data.hpp"
#include "flexkit/error.hpp"
#include "flexkit/flexkit.hpp"
#include "flexkit/nn_io.hpp"
#include "support/test_device.hpp"

namespace flexkit::nn {
namespace {

namespace fs = std::filesystem;

// A directory of its own for each test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    const auto* info = testing::UnitTest::GetInstance()->current_test_info();
    std::string name = "flexkit_test_nn_data_";
    if (info) name += std::string(info->name()) + "_";
    name += std::to_string(rd()) + std::to_string(rd());
    path_ = fs::temp_directory_path() / name;
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(path_)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  fs::path path_;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// An uncompressed IDX file of unsigned bytes (gzread reads plain files as they are).
std::string idx_bytes(const std::vector<std::uint32_t>& dims, const std::vector<std::uint8_t>& data,
                      unsigned type = 0x08) {
  std::string s{'\0', '\0', static_cast<char>(type), static_cast<char>(dims.size())};
  for (std::uint32_t d : dims)
    for (int shift = 24; shift >= 0; shift -= 8) s += static_cast<char>((d >> shift) & 0xff);
  s.append(data.begin(), data.end());
  return s;
}

// Runs `f`, expecting it to throw E with a message holding every one of `parts`.
template <class E, class F>
void expect_error(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no exception was thrown";
  } catch (const E& e) {
    const std::string message = e.what();
    for (const std::string& part : parts)
      EXPECT_NE(message.find(part), std::string::npos)
          << "\"" << part << "\" is not in: " << message;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "the wrong exception was thrown: " << e.what();
  }
}

// ---- IDX files and Fashion-MNIST -------------------------------------------------------------

const std::string kPackage = "dataset-fashion-mnist";

std::string package_file(const std::string& name) {
  return (fs::path(kFashionMnistDirectory) / name).string();
}

#define SKIP_WITHOUT_FASHION_MNIST()                                                      \
  if (!fs::exists(package_file("t10k-labels-idx1-ubyte.gz")) ||                           \
      !fs::exists(package_file("train-images-idx3-ubyte.gz")))                            \
  GTEST_SKIP() << "Debian's package dataset-fashion-mnist is not installed (no files in " \
               << kFashionMnistDirectory << ")"

// Known values of the package's files (read once with Python's gzip and NumPy).
const std::vector<int> kFirstTrainLabels = {9, 0, 0, 3, 0, 2, 7, 2, 5, 5,
                                            0, 9, 5, 5, 7, 9, 1, 0, 6, 4};
const std::vector<int> kFirstTestLabels = {9, 2, 1, 1, 6, 1, 4, 6, 5, 7,
                                           4, 5, 7, 3, 4, 1, 2, 4, 8, 0};
struct KnownPixel {
  std::int64_t image, y, x;
  int value;
};
const std::vector<KnownPixel> kTrainPixels = {
    {0, 0, 0, 0},       {0, 14, 14, 217},    {0, 10, 5, 0},      {1, 5, 20, 222},
    {59999, 27, 27, 0}, {59999, 14, 10, 34}, {12345, 7, 13, 167}};
const std::vector<KnownPixel> kTestPixels = {{0, 14, 14, 110}, {9999, 20, 10, 57}, {5, 3, 3, 0}};
const std::vector<int> kTrainImage0Row14 = {0,   0,   1,   4,   6,   7,   2,   0,   0,   0,
                                            0,   0,   237, 226, 217, 223, 222, 219, 222, 221,
                                            216, 223, 229, 215, 218, 255, 77,  0};
constexpr std::uint64_t kTrainPixelSum = 3431114169ull;
constexpr std::uint64_t kTestPixelSum = 573469082ull;
constexpr std::uint64_t kTrainLabelSum = 270000, kTestLabelSum = 45000;

std::uint64_t sum_of(const std::vector<std::uint8_t>& bytes) {
  return std::accumulate(bytes.begin(), bytes.end(), std::uint64_t{0});
}

TEST(Idx, ReadsThePackagesLabelFiles) {
  SKIP_WITHOUT_FASHION_MNIST();
  IdxData train = read_idx(package_file("train-labels-idx1-ubyte.gz"));
  EXPECT_EQ(train.dims, (std::vector<std::int64_t>{60000}));
  ASSERT_EQ(train.bytes.size(), 60000u);
  for (std::size_t i = 0; i < kFirstTrainLabels.size(); ++i)
    EXPECT_EQ(train.bytes[i], kFirstTrainLabels[i]) << "label " << i;
  EXPECT_EQ(sum_of(train.bytes), kTrainLabelSum);

  IdxData test = read_idx(package_file("t10k-labels-idx1-ubyte.gz"));
  EXPECT_EQ(test.dims, (std::vector<std::int64_t>{10000}));
  ASSERT_EQ(test.bytes.size(), 10000u);
  for (std::size_t i = 0; i < kFirstTestLabels.size(); ++i)
    EXPECT_EQ(test.bytes[i], kFirstTestLabels[i]) << "label " << i;
  EXPECT_EQ(sum_of(test.bytes), kTestLabelSum);
}

TEST(Idx, ReadsThePackagesImageFiles) {
  SKIP_WITHOUT_FASHION_MNIST();
  IdxData test = read_idx(package_file("t10k-images-idx3-ubyte.gz"));
  EXPECT_EQ(test.dims, (std::vector<std::int64_t>{10000, 28, 28}));
  ASSERT_EQ(test.bytes.size(), 10000u * 28 * 28);
  for (const KnownPixel& p : kTestPixels)
    EXPECT_EQ(test.bytes[static_cast<std::size_t>((p.image * 28 + p.y) * 28 + p.x)], p.value)
        << "image " << p.image << " (" << p.y << ", " << p.x << ")";
  EXPECT_EQ(sum_of(test.bytes), kTestPixelSum);
}

TEST(FashionMnist, LoadsTheTrainingSet) {
  SKIP_WITHOUT_FASHION_MNIST();
  Dataset train = load_fashion_mnist(kFashionMnistDirectory, true);
  EXPECT_EQ(train.size(), 60000);
  EXPECT_EQ(train.images.shape(), (Shape{60000, 28, 28}));
  EXPECT_EQ(train.images.dtype(), DType::u8);
  EXPECT_TRUE(train.images.device().is_cpu());
  EXPECT_EQ(train.labels.shape(), (Shape{60000}));
  EXPECT_EQ(train.labels.dtype(), DType::i32);
  const auto* pixels = static_cast<const std::uint8_t*>(train.images.data());
  for (const KnownPixel& p : kTrainPixels)
    EXPECT_EQ(pixels[(p.image * 28 + p.y) * 28 + p.x], p.value)
        << "image " << p.image << " (" << p.y << ", " << p.x << ")";
  EXPECT_EQ(std::vector<int>(pixels + 14 * 28, pixels + 15 * 28), kTrainImage0Row14);
  EXPECT_EQ(std::accumulate(pixels, pixels + 60000 * 28 * 28, std::uint64_t{0}), kTrainPixelSum);
  std::vector<std::int32_t> labels = train.labels.to_vector<std::int32_t>();
  EXPECT_EQ(std::vector<int>(labels.begin(), labels.begin() + 20), kFirstTrainLabels);
  EXPECT_EQ(std::accumulate(labels.begin(), labels.end(), std::uint64_t{0}), kTrainLabelSum);
  std::vector<int> per_class(10);
  for (std::int32_t l : labels) ++per_class[static_cast<std::size_t>(l)];
  EXPECT_EQ(per_class, std::vector<int>(10, 6000));
}

TEST(FashionMnist, TheEmptyDirectoryIsTheDefaultOrFlexkitDataDir) {
  SKIP_WITHOUT_FASHION_MNIST();
  ::unsetenv("FLEXKIT_DATA_DIR");
  EXPECT_EQ(default_fashion_mnist_directory(), kFashionMnistDirectory);
  Dataset test = load_fashion_mnist("", false);
  EXPECT_EQ(test.size(), 10000);
  std::vector<std::int32_t> labels = test.labels.to_vector<std::int32_t>();
  EXPECT_EQ(std::vector<int>(labels.begin(), labels.begin() + 20), kFirstTestLabels);

  // FLEXKIT_DATA_DIR names the directory of the files; here one with a three-image test set.
  TempDir dir;
  std::vector<std::uint8_t> pixels(3 * 28 * 28);
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<std::uint8_t>(i * 7);
  write_file(dir / "t10k-images-idx3-ubyte.gz", idx_bytes({3, 28, 28}, pixels));
  write_file(dir / "t10k-labels-idx1-ubyte.gz", idx_bytes({3}, {4, 0, 9}));
  ::setenv("FLEXKIT_DATA_DIR", dir.str().c_str(), 1);
  EXPECT_EQ(default_fashion_mnist_directory(), dir.str());
  Dataset small = load_fashion_mnist("", false);
  ::setenv("FLEXKIT_DATA_DIR", "", 1);
  EXPECT_EQ(default_fashion_mnist_directory(), kFashionMnistDirectory);
  ::unsetenv("FLEXKIT_DATA_DIR");
  EXPECT_EQ(small.size(), 3);
  EXPECT_EQ(small.labels.to_vector<std::int32_t>(), (std::vector<std::int32_t>{4, 0, 9}));
  EXPECT_EQ(small.images.to_vector<std::uint8_t>(), pixels);
}

TEST(FashionMnist, AMissingFileNamesItAndThePackage) {
  TempDir dir;
  const std::string images = dir / "train-images-idx3-ubyte.gz";
  expect_error<IoError>([&] { read_idx(images); }, {images, std::strerror(ENOENT)});
  expect_error<IoError>([&] { load_fashion_mnist(dir.str(), true); },
                        {images, std::strerror(ENOENT), kPackage,
                         "apt-get install dataset-fashion-mnist", "FLEXKIT_DATA_DIR"});
  // The images present, the labels missing.
  write_file(images, idx_bytes({1, 28, 28}, std::vector<std::uint8_t>(28 * 28)));
  expect_error<IoError>([&] { load_fashion_mnist(dir.str(), true); },
                        {dir / "train-labels-idx1-ubyte.gz", kPackage, "FLEXKIT_DATA_DIR"});
  expect_error<IoError>([&] { read_idx(dir.str()); }, {dir.str(), "directory"});
}

TEST(FashionMnist, ATruncatedFileNamesItAndThePackage) {
  SKIP_WITHOUT_FASHION_MNIST();
  TempDir dir;
  const std::string images = dir / "t10k-images-idx3-ubyte.gz";
  const std::string labels = dir / "t10k-labels-idx1-ubyte.gz";
  const std::string gz_images = read_file(package_file("t10k-images-idx3-ubyte.gz"));
  const std::string gz_labels = read_file(package_file("t10k-labels-idx1-ubyte.gz"));
  write_file(images, gz_images.substr(0, gz_images.size() / 3));
  write_file(labels, gz_labels);
  expect_error<FormatError>([&] { read_idx(images); },
                            {images, "truncated: expected 7840000 bytes of data, found "});
  expect_error<FormatError>(
      [&] { load_fashion_mnist(dir.str(), false); },
      {images, "truncated: expected 7840000 bytes of data, found ", kPackage, "FLEXKIT_DATA_DIR"});

  write_file(images, gz_images);
  write_file(labels, gz_labels.substr(0, gz_labels.size() / 2));
  expect_error<FormatError>(
      [&] { load_fashion_mnist(dir.str(), false); },
      {labels, "truncated: expected 10000 bytes of data, found ", kPackage, "FLEXKIT_DATA_DIR"});

  // All the data but not the gzip trailer (CRC and length).
  write_file(labels, gz_labels.substr(0, gz_labels.size() - 4));
  expect_error<FormatError>([&] { read_idx(labels); }, {labels, "truncated"});
  // A damaged CRC.
  std::string bad_crc = gz_labels;
  bad_crc[bad_crc.size() - 5] = static_cast<char>(bad_crc[bad_crc.size() - 5] ^ 0x55);
  write_file(labels, bad_crc);
  expect_error<FormatError>([&] { read_idx(labels); }, {labels, "corrupt gzip data"});
  // Damaged compressed data.
  std::string bad_data = gz_labels;
  for (std::size_t i = 100; i < 140; ++i) bad_data[i] = static_cast<char>(0xff);
  write_file(labels, bad_data);
  expect_error<FormatError>([&] { read_idx(labels); }, {labels});
}

TEST(Idx, PlainFilesAndTheirErrors) {
  TempDir dir;
  const std::string path = dir / "small.idx";
  write_file(path, idx_bytes({2, 3, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 255}));
  IdxData data = read_idx(path);
  EXPECT_EQ(data.dims, (std::vector<std::int64_t>{2, 3, 2}));
  EXPECT_EQ(data.bytes, (std::vector<std::uint8_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 255}));

  write_file(path, idx_bytes({2, 3, 2}, {1, 2, 3, 4, 5}));
  expect_error<FormatError>([&] { read_idx(path); },
                            {path, "truncated: expected 12 bytes of data, found 5"});
  write_file(path, idx_bytes({2, 3, 2}, std::vector<std::uint8_t>(13)));
  expect_error<FormatError>([&] { read_idx(path); }, {path, "more than the 12 bytes"});
  write_file(path, idx_bytes({2}, {1, 2}, 0x0D));
  expect_error<FormatError>([&] { read_idx(path); }, {path, "0xd (float32)", "0x08"});
  write_file(path, "\x01\x02\x08\x01\x00\x00\x00\x01x");
  expect_error<FormatError>([&] { read_idx(path); }, {path, "not an IDX file"});
  write_file(path, std::string("\0\0\x08\x03\0\0\0\x02\0\0", 10));
  expect_error<FormatError>([&] { read_idx(path); }, {path, "truncated", "3 dims"});
  write_file(path, "");
  expect_error<FormatError>([&] { read_idx(path); }, {path, "truncated"});
}

TEST(FashionMnist, ChecksShapesCountsAndLabels) {
  TempDir dir;
  const std::string images = dir / "t10k-images-idx3-ubyte.gz";
  const std::string labels = dir / "t10k-labels-idx1-ubyte.gz";
  write_file(images, idx_bytes({2, 28, 27}, std::vector<std::uint8_t>(2 * 28 * 27)));
  write_file(labels, idx_bytes({2}, {1, 2}));
  expect_error<FormatError>([&] { load_fashion_mnist(dir.str(), false); },
                            {images, "(2, 28, 27)", kPackage});
  write_file(images, idx_bytes({2, 28, 28}, std::vector<std::uint8_t>(2 * 28 * 28)));
  write_file(labels, idx_bytes({3}, {1, 2, 3}));
  expect_error<FormatError>([&] { load_fashion_mnist(dir.str(), false); },
                            {images, labels, "2 images", "3 labels", kPackage});
  write_file(labels, idx_bytes({2}, {1, 10}));
  expect_error<FormatError>([&] { load_fashion_mnist(dir.str(), false); },
                            {labels, "label 10 at index 1", kPackage});
  write_file(labels, idx_bytes({2}, {1, 9}));
  EXPECT_EQ(load_fashion_mnist(dir.str(), false).size(), 2);
}

// ---- permutations and batches ----------------------------------------------------------------

TEST(EpochPermutation, IsAFixedFunctionOfSeedAndEpoch) {
  // Pinned: resumed runs depend on these staying the same on every platform and release.
  EXPECT_EQ(epoch_permutation(10, 0, 0), (std::vector<std::int64_t>{6, 8, 3, 7, 9, 1, 0, 4, 5, 2}));
  EXPECT_EQ(epoch_permutation(10, 0, 1), (std::vector<std::int64_t>{5, 7, 3, 6, 4, 8, 1, 2, 0, 9}));
  EXPECT_EQ(epoch_permutation(10, 42, 3),
            (std::vector<std::int64_t>{3, 6, 7, 2, 0, 5, 4, 8, 1, 9}));
  std::vector<std::int64_t> big = epoch_permutation(60000, 7, 2);
  EXPECT_EQ(std::vector<std::int64_t>(big.begin(), big.begin() + 8),
            (std::vector<std::int64_t>{50687, 5387, 11198, 41092, 45301, 1365, 48750, 43235}));
  EXPECT_EQ(epoch_permutation(60000, 7, 2), big);
}

TEST(EpochPermutation, CoversEveryIndexOnceAndDiffersBetweenEpochsAndSeeds) {
  for (std::int64_t n : {0, 1, 2, 3, 7, 128, 1000, 60000}) {
    std::vector<std::int64_t> p = epoch_permutation(n, 11, 5);
    std::vector<std::int64_t> sorted = p;
    std::sort(sorted.begin(), sorted.end());
    std::vector<std::int64_t> iota(static_cast<std::size_t>(n));
    std::iota(iota.begin(), iota.end(), 0);
    EXPECT_EQ(sorted, iota) << "n = " << n;
  }
  const auto p0 = epoch_permutation(1000, 3, 0);
  for (std::int64_t epoch = 1; epoch < 20; ++epoch) {
    const auto p = epoch_permutation(1000, 3, epoch);
    EXPECT_NE(p, p0) << "epoch " << epoch;
    // Not a shifted or nearly equal copy: few positions agree (about one by chance).
    int same = 0;
    for (std::size_t i = 0; i < p.size(); ++i) same += p[i] == p0[i];
    EXPECT_LT(same, 10) << "epoch " << epoch;
  }
  EXPECT_NE(epoch_permutation(1000, 4, 0), p0);
  EXPECT_THROW(epoch_permutation(10, 0, -1), ValueError);
  EXPECT_THROW(epoch_permutation(-1, 0, 0), ValueError);
}

// n images of 28x28 with pseudo-random pixels and labels i % 10.
Dataset synthetic_dataset(std::int64_t n) {
  std::mt19937 gen(1234);
  std::vector<std::uint8_t> pixels(static_cast<std::size_t>(n * 28 * 28));
  for (auto& p : pixels) p = static_cast<std::uint8_t>(gen() & 0xff);
  std::vector<std::int32_t> labels(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    labels[static_cast<std::size_t>(i)] = static_cast<int>(i % 10);
  return {Array::from_vector(pixels, {n, 28, 28}), Array::from_vector(labels, {n})};
}

float normalised(std::uint8_t pixel, const LoaderOptions& o) {
  return (static_cast<float>(pixel) / 255.0f - o.mean) / o.std;
}

// Checks every element of a batch against the samples `order[first ...]` of the dataset.
void expect_batch_matches(const Batch& batch, const Dataset& data, const LoaderOptions& options,
                          const std::vector<std::int64_t>& order, std::int64_t first,
                          std::int64_t count) {
  ASSERT_EQ(batch.images.shape(), (Shape{1, 28, 28, 1, count}));
  EXPECT_EQ(batch.images.dtype(), DType::f32);
  EXPECT_EQ(batch.images.device(), options.device);
  EXPECT_EQ(batch.labels.shape(), (Shape{count}));
  EXPECT_EQ(batch.labels.dtype(), DType::i32);
  EXPECT_EQ(batch.labels.device(), options.device);
  ASSERT_EQ(batch.host_labels.size(), static_cast<std::size_t>(count));
  EXPECT_EQ(batch.labels.to_vector<std::int32_t>(), batch.host_labels);
  const std::vector<float> values = batch.images.to_floats();
  const auto* pixels = static_cast<const std::uint8_t*>(data.images.data());
  const auto* labels = static_cast<const std::int32_t*>(data.labels.data());
  for (std::int64_t j = 0; j < count; ++j) {
    const std::int64_t sample = order[static_cast<std::size_t>(first + j)];
    EXPECT_EQ(batch.host_labels[static_cast<std::size_t>(j)], labels[sample]);
    int wrong = 0;
    for (std::int64_t p = 0; p < 28 * 28; ++p) {
      const float expected = normalised(pixels[sample * 784 + p], options);
      // Bit-exact: the loader evaluates the same float32 expression.
      if (values[static_cast<std::size_t>(p * count + j)] != expected && wrong++ < 3)
        ADD_FAILURE() << "batch " << batch.index << " sample " << j << " pixel " << p << ": "
                      << values[static_cast<std::size_t>(p * count + j)] << " != " << expected;
    }
  }
}

std::vector<Batch> all_batches(BatchLoader& loader) {
  std::vector<Batch> out;
  while (auto b = loader.next()) out.push_back(std::move(*b));
  return out;
}

TEST(BatchLoader, BatchesFollowThePermutationWithLayoutAndNormalisation) {
  const Dataset data = synthetic_dataset(37);
  LoaderOptions options{.batch_size = 8, .seed = 5, .device = test::device()};
  BatchLoader loader(data, options);
  EXPECT_EQ(loader.samples(), 37);
  EXPECT_EQ(loader.batches_per_epoch(), 5);
  for (std::int64_t epoch : {0, 1, 4}) {
    if (epoch) loader.start_epoch(epoch);
    const std::vector<std::int64_t> order = epoch_permutation(37, 5, epoch);
    std::vector<Batch> batches = all_batches(loader);
    ASSERT_EQ(batches.size(), 5u);
    for (std::int64_t b = 0; b < 5; ++b) {
      EXPECT_EQ(batches[static_cast<std::size_t>(b)].index, b);
      const std::int64_t count = b < 4 ? 8 : 5;  // the last, partial batch
      expect_batch_matches(batches[static_cast<std::size_t>(b)], data, options, order, b * 8,
                           count);
    }
    EXPECT_FALSE(loader.next().has_value());  // and it stays over
    EXPECT_FALSE(loader.next().has_value());
  }
}

TEST(BatchLoader, DropLastLimitAndFileOrder) {
  const Dataset data = synthetic_dataset(37);
  LoaderOptions options{.batch_size = 8, .seed = 9, .drop_last = true, .device = test::device()};
  BatchLoader dropping(data, options);
  EXPECT_EQ(dropping.batches_per_epoch(), 4);
  std::vector<Batch> batches = all_batches(dropping);
  ASSERT_EQ(batches.size(), 4u);
  for (const Batch& b : batches) EXPECT_EQ(b.images.dim(4), 8);

  LoaderOptions limited{.batch_size = 8, .seed = 9, .limit = 20, .device = test::device()};
  BatchLoader first20(data, limited);
  EXPECT_EQ(first20.samples(), 20);
  EXPECT_EQ(first20.batches_per_epoch(), 3);
  const std::vector<std::int64_t> order = epoch_permutation(20, 9, 0);
  batches = all_batches(first20);
  ASSERT_EQ(batches.size(), 3u);
  for (std::int64_t b = 0; b < 3; ++b)
    expect_batch_matches(batches[static_cast<std::size_t>(b)], data, limited, order, b * 8,
                         b < 2 ? 8 : 4);

  limited.limit = 1000;  // more than there are: all
  EXPECT_EQ(BatchLoader(data, limited).samples(), 37);

  LoaderOptions in_order{
      .batch_size = 16, .shuffle = false, .mean = 0.5f, .std = 0.25f, .device = test::device()};
  BatchLoader sequential(data, in_order);
  std::vector<std::int64_t> identity(37);
  std::iota(identity.begin(), identity.end(), 0);
  for (std::int64_t epoch = 0; epoch < 2; ++epoch) {
    sequential.start_epoch(epoch);
    batches = all_batches(sequential);
    ASSERT_EQ(batches.size(), 3u);
    for (std::int64_t b = 0; b < 3; ++b)
      expect_batch_matches(batches[static_cast<std::size_t>(b)], data, in_order, identity, b * 16,
                           b < 2 ? 16 : 5);
  }
}

TEST(BatchLoader, StartingAtABatchGivesTheSameBatchesAsIteratingToIt) {
  const Dataset data = synthetic_dataset(50);
  LoaderOptions options{.batch_size = 7, .seed = 77, .device = test::device()};
  BatchLoader loader(data, options);
  loader.start_epoch(3);
  std::vector<Batch> full = all_batches(loader);
  ASSERT_EQ(full.size(), 8u);

  const auto expect_same = [](const Batch& a, const Batch& b) {
    EXPECT_EQ(a.index, b.index);
    EXPECT_EQ(a.host_labels, b.host_labels);
    EXPECT_EQ(a.images.to_floats(), b.images.to_floats());
  };
  // The same loader, after other epochs and a batch taken; and a new loader (a resumed run).
  loader.start_epoch(0);
  ASSERT_TRUE(loader.next().has_value());
  loader.start_epoch(3, 5);
  std::vector<Batch> tail = all_batches(loader);
  ASSERT_EQ(tail.size(), 3u);
  for (std::size_t i = 0; i < tail.size(); ++i) expect_same(tail[i], full[5 + i]);

  BatchLoader resumed(data, options);
  resumed.start_epoch(3, 2);
  tail = all_batches(resumed);
  ASSERT_EQ(tail.size(), 6u);
  for (std::size_t i = 0; i < tail.size(); ++i) expect_same(tail[i], full[2 + i]);

  resumed.start_epoch(3, 8);  // at the end: nothing left
  EXPECT_FALSE(resumed.next().has_value());
  EXPECT_THROW(resumed.start_epoch(3, 9), ValueError);
  EXPECT_THROW(resumed.start_epoch(3, -1), ValueError);
  EXPECT_THROW(resumed.start_epoch(-1), ValueError);

  // A loader destroyed while it prepares a batch joins its worker.
  for (int i = 0; i < 10; ++i) {
    BatchLoader brief(data, options);
    brief.start_epoch(static_cast<std::int64_t>(i));
    if (i % 2) (void)brief.next();
  }
}

TEST(BatchLoader, RefusesBadDatasetsAndOptions) {
  const Dataset data = synthetic_dataset(4);
  EXPECT_THROW(BatchLoader(data, {.batch_size = 0}), ValueError);
  EXPECT_THROW(BatchLoader(data, {.limit = -1}), ValueError);
  EXPECT_THROW(BatchLoader(data, {.std = 0.0f}), ValueError);
  EXPECT_THROW(BatchLoader(data, {.std = std::numeric_limits<float>::quiet_NaN()}), ValueError);
  EXPECT_THROW(BatchLoader(data, {.mean = std::numeric_limits<float>::infinity()}), ValueError);
  EXPECT_THROW(BatchLoader(Dataset{}, {}), ValueError);
  EXPECT_THROW(BatchLoader(Dataset{data.images, Array::zeros({4}, DType::f32)}, {}), DTypeError);
  EXPECT_THROW(BatchLoader(Dataset{data.images, Array::zeros({3}, DType::i32)}, {}), ShapeError);
  EXPECT_THROW(BatchLoader(Dataset{data.images.reshape({4, 784}), data.labels}, {}), ShapeError);
  EXPECT_THROW(BatchLoader(Dataset{Array::zeros({4, 28, 28}, DType::f32), data.labels}, {}),
               DTypeError);
  // An empty dataset has no batches.
  BatchLoader none(synthetic_dataset(0), {});
  EXPECT_EQ(none.batches_per_epoch(), 0);
  EXPECT_FALSE(none.next().has_value());
}

TEST(BatchLoader, FashionMnistBatchesMatchTheFiles) {
  SKIP_WITHOUT_FASHION_MNIST();
  const Dataset test = load_fashion_mnist(kFashionMnistDirectory, false);
  LoaderOptions options{.seed = 1, .device = test::device()};
  BatchLoader loader(test, options);
  EXPECT_EQ(loader.batches_per_epoch(), 79);  // 78 of 128 and one of 16
  const std::vector<std::int64_t> order = epoch_permutation(10000, 1, 0);
  std::optional<Batch> first = loader.next();
  ASSERT_TRUE(first.has_value());
  expect_batch_matches(*first, test, options, order, 0, 128);
  std::int64_t seen = 128;
  std::vector<int> labels_seen(10);
  for (std::int32_t l : first->host_labels) ++labels_seen[static_cast<std::size_t>(l)];
  while (auto b = loader.next()) {
    seen += b->images.dim(4);
    for (std::int32_t l : b->host_labels) ++labels_seen[static_cast<std::size_t>(l)];
    if (b->index == 78) expect_batch_matches(*b, test, options, order, 78 * 128, 16);
  }
  EXPECT_EQ(seen, 10000);
  EXPECT_EQ(labels_seen, std::vector<int>(10, 1000));
  // The default mean and std are the training set's: image 0, pixel (14, 14) = 110 here.
  EXPECT_FLOAT_EQ(normalised(110, options), (110.0f / 255.0f - 0.2860f) / 0.3530f);
}

// ---- .npz ------------------------------------------------------------------------------------

TEST(Npz, RoundTripsArraysAndStrings) {
  TempDir dir;
  const std::string path = dir / "run.npz";
  const Device device = test::device();
  Array f32 = Array::arange(-3.0, 3.0, 0.5, DType::f32, device).reshape({3, 4});
  Array view = f32.T()(slice(0, 4, 2), all);  // strided: columns 0 and 2, transposed
  Array i32 = Array::from_vector(std::vector<std::int32_t>{-2147483647 - 1, 0, 7, 2147483647},
                                 {2, 2}, device);
  Array u8 = Array::arange(0, 24, 1, DType::u8, device).reshape({2, 3, 4});
  Array f64 = Array::from_vector(std::vector<double>{0.1, -1e300, 5e-324}, {3});
  Array scalar = Array::full({}, 2.5, DType::f32, device);
  Array empty = Array::zeros({0, 3}, DType::f32, device);
  Array flex =
      Array::from_floats(std::vector<float>{0.5f, -0.25f, 1.75f}, {3}, DType::flex16, device);
  const std::string model =
      "neuron lif(x; v) -> s {\n  h = v + (x - v) / 2.0;\n}\n\"quoted\" "
      "\xc3\xbc\xe2\x9c\x93\xf0\x9f\x9a\x80";  // ü ✓ 🚀
  save_npz(path,
           {{"f32", f32},
            {"view", view},
            {"i32", i32},
            {"u8", u8},
            {"f64", f64},
            {"scalar", scalar},
            {"empty", empty},
            {"flex", flex}},
           {{"model", model}, {"nothing", ""}});
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"run.npz"});  // no temporary file left
  const std::string bytes = read_file(path);
  EXPECT_EQ(bytes.substr(0, 4), std::string("PK\x03\x04"));

  std::map<std::string, Array> back = load_npz(path);
  ASSERT_EQ(back.size(), 8u);
  const auto expect_same = [&](const std::string& name, const Array& expected) {
    SCOPED_TRACE(name);
    const Array& a = back.at(name);
    EXPECT_TRUE(a.device().is_cpu());
    EXPECT_EQ(a.shape(), expected.shape());
    EXPECT_EQ(a.dtype(), expected.dtype() == DType::flex16 ? DType::f32 : expected.dtype());
    EXPECT_EQ(a.to_doubles(), expected.to_doubles());
  };
  for (const auto& [name, a] : std::vector<std::pair<std::string, Array>>{{"f32", f32},
                                                                          {"view", view},
                                                                          {"i32", i32},
                                                                          {"u8", u8},
                                                                          {"f64", f64},
                                                                          {"scalar", scalar},
                                                                          {"empty", empty},
                                                                          {"flex", flex}})
    expect_same(name, a);
  EXPECT_EQ(back.at("view").to_floats(),
            (std::vector<float>{-3.0f, -1.0f, 1.0f, -2.0f, 0.0f, 2.0f}));
  EXPECT_EQ(back.at("flex").to_floats(), (std::vector<float>{0.5f, -0.25f, 1.75f}));

  std::map<std::string, std::string> strings = load_npz_strings(path);
  EXPECT_EQ(strings, (std::map<std::string, std::string>{{"model", model}, {"nothing", ""}}));

  // The same contents give the same bytes (no timestamps).
  const std::string again = dir / "again.npz";
  save_npz(again,
           {{"f32", f32},
            {"view", view},
            {"i32", i32},
            {"u8", u8},
            {"f64", f64},
            {"scalar", scalar},
            {"empty", empty},
            {"flex", flex}},
           {{"model", model}, {"nothing", ""}});
  EXPECT_EQ(read_file(again), bytes);
}

TEST(Npz, RefusesBadEntriesAndLeavesNothingBehind) {
  TempDir dir;
  const std::string path = dir / "out.npz";
  Array a = Array::zeros({2}, DType::f32);
  save_npz(path, {{"a", a}});
  const std::string before = read_file(path);
  expect_error<ValueError>([&] { save_npz(path, {{"a", a}, {"a", a}}); }, {"\"a\"", "twice"});
  expect_error<ValueError>([&] { save_npz(path, {{"a", a}}, {{"a", "text"}}); }, {"twice"});
  expect_error<ValueError>([&] { save_npz(path, {{"", a}}); }, {"empty name"});
  expect_error<ValueError>([&] { save_npz(path, {{"x/y", a}}); }, {"x/y"});
  expect_error<ValueError>([&] { save_npz(path, {{"u", Array()}}); }, {"u"});
  expect_error<ValueError>(
      [&] {
        save_npz(path, {}, {{"s", "bad \xff utf-8"}});
      },
      {"\"s\"", "UTF-8"});
  expect_error<ValueError>([&] { save_npz(path, {}, {{"s", std::string("a\0b", 3)}}); }, {"NUL"});
  EXPECT_EQ(read_file(path), before);  // untouched
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"out.npz"});

  const std::string nowhere = dir / "missing/out.npz";
  expect_error<IoError>([&] { save_npz(nowhere, {{"a", a}}); }, {nowhere});
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"out.npz"});
  expect_error<IoError>([&] { save_npz(dir.str(), {{"a", a}}); }, {"directory"});
}

TEST(Npz, TheReaderChecksCrcsAndStructure) {
  TempDir dir;
  const std::string path = dir / "out.npz";
  save_npz(path, {{"values", Array::arange(100, DType::f32)}});
  std::string bytes = read_file(path);
  const std::size_t data = bytes.find("\x93NUMPY") + 128 + 40;  // inside the elements
  std::string damaged = bytes;
  damaged[data] = static_cast<char>(damaged[data] ^ 1);
  write_file(path, damaged);
  expect_error<FormatError>([&] { load_npz(path); }, {path, "values.npy", "CRC"});
  write_file(path, bytes.substr(0, bytes.size() / 2));
  expect_error<FormatError>([&] { load_npz(path); }, {path});
  write_file(path, "not a zip file at all, just some text that is long enough");
  expect_error<FormatError>([&] { load_npz(path); }, {path, "not a zip archive"});
  expect_error<IoError>([&] { load_npz(dir / "absent.npz"); }, {"absent.npz"});
}

// ---- JSON ------------------------------------------------------------------------------------

TEST(Json, EscapesStrings) {
  EXPECT_EQ(to_json("plain"), "\"plain\"");
  EXPECT_EQ(to_json("q\"b\\s/"), R"("q\"b\\s/")");
  EXPECT_EQ(to_json("\n\r\t\b\f"), R"("\n\r\t\b\f")");
  EXPECT_EQ(to_json(std::string("\x01\x1f\x7f", 3)), "\"\\u0001\\u001f\x7f\"");
  EXPECT_EQ(to_json(std::string("nul\0!", 5)), R"("nul\u0000!")");
  EXPECT_EQ(to_json("\xc3\xa9\xe2\x9c\x93\xf0\x9f\x9a\x80"),
            "\"\xc3\xa9\xe2\x9c\x93\xf0\x9f\x9a\x80\"");
  for (const char* bad : {"\xff", "\xc3", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "a\x80"})
    EXPECT_THROW(to_json(bad), ValueError) << bad;
  EXPECT_THROW(to_json(JsonValue::object({{"\xfe", 1}})), ValueError);
}

TEST(Json, NestsObjectsInInsertionOrder) {
  JsonValue run = JsonValue::object({{"name", "lif-mlp"}, {"epochs", 3}});
  run.set("lr", 0.001).set("layers", JsonValue::array({784, 256, 10}));
  run.set("metrics", JsonValue::object({{"loss", JsonValue::array({2.25, 0.5})},
                                        {"empty_list", JsonValue::array()},
                                        {"empty_object", JsonValue::object()},
                                        {"ok", true},
                                        {"note", nullptr}}));
  run.set("epochs", 4);  // replaced where it is
  EXPECT_EQ(to_json(run), R"({
  "name": "lif-mlp",
  "epochs": 4,
  "lr": 0.001,
  "layers": [
    784,
    256,
    10
  ],
  "metrics": {
    "loss": [
      2.25,
      0.5
    ],
    "empty_list": [],
    "empty_object": {},
    "ok": true,
    "note": null
  }
})");
  EXPECT_EQ(to_json(run, 0),
            R"({"name":"lif-mlp","epochs":4,"lr":0.001,"layers":[784,256,10],"metrics":)"
            R"({"loss":[2.25,0.5],"empty_list":[],"empty_object":{},"ok":true,"note":null}})");
  EXPECT_EQ(to_json(JsonValue::array({JsonValue::array({1})}), 4), "[\n    [\n        1\n    ]\n]");
  ASSERT_NE(run.find("lr"), nullptr);
  EXPECT_EQ(run.find("lr")->as_double(), 0.001);
  EXPECT_EQ(run.find("absent"), nullptr);
  EXPECT_EQ(run.members().size(), 5u);
  EXPECT_THROW(JsonValue::object({{"a", 1}, {"a", 2}}), ValueError);
  EXPECT_THROW(JsonValue(1).push_back(2), ValueError);
  EXPECT_THROW(JsonValue::array().set("a", 1), ValueError);
  EXPECT_THROW((void)JsonValue("s").as_int(), ValueError);
}

TEST(Json, FormatsNumbers) {
  EXPECT_EQ(to_json(0), "0");
  EXPECT_EQ(to_json(-17), "-17");
  EXPECT_EQ(to_json(std::numeric_limits<std::int64_t>::min()), "-9223372036854775808");
  EXPECT_EQ(to_json(std::numeric_limits<std::int64_t>::max()), "9223372036854775807");
  EXPECT_EQ(to_json(std::uint64_t{9223372036854775807ull}), "9223372036854775807");
  EXPECT_THROW(JsonValue(std::uint64_t{9223372036854775808ull}), ValueError);
  EXPECT_EQ(to_json(1.0), "1.0");
  EXPECT_EQ(to_json(-0.0), "-0.0");
  EXPECT_EQ(to_json(0.1), "0.1");
  EXPECT_EQ(to_json(1.0 / 3.0), "0.3333333333333333");
  EXPECT_EQ(to_json(2.5f), "2.5");
  EXPECT_EQ(to_json(0.1f), "0.10000000149011612");  // the float's exact double value
  EXPECT_EQ(to_json(1e300), "1e+300");
  EXPECT_EQ(to_json(1e21), "1e+21");
  EXPECT_EQ(to_json(123456789012.0), "123456789012.0");
  EXPECT_EQ(to_json(5e-324), "5e-324");
  EXPECT_EQ(to_json(std::numeric_limits<double>::max()), "1.7976931348623157e+308");
  EXPECT_EQ(to_json(true), "true");
  EXPECT_EQ(to_json(JsonValue()), "null");
  EXPECT_THROW(JsonValue(std::numeric_limits<double>::quiet_NaN()), ValueError);
  EXPECT_THROW(JsonValue(std::numeric_limits<double>::infinity()), ValueError);
  EXPECT_THROW(JsonValue(-std::numeric_limits<float>::infinity()), ValueError);
  // Every double reads back exactly.
  std::mt19937_64 gen(99);
  for (int i = 0; i < 20000; ++i) {
    std::uint64_t bits = gen();
    double v;
    std::memcpy(&v, &bits, sizeof v);
    if (!std::isfinite(v)) continue;
    const std::string text = to_json(v);
    EXPECT_EQ(std::strtod(text.c_str(), nullptr), v) << text;
    EXPECT_NE(text.find_first_of(".e"), std::string::npos) << text;
  }
}

TEST(Json, WritesFilesAtomically) {
  TempDir dir;
  const std::string path = dir / "metrics.json";
  write_text_file_atomically(path, "{}\n");
  EXPECT_EQ(read_file(path), "{}\n");
  write_text_file_atomically(path, to_json(JsonValue::object({{"epoch", 1}})) + "\n");
  EXPECT_EQ(read_file(path), "{\n  \"epoch\": 1\n}\n");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"metrics.json"});
  const std::string nowhere = dir / "no/such/dir/metrics.json";
  expect_error<IoError>([&] { write_text_file_atomically(nowhere, "x"); },
                        {nowhere, std::strerror(ENOENT)});
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"metrics.json"});
}

}  // namespace
}  // namespace flexkit::nn
