// Fashion-MNIST (Zalando's 28x28 grey-scale clothing images, 10 classes) from its IDX files.
#include <cstring>
#include <filesystem>

#include "core/environment.hpp"
#include "core/text.hpp"
#include "flexkit/data.hpp"
#include "flexkit/error.hpp"

namespace flexkit::nn {

using flexkit::detail::cat;

namespace {

constexpr std::int64_t kSide = 28;
constexpr int kClasses = 10;
constexpr const char* kHint =
    "; to get the data set, install Debian's package dataset-fashion-mnist (apt-get install "
    "dataset-fashion-mnist) or set FLEXKIT_DATA_DIR to a directory holding its four .gz files";

IdxData read_part(const std::string& path) {
  try {
    return read_idx(path);
  } catch (const IoError& e) {
    throw IoError(cat("load_fashion_mnist: ", e.what(), kHint));
  } catch (const FormatError& e) {
    throw FormatError(cat("load_fashion_mnist: ", e.what(), kHint));
  }
}

}  // namespace

std::string default_fashion_mnist_directory() {
  return flexkit::detail::env_value("FLEXKIT_DATA_DIR").value_or(kFashionMnistDirectory);
}

Dataset load_fashion_mnist(const std::string& directory, bool train) {
  const std::filesystem::path dir =
      directory.empty() ? default_fashion_mnist_directory() : directory;
  const std::string prefix = train ? "train" : "t10k";
  const std::string images_path = (dir / (prefix + "-images-idx3-ubyte.gz")).string();
  const std::string labels_path = (dir / (prefix + "-labels-idx1-ubyte.gz")).string();

  IdxData images = read_part(images_path);
  if (images.dims.size() != 3 || images.dims[1] != kSide || images.dims[2] != kSide)
    throw FormatError(cat("load_fashion_mnist: ", images_path, " holds dims ",
                          shape_str(images.dims), "; Fashion-MNIST images are (n, 28, 28)", kHint));
  IdxData labels = read_part(labels_path);
  if (labels.dims.size() != 1)
    throw FormatError(cat("load_fashion_mnist: ", labels_path, " holds dims ",
                          shape_str(labels.dims), "; labels are one-dimensional", kHint));
  const std::int64_t n = images.dims[0];
  if (labels.dims[0] != n)
    throw FormatError(cat("load_fashion_mnist: ", images_path, " holds ", n, " images but ",
                          labels_path, " holds ", labels.dims[0], " labels", kHint));

  Dataset out;
  out.images = Array::empty({n, kSide, kSide}, DType::u8, Device::cpu());
  if (!images.bytes.empty())
    std::memcpy(out.images.data(), images.bytes.data(), images.bytes.size());
  out.labels = Array::empty({n}, DType::i32, Device::cpu());
  auto* label = static_cast<std::int32_t*>(out.labels.data());
  for (std::int64_t i = 0; i < n; ++i) {
    const int value = labels.bytes[static_cast<std::size_t>(i)];
    if (value >= kClasses)
      throw FormatError(cat("load_fashion_mnist: ", labels_path, " holds label ", value,
                            " at index ", i, "; Fashion-MNIST has classes 0-9", kHint));
    label[i] = value;
  }
  return out;
}

}  // namespace flexkit::nn
