// .npy reading and writing: round trips of every dtype, views saved in logical order, files
// written byte by byte (header versions, Fortran order, big-endian data), malformed files
// rejected with typed errors, and atomic replacement on save.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "flexkit/flexkit.hpp"
#include "support/test_device.hpp"

namespace flexkit {
namespace {

namespace fs = std::filesystem;

// The byte strings below are built by copying host values, which are the file's little-endian
// layout only on a little-endian host.
static_assert(std::endian::native == std::endian::little);

// A directory of its own for each test, removed afterwards, so tests neither see each other's
// files nor leave any behind.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    const auto* info = testing::UnitTest::GetInstance()->current_test_info();
    std::string name = "flexkit_test_npy_";
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

  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& name) const { return path_ / name; }

  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(path_)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  fs::path path_;
};

void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  ASSERT_TRUE(out) << "cannot write " << path;
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A .npy file as the format spec lays it out: magic, version, header length (u16 for 1.0,
// u32 for 2.0 and 3.0), then the dict padded with spaces and a final '\n' so that the data
// starts on a 64-byte boundary.
std::string npy_file(const std::string& dict, const std::string& data, int major = 1,
                     int minor = 0) {
  const std::size_t length_bytes = major == 1 ? 2 : 4;
  const std::size_t prefix = 6 + 2 + length_bytes;
  const std::size_t total = (prefix + dict.size() + 1 + 63) / 64 * 64;
  std::string header = dict;
  header.append(total - prefix - dict.size() - 1, ' ');
  header += '\n';
  std::string out("\x93NUMPY", 6);
  out += static_cast<char>(major);
  out += static_cast<char>(minor);
  for (std::size_t i = 0; i < length_bytes; ++i)
    out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + data;
}

std::string dict_of(const std::string& descr, const std::string& shape, bool fortran = false) {
  return "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") +
         ", 'shape': " + shape + ", }";
}

template <class T>
std::string le_bytes(const std::vector<T>& values) {
  std::string out(values.size() * sizeof(T), '\0');
  if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

template <class T>
std::string be_bytes(const std::vector<T>& values) {
  std::string out = le_bytes(values);
  for (std::size_t i = 0; i < values.size(); ++i)
    std::reverse(out.begin() + i * sizeof(T), out.begin() + (i + 1) * sizeof(T));
  return out;
}

// Exact comparison by bytes, so -0.0, NaN payloads and denormals must survive unchanged.
template <class T>
void expect_same_bits(const std::vector<T>& actual, const std::vector<T>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i) {
    if (std::memcmp(&actual[i], &expected[i], sizeof(T)) != 0) {
      ADD_FAILURE() << "element " << i << " differs";
      return;
    }
  }
}

// Loads go to the device the binary was started for, so that --device=cuda also covers the copy
// out of the file; f64 lives on the host only.
Device load_device(DType dtype) {
  return dtype == DType::f64 ? Device::cpu() : test::device();
}

// ---- random data --------------------------------------------------------------------------

std::mt19937_64& rng() {
  static std::mt19937_64 engine(20240611);
  return engine;
}

template <class T>
std::vector<T> random_ints(std::size_t n) {
  std::uniform_int_distribution<std::int64_t> dist(std::numeric_limits<T>::min(),
                                                   std::numeric_limits<T>::max());
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(dist(rng()));
  // The extremes are where sign handling and byte order mistakes show.
  if (n > 2) {
    v[0] = std::numeric_limits<T>::min();
    v[1] = std::numeric_limits<T>::max();
  }
  return v;
}

template <class F>
std::vector<F> random_floats(std::size_t n) {
  std::uniform_real_distribution<F> mantissa(-1, 1);
  std::uniform_int_distribution<int> exponent(-40, 40);
  std::vector<F> v(n);
  for (auto& x : v) x = std::ldexp(mantissa(rng()), exponent(rng()));
  const F specials[] = {F(-0.0),
                        std::numeric_limits<F>::infinity(),
                        -std::numeric_limits<F>::infinity(),
                        std::numeric_limits<F>::quiet_NaN(),
                        std::numeric_limits<F>::denorm_min(),
                        std::numeric_limits<F>::max(),
                        std::numeric_limits<F>::lowest()};
  for (std::size_t i = 0; i < std::size(specials) && 3 * i < n; ++i) v[3 * i] = specials[i];
  return v;
}

std::vector<BF16> random_bf16(std::size_t n) {
  std::vector<BF16> v;
  for (auto bits : random_ints<std::uint16_t>(n)) v.push_back(BF16{bits});
  return v;
}

const std::vector<Shape>& round_trip_shapes() {
  static const std::vector<Shape> shapes = {{},  {0, 3}, {3, 0},       {1},
                                            {7}, {5, 6}, {2, 3, 4, 5}, {1, 2, 1, 3, 1, 2, 1, 2}};
  return shapes;
}

// ---- round trips --------------------------------------------------------------------------

// Saves, checks the header the way NumPy's reader would, loads back and compares exactly.
template <class T>
void check_round_trip(const TempDir& dir, const std::vector<T>& values, const Shape& shape,
                      DType dtype, const std::string& descr) {
  SCOPED_TRACE(testing::Message() << "shape " << shape_str(shape));
  fs::path path = dir / "a";
  path += std::to_string(shape.size()) + ".npy";
  Array a = Array::from_vector<T>(values, shape);
  save_npy(path, a);

  const std::string bytes = read_file(path);
  ASSERT_GE(bytes.size(), 10u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const std::size_t header_len = static_cast<unsigned char>(bytes[8]) |
                                 static_cast<std::size_t>(static_cast<unsigned char>(bytes[9]))
                                     << 8;
  EXPECT_EQ((10 + header_len) % 64, 0u);
  const std::string header = bytes.substr(10, header_len);
  EXPECT_EQ(header.back(), '\n');
  EXPECT_NE(header.find("'descr': '" + descr + "'"), std::string::npos) << header;
  EXPECT_NE(header.find("'fortran_order': False"), std::string::npos) << header;
  EXPECT_NE(header.find("'shape': " + shape_str(shape)), std::string::npos) << header;
  EXPECT_EQ(bytes.size(), 10 + header_len + values.size() * sizeof(T));
  EXPECT_EQ(bytes.substr(10 + header_len), le_bytes(values));

  Array b = load_npy(path, load_device(dtype));
  EXPECT_EQ(b.dtype(), dtype);
  EXPECT_EQ(b.shape(), shape);
  EXPECT_TRUE(b.is_contiguous());
  EXPECT_EQ(b.device(), load_device(dtype));
  expect_same_bits(b.to_vector<T>(), values);
}

TEST(NpyRoundTrip, F32) {
  TempDir dir;
  for (const Shape& shape : round_trip_shapes()) {
    auto values = random_floats<float>(static_cast<std::size_t>(shape_numel(shape)));
    check_round_trip(dir, values, shape, DType::f32, "<f4");
  }
}

TEST(NpyRoundTrip, F64) {
  TempDir dir;
  for (const Shape& shape : round_trip_shapes()) {
    auto values = random_floats<double>(static_cast<std::size_t>(shape_numel(shape)));
    check_round_trip(dir, values, shape, DType::f64, "<f8");
  }
}

TEST(NpyRoundTrip, Bf16RawBits) {
  TempDir dir;
  for (const Shape& shape : round_trip_shapes()) {
    auto values = random_bf16(static_cast<std::size_t>(shape_numel(shape)));
    check_round_trip(dir, values, shape, DType::bf16, "<u2");
  }
}

TEST(NpyRoundTrip, Bf16WritesItsSidecar) {
  TempDir dir;
  save_npy(dir / "b.npy",
           Array::from_vector(std::vector<BF16>{BF16{0x3f80}, BF16{0xc0a0}}, Shape{2}));
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"b.npy", "b.npy.bf16"}));
  EXPECT_EQ(bf16_sidecar_path(dir / "b.npy"), dir / "b.npy.bf16");
  // Without it the same bytes are NumPy's uint16, which flexkit refuses.
  fs::remove(dir / "b.npy.bf16");
  EXPECT_THROW(load_npy(dir / "b.npy"), FormatError);
}

TEST(NpyRoundTrip, U8) {
  TempDir dir;
  for (const Shape& shape : round_trip_shapes()) {
    auto values = random_ints<std::uint8_t>(static_cast<std::size_t>(shape_numel(shape)));
    check_round_trip(dir, values, shape, DType::u8, "|u1");
  }
}

TEST(NpyRoundTrip, I32) {
  TempDir dir;
  for (const Shape& shape : round_trip_shapes()) {
    auto values = random_ints<std::int32_t>(static_cast<std::size_t>(shape_numel(shape)));
    check_round_trip(dir, values, shape, DType::i32, "<i4");
  }
}

TEST(NpyRoundTrip, Flex16KeepsMantissasAndIwlInSidecar) {
  TempDir dir;
  // The extremes of the exponent range as well as ordinary ones.
  const int iwls[] = {kFlex16MinIwl, -7, 0, 3, 15, kFlex16MaxIwl};
  int k = 0;
  for (const Shape& shape : round_trip_shapes()) {
    const int iwl = iwls[k++ % std::size(iwls)];
    SCOPED_TRACE(testing::Message() << "shape " << shape_str(shape) << " iwl " << iwl);
    auto m = random_ints<std::int16_t>(static_cast<std::size_t>(shape_numel(shape)));
    fs::path path = dir / "m";
    path += std::to_string(k) + ".npy";
    save_npy(path, Array::from_flex16(m, iwl, shape));

    const fs::path sidecar = flex16_sidecar_path(path);
    EXPECT_EQ(sidecar, fs::path(path.string() + ".iwl"));
    ASSERT_TRUE(fs::exists(sidecar));
    std::ifstream sidecar_in(sidecar);
    int sidecar_iwl = 0;
    ASSERT_TRUE(sidecar_in >> sidecar_iwl);
    EXPECT_EQ(sidecar_iwl, iwl);
    EXPECT_NE(read_file(path).find("'descr': '<i2'"), std::string::npos);

    Array b = load_npy(path, load_device(DType::flex16));
    EXPECT_EQ(b.dtype(), DType::flex16);
    EXPECT_EQ(b.shape(), shape);
    EXPECT_EQ(b.iwl(), iwl);
    EXPECT_EQ(b.to_vector<std::int16_t>(), m);
  }
}

TEST(NpyRoundTrip, DefaultConstructedArrayIsRejected) {
  TempDir dir;
  EXPECT_THROW(save_npy(dir / "x.npy", Array()), ValueError);
  EXPECT_TRUE(dir.entries().empty());
}

// ---- views are saved in logical row-major order -------------------------------------------

TEST(NpySaveView, ReversedAndStridedSlice) {
  TempDir dir;
  Array a = Array::arange(20, DType::f32).reshape({4, 5});
  Array v = a.index("::2, ::-1");
  ASSERT_FALSE(v.is_contiguous());
  std::vector<float> expected;
  for (int r = 0; r < 4; r += 2)
    for (int c = 4; c >= 0; --c) expected.push_back(static_cast<float>(5 * r + c));
  save_npy(dir / "v.npy", v);
  Array b = load_npy(dir / "v.npy");
  EXPECT_EQ(b.shape(), (Shape{2, 5}));
  EXPECT_EQ(b.to_vector<float>(), expected);
  // The source is untouched by the save.
  EXPECT_EQ(a.to_vector<float>()[7], 7.0f);
}

TEST(NpySaveView, Transpose) {
  TempDir dir;
  auto values = random_ints<std::int32_t>(3 * 4 * 2);
  Array a = Array::from_vector<std::int32_t>(values, {3, 4, 2});
  std::vector<std::int32_t> expected;
  for (int k = 0; k < 2; ++k)
    for (int j = 0; j < 4; ++j)
      for (int i = 0; i < 3; ++i) expected.push_back(values[(i * 4 + j) * 2 + k]);
  save_npy(dir / "t.npy", a.T());
  Array b = load_npy(dir / "t.npy");
  EXPECT_EQ(b.shape(), (Shape{2, 4, 3}));
  EXPECT_EQ(b.to_vector<std::int32_t>(), expected);

  // transpose(1, 0, 2): element [j, i, k] is a[i, j, k].
  expected.clear();
  for (int j = 0; j < 4; ++j)
    for (int i = 0; i < 3; ++i)
      for (int k = 0; k < 2; ++k) expected.push_back(values[(i * 4 + j) * 2 + k]);
  save_npy(dir / "p.npy", a.transpose({1, 0, 2}));
  Array c = load_npy(dir / "p.npy");
  EXPECT_EQ(c.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(c.to_vector<std::int32_t>(), expected);
}

TEST(NpySaveView, ContiguousBlockWithOffset) {
  TempDir dir;
  Array a = Array::arange(20, DType::f64).reshape({4, 5});
  Array v = a.index("1:3");
  ASSERT_TRUE(v.is_contiguous());
  ASSERT_EQ(v.offset(), 5);
  save_npy(dir / "v.npy", v);
  std::vector<double> expected;
  for (int i = 5; i < 15; ++i) expected.push_back(i);
  Array b = load_npy(dir / "v.npy");
  EXPECT_EQ(b.shape(), (Shape{2, 5}));
  EXPECT_EQ(b.to_vector<double>(), expected);
}

TEST(NpySaveView, NewAxisIntegerAndEllipsis) {
  TempDir dir;
  Array a = Array::arange(24, DType::i32).reshape({2, 3, 4});
  // a[None, 1, ..., ::-3] has shape (1, 3, 2): a[1, j, 3], a[1, j, 0].
  Array v = a.index("None, 1, ..., ::-3");
  save_npy(dir / "v.npy", v);
  std::vector<std::int32_t> expected;
  for (int j = 0; j < 3; ++j)
    for (int k : {3, 0}) expected.push_back(12 + 4 * j + k);
  Array b = load_npy(dir / "v.npy");
  EXPECT_EQ(b.shape(), (Shape{1, 3, 2}));
  EXPECT_EQ(b.to_vector<std::int32_t>(), expected);
}

TEST(NpySaveView, BroadcastRepeatsElements) {
  TempDir dir;
  Array a = Array::from_vector<std::uint8_t>({7, 8, 9}, {3}).broadcast_to({2, 3});
  save_npy(dir / "v.npy", a);
  Array b = load_npy(dir / "v.npy");
  EXPECT_EQ(b.shape(), (Shape{2, 3}));
  EXPECT_EQ(b.to_vector<std::uint8_t>(), (std::vector<std::uint8_t>{7, 8, 9, 7, 8, 9}));
}

TEST(NpySaveView, EmptySliceAndScalarElement) {
  TempDir dir;
  Array a = Array::arange(20, DType::f32).reshape({4, 5});
  save_npy(dir / "e.npy", a.index("2:2"));
  Array e = load_npy(dir / "e.npy");
  EXPECT_EQ(e.shape(), (Shape{0, 5}));
  EXPECT_EQ(e.size(), 0);

  save_npy(dir / "s.npy", a.index("-1, -2"));
  Array s = load_npy(dir / "s.npy");
  EXPECT_EQ(s.shape(), Shape{});
  EXPECT_EQ(s.to_vector<float>(), std::vector<float>{18.0f});
}

TEST(NpySaveView, Flex16ViewKeepsIwl) {
  TempDir dir;
  auto m = random_ints<std::int16_t>(12);
  Array a = Array::from_flex16(m, -4, {3, 4});
  save_npy(dir / "v.npy", a.index(":, ::-2").T());
  // Shape (2, 3): element [c, r] is a[r, 3 - 2c].
  std::vector<std::int16_t> expected;
  for (int c = 0; c < 2; ++c)
    for (int r = 0; r < 3; ++r) expected.push_back(m[r * 4 + 3 - 2 * c]);
  Array b = load_npy(dir / "v.npy");
  EXPECT_EQ(b.shape(), (Shape{2, 3}));
  EXPECT_EQ(b.iwl(), -4);
  EXPECT_EQ(b.to_vector<std::int16_t>(), expected);
}

// ---- files written byte by byte -----------------------------------------------------------

TEST(NpyReadBytes, Version1LittleEndianF32) {
  TempDir dir;
  const std::vector<float> values = {1.5f, -2.25f, 3e10f, -0.0f, 1e-42f, 65504.0f};
  write_file(dir / "a.npy", npy_file(dict_of("<f4", "(2, 3)"), le_bytes(values), 1, 0));
  Array a = load_npy(dir / "a.npy", load_device(DType::f32));
  EXPECT_EQ(a.dtype(), DType::f32);
  EXPECT_EQ(a.shape(), (Shape{2, 3}));
  expect_same_bits(a.to_vector<float>(), values);
}

TEST(NpyReadBytes, Version2And3Headers) {
  TempDir dir;
  const std::vector<double> values = {0.1, -1e300, 4.0};
  write_file(dir / "v2.npy", npy_file(dict_of("<f8", "(3,)"), le_bytes(values), 2, 0));
  Array a = load_npy(dir / "v2.npy");
  EXPECT_EQ(a.dtype(), DType::f64);
  EXPECT_EQ(a.shape(), Shape{3});
  EXPECT_EQ(a.to_vector<double>(), values);

  const std::vector<std::int32_t> ints = {-5, 6, 2147483647, -2147483647 - 1};
  write_file(dir / "v3.npy", npy_file(dict_of("<i4", "(2, 2)"), le_bytes(ints), 3, 0));
  Array b = load_npy(dir / "v3.npy", load_device(DType::i32));
  EXPECT_EQ(b.dtype(), DType::i32);
  EXPECT_EQ(b.shape(), (Shape{2, 2}));
  EXPECT_EQ(b.to_vector<std::int32_t>(), ints);
}

TEST(NpyReadBytes, KeysInAnyOrderAndOtherSpellings) {
  TempDir dir;
  const std::vector<std::uint8_t> values = {1, 2, 3};
  // Keys in a different order, double quotes, no trailing comma, no spaces: all valid Python.
  write_file(dir / "a.npy", npy_file("{\"shape\":(3,),\"fortran_order\":False,\"descr\":\"|u1\"}",
                                     le_bytes(values)));
  Array a = load_npy(dir / "a.npy");
  EXPECT_EQ(a.dtype(), DType::u8);
  EXPECT_EQ(a.shape(), Shape{3});
  EXPECT_EQ(a.to_vector<std::uint8_t>(), values);

  // A 0-d array: shape ().
  write_file(dir / "s.npy", npy_file(dict_of("<i4", "()"), le_bytes(std::vector<int>{-42})));
  Array s = load_npy(dir / "s.npy");
  EXPECT_EQ(s.shape(), Shape{});
  EXPECT_EQ(s.to_vector<std::int32_t>(), std::vector<std::int32_t>{-42});
}

TEST(NpyReadBytes, DataAfterUnpaddedHeader) {
  // The spec asks writers to pad; a reader must still go by the stated header length.
  TempDir dir;
  const std::string dict = dict_of("<i4", "(2,)") + "\n";
  std::string file("\x93NUMPY\x01\x00", 8);
  file += static_cast<char>(dict.size());
  file += '\0';
  file += dict + le_bytes(std::vector<std::int32_t>{11, -12});
  write_file(dir / "a.npy", file);
  EXPECT_EQ(load_npy(dir / "a.npy").to_vector<std::int32_t>(),
            (std::vector<std::int32_t>{11, -12}));
}

TEST(NpyReadBytes, FortranOrderIsReadIntoCOrder) {
  TempDir dir;
  // Logical a[i, j] = 10 i + j for shape (2, 3); Fortran order stores column by column.
  std::vector<float> column_major;
  for (int j = 0; j < 3; ++j)
    for (int i = 0; i < 2; ++i) column_major.push_back(static_cast<float>(10 * i + j));
  write_file(dir / "f.npy", npy_file(dict_of("<f4", "(2, 3)", true), le_bytes(column_major)));
  Array a = load_npy(dir / "f.npy", load_device(DType::f32));
  EXPECT_EQ(a.shape(), (Shape{2, 3}));
  EXPECT_TRUE(a.is_contiguous());
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{0, 1, 2, 10, 11, 12}));

  // Rank 3: element (i, j, k) is at i + 2 j + 6 k in the file.
  std::vector<std::int32_t> stored(24), expected;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) {
        stored[i + 2 * j + 6 * k] = 100 * i + 10 * j + k;
        expected.push_back(100 * i + 10 * j + k);
      }
  write_file(dir / "g.npy", npy_file(dict_of("<i4", "(2, 3, 4)", true), le_bytes(stored)));
  Array b = load_npy(dir / "g.npy");
  EXPECT_EQ(b.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(b.to_vector<std::int32_t>(), expected);

  // Fortran-ordered flex16 keeps its sidecar exponent.
  std::vector<std::int16_t> m_stored = {1, -2, 3, -4, 5, -6}, m_expected = {1, 3, 5, -2, -4, -6};
  write_file(dir / "h.npy", npy_file(dict_of("<i2", "(2, 3)", true), le_bytes(m_stored)));
  write_file(dir / "h.npy.iwl", "-3\n");
  Array c = load_npy(dir / "h.npy");
  EXPECT_EQ(c.iwl(), -3);
  EXPECT_EQ(c.to_vector<std::int16_t>(), m_expected);
}

TEST(NpyReadBytes, BigEndianIsByteSwapped) {
  TempDir dir;
  const std::vector<float> f = {1.0f, -2.5f, 1e-30f, 3.4e38f, -0.0f, 7.0f};
  write_file(dir / "f.npy", npy_file(dict_of(">f4", "(2, 3)"), be_bytes(f)));
  Array a = load_npy(dir / "f.npy", load_device(DType::f32));
  EXPECT_EQ(a.dtype(), DType::f32);
  EXPECT_EQ(a.shape(), (Shape{2, 3}));
  expect_same_bits(a.to_vector<float>(), f);

  const std::vector<std::int32_t> i = {1, -1, 0x01020304, -2147483647 - 1};
  write_file(dir / "i.npy", npy_file(dict_of(">i4", "(4,)"), be_bytes(i)));
  Array b = load_npy(dir / "i.npy");
  EXPECT_EQ(b.dtype(), DType::i32);
  EXPECT_EQ(b.to_vector<std::int32_t>(), i);

  const std::vector<double> d = {1e-300, -3.25};
  write_file(dir / "d.npy", npy_file(dict_of(">f8", "(2,)"), be_bytes(d)));
  EXPECT_EQ(load_npy(dir / "d.npy").to_vector<double>(), d);

  const std::vector<std::uint16_t> bits = {0x3f80, 0xc0a0};
  write_file(dir / "b.npy", npy_file(dict_of(">u2", "(2,)"), be_bytes(bits)));
  write_file(dir / "b.npy.bf16", "bf16\n");
  Array c = load_npy(dir / "b.npy");
  EXPECT_EQ(c.dtype(), DType::bf16);
  EXPECT_EQ(c.to_vector<BF16>(), (std::vector<BF16>{BF16{0x3f80}, BF16{0xc0a0}}));

  // Big-endian and Fortran order together.
  std::vector<float> column_major;
  for (int j = 0; j < 3; ++j)
    for (int r = 0; r < 2; ++r) column_major.push_back(static_cast<float>(10 * r + j));
  write_file(dir / "g.npy", npy_file(dict_of(">f4", "(2, 3)", true), be_bytes(column_major)));
  EXPECT_EQ(load_npy(dir / "g.npy").to_vector<float>(), (std::vector<float>{0, 1, 2, 10, 11, 12}));
}

// ---- malformed files ----------------------------------------------------------------------

// Runs load_npy on `bytes` and returns the FormatError's message (empty if none was thrown;
// any other exception fails the test).
std::string format_error_of(const TempDir& dir, const std::string& bytes) {
  const fs::path path = dir / "bad.npy";
  write_file(path, bytes);
  try {
    load_npy(path);
  } catch (const FormatError& e) {
    // Callers that only know the standard hierarchy must see it as a bad argument.
    const std::invalid_argument* as_std = &e;
    EXPECT_NE(as_std, nullptr);
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected FormatError, got another exception: " << e.what();
    return "<other exception>";
  }
  ADD_FAILURE() << "expected FormatError, nothing was thrown";
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(NpyBadInput, WrongMagic) {
  TempDir dir;
  const std::string data = le_bytes(std::vector<float>{1, 2});
  std::string file = npy_file(dict_of("<f4", "(2,)"), data);
  file[5] = 'Z';
  EXPECT_NE(format_error_of(dir, file), "");
  EXPECT_NE(format_error_of(dir, "just some text, definitely not an array file\n"), "");
  EXPECT_NE(format_error_of(dir, std::string("\x93NUM", 4)), "");
  EXPECT_NE(format_error_of(dir, ""), "");
}

TEST(NpyBadInput, TruncatedData) {
  TempDir dir;
  std::string file = npy_file(dict_of("<f4", "(10,)"), le_bytes(std::vector<float>(9, 1.0f)));
  EXPECT_TRUE(contains(format_error_of(dir, file), "truncated"));
  // A header that promises data but none follows.
  EXPECT_TRUE(contains(format_error_of(dir, npy_file(dict_of("<i4", "(2, 2)"), "")), "truncated"));
}

TEST(NpyBadInput, TruncatedHeader) {
  TempDir dir;
  const std::string full = npy_file(dict_of("<f4", "(2,)"), le_bytes(std::vector<float>{1, 2}));
  EXPECT_NE(format_error_of(dir, full.substr(0, 40)), "");  // inside the dict
  EXPECT_NE(format_error_of(dir, full.substr(0, 9)), "");   // inside the length field
  const std::string v2 = npy_file(dict_of("<f4", "(2,)"), "", 2, 0);
  EXPECT_NE(format_error_of(dir, v2.substr(0, 11)), "");  // inside the u32 length
  EXPECT_NE(format_error_of(dir, v2.substr(0, 30)), "");
}

TEST(NpyBadInput, UnsupportedDtypeIsNamed) {
  TempDir dir;
  for (std::string descr : {"<c8", "<f2", "<i8", "|b1", "<U3"}) {
    std::string message =
        format_error_of(dir, npy_file(dict_of(descr, "(2,)"), std::string(64, '\0')));
    EXPECT_TRUE(contains(message, descr)) << descr << ": " << message;
  }
}

TEST(NpyBadInput, StructuredDtype) {
  TempDir dir;
  EXPECT_NE(format_error_of(dir, npy_file("{'descr': [('a', '<f4'), ('b', '<i4')], "
                                          "'fortran_order': False, 'shape': (2,), }",
                                          std::string(16, '\0'))),
            "");
}

TEST(NpyBadInput, UnsupportedVersion) {
  TempDir dir;
  const std::string data = le_bytes(std::vector<float>{1, 2});
  EXPECT_NE(format_error_of(dir, npy_file(dict_of("<f4", "(2,)"), data, 4, 0)), "");
  EXPECT_NE(format_error_of(dir, npy_file(dict_of("<f4", "(2,)"), data, 0, 0)), "");
}

TEST(NpyBadInput, MalformedHeaderDict) {
  TempDir dir;
  const std::string data(16, '\0');
  // A key missing, an unknown key, a bad boolean, a non-dict, a negative extent.
  EXPECT_NE(format_error_of(dir, npy_file("{'descr': '<f4', 'shape': (2,), }", data)), "");
  EXPECT_NE(format_error_of(dir, npy_file("{'descr': '<f4', 'fortran_order': False, "
                                          "'shape': (2,), 'extra': 1, }",
                                          data)),
            "");
  EXPECT_NE(format_error_of(dir, npy_file("{'descr': '<f4', 'fortran_order': Maybe, "
                                          "'shape': (2,), }",
                                          data)),
            "");
  EXPECT_NE(format_error_of(dir, npy_file("['<f4', False, (2,)]", data)), "");
  EXPECT_NE(format_error_of(dir, npy_file(dict_of("<f4", "(-2,)"), data)), "");
}

TEST(NpyBadInput, Int16WithoutSidecar) {
  TempDir dir;
  const std::string message =
      format_error_of(dir, npy_file(dict_of("<i2", "(3,)"), le_bytes(std::vector<short>{1, 2, 3})));
  EXPECT_TRUE(contains(message, "sidecar")) << message;
}

TEST(NpyBadInput, SidecarWithGarbage) {
  TempDir dir;
  const std::string file = npy_file(dict_of("<i2", "(2,)"), le_bytes(std::vector<short>{1, 2}));
  for (std::string sidecar : {"abc\n", "", "3 4\n", "3.5\n", "iwl=3\n"}) {
    write_file(dir / "bad.npy.iwl", sidecar);
    EXPECT_NE(format_error_of(dir, file), "") << "sidecar '" << sidecar << "'";
  }
}

TEST(NpyBadInput, SidecarIwlOutOfRange) {
  // The file's contents are at fault, so this is a FormatError like any other bad sidecar.
  TempDir dir;
  const std::string file = npy_file(dict_of("<i2", "(2,)"), le_bytes(std::vector<short>{1, 2}));
  for (int iwl : {kFlex16MaxIwl + 1, kFlex16MinIwl - 1}) {
    write_file(dir / "bad.npy.iwl", std::to_string(iwl) + "\n");
    EXPECT_NE(format_error_of(dir, file), "") << "iwl " << iwl;
  }
}

TEST(NpyBadInput, NonexistentFile) {
  TempDir dir;
  EXPECT_THROW(load_npy(dir / "missing.npy"), IoError);
  try {
    load_npy(dir / "missing.npy");
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(contains(e.what(), "missing.npy")) << e.what();
  }
}

TEST(NpyBadInput, RankNineShape) {
  TempDir dir;
  write_file(dir / "r9.npy", npy_file(dict_of("<f4", "(1, 1, 1, 1, 1, 1, 1, 1, 1)"),
                                      le_bytes(std::vector<float>{1})));
  EXPECT_THROW(load_npy(dir / "r9.npy"), ShapeError);
  EXPECT_THROW(load_npy(dir / "r9.npy"), std::invalid_argument);
}

TEST(NpyBadInput, ErrorsAreStandardExceptions) {
  TempDir dir;
  write_file(dir / "magic.npy", "not an npy file at all");
  EXPECT_THROW(load_npy(dir / "magic.npy"), std::invalid_argument);
  EXPECT_THROW(load_npy(dir / "nothing-here.npy"), std::runtime_error);
  write_file(dir / "short.npy", npy_file(dict_of("<f4", "(4,)"), "abc"));
  EXPECT_THROW(load_npy(dir / "short.npy"), std::invalid_argument);
  write_file(dir / "nosidecar.npy", npy_file(dict_of("<i2", "(1,)"), "ab"));
  EXPECT_THROW(load_npy(dir / "nosidecar.npy"), std::invalid_argument);
}

TEST(NpyBadInput, ExtentsWhoseProductOverflows) {
  // (2^62 + 1) * 4 elements wrap to 4 in 64 bits; a file holding 16 bytes of data must not load
  // as an array claiming 2^64 + 4 elements whose rows lie beyond its storage.
  TempDir dir;
  write_file(dir / "wrap.npy",
             npy_file(dict_of("<f4", "(4611686018427387905, 4)"), std::string(16, '\0')));
  EXPECT_THROW(load_npy(dir / "wrap.npy"), std::invalid_argument);
  write_file(dir / "zero.npy", npy_file(dict_of("<f8", "(4611686018427387904, 8)"), ""));
  EXPECT_THROW(load_npy(dir / "zero.npy"), std::invalid_argument);
}

TEST(NpyBadInput, ExtentBeyondInt64) {
  TempDir dir;
  write_file(dir / "long.npy",
             npy_file(dict_of("<f4", "(99999999999999999999999,)"), std::string(64, '\0')));
  EXPECT_THROW(load_npy(dir / "long.npy"), FormatError);
}

TEST(NpyBadInput, UnreadablePathIsIoError) {
  // A directory opens but cannot be read: a read failure, not a format problem.
  TempDir dir;
  fs::create_directories(dir / "d.npy");
  EXPECT_THROW(load_npy(dir / "d.npy"), IoError);
}

// ---- atomic save --------------------------------------------------------------------------

TEST(NpyAtomicSave, MissingDirectoryThrowsAndLeavesNothing) {
  TempDir dir;
  Array a = Array::arange(6, DType::f32);
  EXPECT_THROW(save_npy(dir / "no" / "such" / "dir" / "a.npy", a), IoError);
  EXPECT_THROW(
      save_npy(dir / "no" / "a.npy", Array::from_flex16(std::vector<std::int16_t>{1}, 2, {1})),
      IoError);
  EXPECT_TRUE(dir.entries().empty());
  try {
    save_npy(dir / "no" / "a.npy", a);
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(contains(e.what(), "a.npy")) << e.what();
  }
}

TEST(NpyAtomicSave, SecondSaveReplacesTheFileCompletely) {
  TempDir dir;
  const fs::path path = dir / "a.npy";
  save_npy(path, Array::arange(1000, DType::f64));
  const auto first_size = fs::file_size(path);
  save_npy(path, Array::from_vector<std::uint8_t>({5, 6, 7}, {3}));
  // Nothing of the longer first file may linger past the new data.
  EXPECT_LT(fs::file_size(path), first_size);
  const std::string bytes = read_file(path);
  ASSERT_GE(bytes.size(), 10u);
  const std::size_t header_len = static_cast<unsigned char>(bytes[8]) |
                                 static_cast<std::size_t>(static_cast<unsigned char>(bytes[9]))
                                     << 8;
  EXPECT_EQ(bytes.size(), 10 + header_len + 3);
  Array b = load_npy(path);
  EXPECT_EQ(b.dtype(), DType::u8);
  EXPECT_EQ(b.to_vector<std::uint8_t>(), (std::vector<std::uint8_t>{5, 6, 7}));

  // A flex16 save over it brings a sidecar; a second flex16 save updates the sidecar.
  save_npy(path, Array::from_flex16(std::vector<std::int16_t>{9, -9}, 5, {2}));
  save_npy(path, Array::from_flex16(std::vector<std::int16_t>{4}, -6, {1}));
  Array c = load_npy(path);
  EXPECT_EQ(c.iwl(), -6);
  EXPECT_EQ(c.to_vector<std::int16_t>(), std::vector<std::int16_t>{4});
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"a.npy", "a.npy.iwl"}));
}

TEST(NpyAtomicSave, NoTemporaryFilesRemain) {
  TempDir dir;
  for (int i = 0; i < 3; ++i) {
    save_npy(dir / "x.npy", Array::arange(10 * (i + 1), DType::i32));
    save_npy(dir / "y.npy", Array::zeros({2, 2}, DType::flex16));
  }
  for (const std::string& name : dir.entries()) EXPECT_FALSE(contains(name, ".tmp")) << name;
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"x.npy", "y.npy", "y.npy.iwl"}));
  EXPECT_EQ(load_npy(dir / "x.npy").size(), 30);
}

TEST(NpyAtomicSave, FailedRenameLeavesNoTemporary) {
  // The target is a non-empty directory: the temporary can be written but not renamed over it.
  TempDir dir;
  fs::create_directories(dir / "target.npy");
  write_file(dir / "target.npy" / "keep", "x");
  EXPECT_THROW(save_npy(dir / "target.npy", Array::arange(4, DType::f32)), IoError);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"target.npy"});
  EXPECT_EQ(read_file(dir / "target.npy" / "keep"), "x");
}

// ---- messages for inputs flexkit cannot take --------------------------------------------

TEST(NpyBadInput, Uint16IsRefusedNotReadAsBf16Bits) {
  // NumPy's uint16 and flexkit's bf16 bits share the descr '<u2'; a file without the bf16
  // sidecar is NumPy's, and its ones must not turn into 9.1e-41.
  TempDir dir;
  const std::vector<std::uint16_t> ones = {1, 1, 1};
  for (std::string descr : {"<u2", ">u2"}) {
    EXPECT_EQ(format_error_of(dir, npy_file(dict_of(descr, "(3,)"), le_bytes(ones))),
              "load_npy: " + (dir / "bad.npy").string() + " holds uint16 values ('" + descr +
                  "'); flexkit has no uint16 dtype (convert to int32 or float32 in NumPy); a bf16 "
                  "array saved by flexkit has a .bf16 sidecar next to it");
  }
  // With the sidecar the elements are bf16 bits.
  write_file(dir / "x.npy", npy_file(dict_of("<u2", "(3,)"), le_bytes(ones)));
  write_file(dir / "x.npy.bf16", "bf16\n");
  Array a = load_npy(dir / "x.npy");
  EXPECT_EQ(a.dtype(), DType::bf16);
  EXPECT_EQ(a.to_vector<BF16>(), (std::vector<BF16>{BF16{1}, BF16{1}, BF16{1}}));
}

TEST(NpyBadInput, NegativeDimensionIsAShortMessage) {
  TempDir dir;
  const std::string message =
      format_error_of(dir, npy_file(dict_of("<f4", "(-3,)"), std::string(64, '\0')));
  EXPECT_EQ(message, "load_npy: " + (dir / "bad.npy").string() +
                         ": bad header (dimension 0 is negative: -3)");
  EXPECT_EQ(
      format_error_of(dir, npy_file(dict_of("<f4", "(2, -1)"), std::string(64, '\0'))),
      "load_npy: " + (dir / "bad.npy").string() + ": bad header (dimension 1 is negative: -1)");
  EXPECT_EQ(format_error_of(dir, npy_file(dict_of("<f4", "(99999999999999999999999,)"), "")),
            "load_npy: " + (dir / "bad.npy").string() +
                ": bad header (dimension 0 does not fit in 64 bits: 99999999999999999999999)");
}

TEST(NpyBadInput, SyntaxErrorsQuoteTheDictWithoutItsPadding) {
  TempDir dir;
  const std::string dict = "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,), }";
  EXPECT_EQ(format_error_of(dir, npy_file(dict, std::string(8, '\0'))),
            "load_npy: " + (dir / "bad.npy").string() +
                ": bad header ('fortran_order' is neither True nor False): " + dict);
}

TEST(NpyBadInput, CannotOpenGivesTheReason) {
  TempDir dir;
  try {
    load_npy(dir / "missing.npy");
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_EQ(std::string(e.what()), "load_npy: cannot open " + (dir / "missing.npy").string() +
                                         ": No such file or directory");
  }
  try {
    save_npy(dir / "no" / "a.npy", Array::arange(2, DType::f32));
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_TRUE(contains(e.what(), "for writing: No such file or directory")) << e.what();
  }
}

}  // namespace
}  // namespace flexkit
