// Element data: factories, host spans in and out, copies between devices (bit-exact for every
// dtype), assign/fill with flex16 re-scaling and statistics. Runs on the --device given.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <random>

#include "flexkit/flexkit.hpp"
#include "support/test_device.hpp"

namespace flexkit {
namespace {

using test::device;

template <class T>
std::vector<T> random_values(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<T> v(n);
  for (auto& x : v) {
    if constexpr (std::is_same_v<T, float>)
      x = std::uniform_real_distribution<float>(-1e3f, 1e3f)(rng);
    else if constexpr (std::is_same_v<T, double>)
      x = std::uniform_real_distribution<double>(-1, 1)(rng);
    else if constexpr (std::is_same_v<T, BF16>)
      x = BF16{static_cast<std::uint16_t>(rng())};
    else
      x = static_cast<T>(rng());
  }
  return v;
}

template <class T>
void expect_bit_exact_round_trip(const Shape& shape) {
  auto values = random_values<T>(static_cast<std::size_t>(shape_numel(shape)), 5);
  Array host = Array::from_vector(values, shape);
  Array there = host.copy_to(device());
  EXPECT_EQ(there.device(), device());
  Array back = there.copy_to(Device::cpu());
  auto got = back.to_vector<T>();
  ASSERT_EQ(got.size(), values.size());
  // memcmp, not ==: NaN payloads in random bf16 bits must survive as bits.
  EXPECT_EQ(std::memcmp(got.data(), values.data(), values.size() * sizeof(T)), 0);
  // Straight from the device, too.
  auto direct = there.to_vector<T>();
  EXPECT_EQ(std::memcmp(direct.data(), values.data(), values.size() * sizeof(T)), 0);
}

TEST(ArrayData, EveryDtypeRoundTripsBitExactly) {
  for (const Shape& shape : {Shape{}, Shape{0}, Shape{1}, Shape{257}, Shape{3, 5, 7}}) {
    expect_bit_exact_round_trip<float>(shape);
    expect_bit_exact_round_trip<BF16>(shape);
    expect_bit_exact_round_trip<std::uint8_t>(shape);
    expect_bit_exact_round_trip<std::int32_t>(shape);
    if (device().is_cpu()) expect_bit_exact_round_trip<double>(shape);
  }
  auto m = random_values<std::int16_t>(1000, 9);
  Array f = Array::from_flex16(m, -7, {10, 100}).copy_to(device());
  EXPECT_EQ(f.iwl(), -7);
  EXPECT_EQ(f.to_vector<std::int16_t>(), m);
  EXPECT_EQ(f.copy_to(Device::cpu()).iwl(), -7);
}

TEST(ArrayData, LargeTransferRoundTrips) {
  // Larger than any staging buffer a copy path might use.
  auto values = random_values<float>(std::size_t{1} << 22, 3);
  Array a = Array::from_vector(values, {1 << 22}, device());
  EXPECT_EQ(a.to_vector<float>(), values);
}

TEST(ArrayData, NonContiguousCopiesGatherTheView) {
  auto values = random_values<std::int32_t>(60, 4);
  Array a = Array::from_vector(values, {3, 4, 5}, device());
  Array v = a.index("::-1, 1::2, ::3").T();
  Array c = v.copy_to(Device::cpu());
  EXPECT_TRUE(c.is_contiguous());
  std::vector<std::int32_t> expected;
  for (int k = 0; k < 5; k += 3)
    for (int j = 1; j < 4; j += 2)
      for (int i = 2; i >= 0; --i) expected.push_back(values[(i * 4 + j) * 5 + k]);
  EXPECT_EQ(c.to_vector<std::int32_t>(), expected);
  EXPECT_EQ(v.clone().to_vector<std::int32_t>(), expected);
  EXPECT_FALSE(v.clone().shares_storage(a));
}

TEST(ArrayData, TransposedCopiesOfOddShapes) {
  // Shapes that leave partial tiles on both axes, every element size, and a transposed view
  // written into a strided destination.
  for (auto [rows, cols] : {std::pair{1000, 37}, std::pair{33, 65}, std::pair{1, 300}}) {
    auto values = random_values<std::int32_t>(static_cast<std::size_t>(rows) * cols, 8);
    Array a = Array::from_vector(values, {rows, cols}, device());
    Array t = a.T().clone();
    ASSERT_EQ(t.shape(), (Shape{cols, rows}));
    auto got = t.to_vector<std::int32_t>();
    for (int i = 0; i < cols; ++i)
      for (int j = 0; j < rows; ++j)
        ASSERT_EQ(got[static_cast<std::size_t>(i) * rows + j], values[j * cols + i])
            << i << "," << j;
    Array wide = Array::zeros({cols, 2 * rows}, DType::i32, device());
    wide.index(":, ::2").assign(a.T());
    auto w = wide.to_vector<std::int32_t>();
    for (int i = 0; i < cols; ++i)
      for (int j = 0; j < rows; ++j) {
        ASSERT_EQ(w[static_cast<std::size_t>(i) * 2 * rows + 2 * j], values[j * cols + i]);
        ASSERT_EQ(w[static_cast<std::size_t>(i) * 2 * rows + 2 * j + 1], 0);
      }
  }
  // One- and two-byte elements, against a transpose done on the host.
  std::vector<float> small(40 * 70);
  for (std::size_t i = 0; i < small.size(); ++i) small[i] = static_cast<float>(i % 251);
  for (DType dtype : {DType::u8, DType::bf16, DType::flex16}) {
    Array m = Array::from_floats(small, {40, 70}, dtype, device());
    EXPECT_EQ(m.T().clone().to_doubles(), m.copy_to(Device::cpu()).T().clone().to_doubles())
        << dtype_name(dtype);
  }
}

TEST(ArrayData, Factories) {
  EXPECT_EQ(Array::zeros({2, 3}, DType::i32, device()).to_doubles(), std::vector<double>(6, 0));
  EXPECT_EQ(Array::ones({4}, DType::bf16, device()).to_doubles(), std::vector<double>(4, 1));
  EXPECT_EQ(Array::full({2}, -2.5, DType::f32, device()).to_doubles(),
            (std::vector<double>{-2.5, -2.5}));
  EXPECT_EQ(Array::arange(2, 3.01, 0.25, DType::f32, device()).to_doubles(),
            (std::vector<double>{2, 2.25, 2.5, 2.75, 3}));
  EXPECT_EQ(Array::arange(5, 0, -2, DType::i32, device()).to_doubles(),
            (std::vector<double>{5, 3, 1}));
  EXPECT_EQ(Array::arange(0, -1, 1, DType::u8, device()).size(), 0);
  Array o = Array::ones({3}, DType::flex16, device());
  EXPECT_EQ(o.iwl(), 1);
  EXPECT_EQ(o.to_vector<std::int16_t>(), (std::vector<std::int16_t>{16384, 16384, 16384}));
  Array f = Array::full({2}, 0.4, DType::flex16, device());
  EXPECT_EQ(f.iwl(), -1);
  EXPECT_EQ(f.to_vector<std::int16_t>()[0], 26214);  // 0.4 * 2^16 = 26214.4
  Array r = Array::arange(0, 3, 0.5, DType::flex16, device());
  EXPECT_EQ(r.iwl(), 2);
  EXPECT_EQ(r.to_doubles(), (std::vector<double>{0, 0.5, 1, 1.5, 2, 2.5}));
  EXPECT_THROW(Array::arange(0, 1, 0, DType::f32, device()), ValueError);
  EXPECT_THROW(Array::full({1}, 256, DType::u8, device()), ValueError);
  EXPECT_THROW(Array::full({1}, 1.5, DType::i32, device()), ValueError);
  EXPECT_THROW(Array::full({1}, NAN, DType::flex16, device()), ValueError);
  EXPECT_THROW(Array::zeros({-1}, DType::f32, device()), ShapeError);
  EXPECT_THROW(Array::zeros({1, 1, 1, 1, 1, 1, 1, 1, 1}, DType::f32, device()), ShapeError);
}

TEST(ArrayData, FloatsConvertIntoEveryDtype) {
  std::vector<float> x = {0.5f, -0.25f, 1.0f};
  Array f = Array::from_floats(x, {3}, DType::flex16, device());
  EXPECT_EQ(f.iwl(), 1);
  EXPECT_EQ(f.to_vector<std::int16_t>(), (std::vector<std::int16_t>{8192, -4096, 16384}));
  EXPECT_EQ(Array::from_floats(x, {3}, DType::bf16, device()).to_floats(), x);
  std::vector<float> ints = {0, 3, 255};
  EXPECT_EQ(Array::from_floats(ints, {3}, DType::u8, device()).to_vector<std::uint8_t>(),
            (std::vector<std::uint8_t>{0, 3, 255}));
  std::vector<float> bad = {0.5f};
  EXPECT_THROW(Array::from_floats(bad, {1}, DType::u8, device()), ValueError);
  std::vector<float> nan = {1.0f, NAN};
  EXPECT_THROW(Array::from_floats(nan, {2}, DType::flex16, device()), ValueError);
  EXPECT_THROW(Array::from_floats(x, {4}, DType::f32, device()), ShapeError);
}

TEST(ArrayData, Flex16WritesRecordStatistics) {
  Array a = Array::zeros({4}, DType::flex16, device());
  a.set_iwl(1);
  std::vector<float> x = {0.4f, 2.0f, -3.0f, 0.25f};
  a.assign_floats(x);
  EXPECT_EQ(a.to_vector<std::int16_t>(), (std::vector<std::int16_t>{6554, 32767, -32768, 4096}));
  EXPECT_EQ(a.stats().saturated, 2u);
  EXPECT_EQ(a.stats().max_abs_m, 32768);
  a.fill(0.4);
  EXPECT_EQ(a.to_vector<std::int16_t>(), std::vector<std::int16_t>(4, 6554));
  EXPECT_EQ(a.stats().saturated, 0u);
  EXPECT_EQ(a.stats().max_abs_m, 6554);
  a.index("1:3").fill(5.0);
  EXPECT_EQ(a.stats().saturated, 2u);  // the write covered two elements, both saturated
}

TEST(ArrayData, Flex16AssignRescalesBetweenExponents) {
  std::vector<std::int16_t> m = {16384, -16384, 3, 32767, -32768};
  Array src = Array::from_flex16(m, 1, {5}, device());  // 1.0, -1.0, 3*2^-14, ~2, -2
  Array dst = Array::zeros({5}, DType::flex16, device());
  dst.set_iwl(0);  // range [-1, 1): 1.0 and beyond saturate, -1.0 fits
  dst.assign(src);
  EXPECT_EQ(dst.to_vector<std::int16_t>(),
            (std::vector<std::int16_t>{32767, -32768, 6, 32767, -32768}));
  EXPECT_EQ(dst.stats().saturated, 3u);
  Array wide = Array::zeros({5}, DType::flex16, device());
  wide.set_iwl(3);  // two bits coarser: m = 3 becomes 0.75, which rounds to 1
  wide.assign(src);
  EXPECT_EQ(wide.to_vector<std::int16_t>(),
            (std::vector<std::int16_t>{4096, -4096, 1, 8192, -8192}));
  EXPECT_EQ(wide.stats().saturated, 0u);
  EXPECT_EQ(wide.stats().max_abs_m, 8192);
}

TEST(ArrayData, HostIoErrorsNameTheProblem) {
  Array a = Array::zeros({2, 2}, DType::f32, device());
  try {
    a.to_vector<std::int32_t>();
    FAIL();
  } catch (const DTypeError& e) {
    EXPECT_NE(std::string(e.what()).find("f32"), std::string::npos) << e.what();
  }
  std::vector<float> three = {1, 2, 3};
  EXPECT_THROW(a.copy_from(std::span<const float>(three)), ShapeError);
  EXPECT_THROW(a.assign(Array::zeros({2, 2}, DType::i32, device())), DTypeError);
  EXPECT_THROW(a.assign(Array::zeros({3}, DType::f32, device())), ShapeError);
  EXPECT_THROW(a.iwl(), DTypeError);
  EXPECT_THROW(Array::zeros({1}, DType::flex16, device()).set_iwl(128), ValueError);
  EXPECT_THROW(Array::zeros({1}, DType::f64).copy_to(Device::cuda(0)), DTypeError);
  EXPECT_THROW(Array::zeros({1}, DType::f32, Device::cuda(63)), DeviceError);
  EXPECT_THROW(Device::parse("gpu"), DeviceError);
  EXPECT_THROW(parse_dtype("float16"), DTypeError);
}

TEST(ArrayData, HostMemoryExhaustionIsATypedErrorAtOnce) {
  // 2^50 f32 elements are 4 PiB, more than any machine's memory and swap: refused before any
  // page is touched, with the request named.
  const Shape shape{std::int64_t{1} << 50};
  const std::string expected =
      "cpu: cannot allocate 4.00 PiB (4503599627370496 bytes) of host memory for f32 "
      "(1125899906842624,); the machine has ";
  const auto start = std::chrono::steady_clock::now();
  for (int zeros = 0; zeros < 2; ++zeros) {
    try {
      if (zeros)
        Array::zeros(shape, DType::f32, Device::cpu());
      else
        Array::empty(shape, DType::f32, Device::cpu());
      FAIL() << "no error";
    } catch (const OutOfMemoryError& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.substr(0, expected.size()), expected) << message;
      EXPECT_NE(message.find(" of memory and "), std::string::npos) << message;
      EXPECT_TRUE(message.ends_with(" of swap")) << message;
    }
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

}  // namespace
}  // namespace flexkit
