// Views against a NumPy-semantics oracle written here: the oracle tracks, for every element of
// a view, the flat index of the base element it shows — no strides involved — so it checks the
// library's stride arithmetic independently. Runs on the device given by --device.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "flexkit/flexkit.hpp"
#include "support/test_device.hpp"

namespace flexkit {
namespace {

using test::device;

// Python's slice membership, written as a filter over 0..n-1 rather than as stride arithmetic.
std::vector<std::int64_t> slice_members(std::int64_t n, const Slice& s) {
  std::vector<std::int64_t> out;
  if (s.step > 0) {
    std::int64_t lo = s.start ? (*s.start < 0 ? *s.start + n : *s.start) : 0;
    std::int64_t hi = s.stop ? (*s.stop < 0 ? *s.stop + n : *s.stop) : n;
    lo = std::max<std::int64_t>(lo, 0);
    for (std::int64_t i = 0; i < n; ++i)
      if (i >= lo && i < hi && (i - lo) % s.step == 0) out.push_back(i);
  } else {
    std::int64_t hi = s.start ? (*s.start < 0 ? *s.start + n : *s.start) : n - 1;
    std::int64_t lo = s.stop ? (*s.stop < 0 ? *s.stop + n : *s.stop) : -1;
    hi = std::min<std::int64_t>(hi, n - 1);
    lo = std::max<std::int64_t>(lo, -1);
    for (std::int64_t i = n - 1; i >= 0; --i)
      if (i <= hi && i > lo && (hi - i) % (-s.step) == 0) out.push_back(i);
  }
  return out;
}

// A view as the oracle sees it: its shape and, in row-major order, which base element each
// position shows.
struct RefView {
  Shape shape;
  std::vector<std::int64_t> flat;
};

RefView ref_base(const Shape& shape) {
  RefView v{shape, std::vector<std::int64_t>(static_cast<std::size_t>(shape_numel(shape)))};
  std::iota(v.flat.begin(), v.flat.end(), 0);
  return v;
}

// Cartesian product of per-axis selections over `v` (selections index v's own axes).
RefView ref_select(const RefView& v, const std::vector<std::vector<std::int64_t>>& picks,
                   const Shape& out_shape) {
  RefView out{out_shape, {}};
  std::vector<std::size_t> counter(picks.size(), 0);
  for (const auto& p : picks)
    if (p.empty()) return out;
  for (;;) {
    std::int64_t linear = 0;
    for (std::size_t d = 0; d < picks.size(); ++d)
      linear = linear * v.shape[d] + picks[d][counter[d]];
    out.flat.push_back(v.flat[static_cast<std::size_t>(linear)]);
    std::size_t d = picks.size();
    while (d > 0) {
      --d;
      if (++counter[d] < picks[d].size()) break;
      counter[d] = 0;
      if (d == 0) return out;
    }
    if (picks.empty()) return out;
  }
}

RefView ref_index(const RefView& v, const std::vector<Index>& entries) {
  int consumed = 0;
  for (const Index& e : entries)
    if (!std::holds_alternative<EllipsisIndex>(e.entry()) &&
        !std::holds_alternative<NewAxisIndex>(e.entry()))
      ++consumed;
  std::vector<std::vector<std::int64_t>> picks;
  Shape out_shape;
  std::size_t axis = 0;
  auto whole = [&](std::size_t a) {
    std::vector<std::int64_t> all_i(static_cast<std::size_t>(v.shape[a]));
    std::iota(all_i.begin(), all_i.end(), 0);
    picks.push_back(all_i);
    out_shape.push_back(v.shape[a]);
  };
  // New axes add no selection over v; they only add a size-1 extent to the output shape.
  for (const Index& e : entries) {
    const auto& entry = e.entry();
    if (std::holds_alternative<EllipsisIndex>(entry)) {
      for (int k = 0; k < static_cast<int>(v.shape.size()) - consumed; ++k) whole(axis++);
    } else if (std::holds_alternative<NewAxisIndex>(entry)) {
      out_shape.push_back(1);
    } else if (const auto* i = std::get_if<std::int64_t>(&entry)) {
      picks.push_back({*i < 0 ? *i + v.shape[axis] : *i});
      ++axis;
    } else {
      auto m = slice_members(v.shape[axis], std::get<Slice>(entry));
      out_shape.push_back(static_cast<std::int64_t>(m.size()));
      picks.push_back(m);
      ++axis;
    }
  }
  while (axis < v.shape.size()) whole(axis++);
  Shape select_shape;
  for (auto& p : picks) select_shape.push_back(static_cast<std::int64_t>(p.size()));
  RefView out = ref_select(v, picks, out_shape);
  out.shape = out_shape;
  return out;
}

Array arange_on_device(const Shape& shape, DType dtype = DType::f32) {
  return Array::arange(shape_numel(shape), dtype, device()).reshape(shape);
}

void expect_view_matches(const Array& view, const RefView& ref) {
  ASSERT_EQ(view.shape(), ref.shape);
  std::vector<double> got = view.to_doubles();
  ASSERT_EQ(got.size(), ref.flat.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(got[i], static_cast<double>(ref.flat[i])) << "element " << i;
}

TEST(Views, StepSliceKeepsCeilLength) {
  Array a = arange_on_device({4, 6});
  Array v = a(all, slice(0, 5, 2));
  EXPECT_EQ(v.shape(), (Shape{4, 3}));
  EXPECT_EQ(v.to_doubles(), (std::vector<double>{0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22}));
  EXPECT_TRUE(v.shares_storage(a));
  EXPECT_EQ(a.index(":, 0:5:2").shape(), (Shape{4, 3}));
  EXPECT_EQ(a.index("1:, 1:4:2").to_doubles(), (std::vector<double>{7, 9, 13, 15, 19, 21}));
}

TEST(Views, NegativeIndicesAndSteps) {
  Array a = arange_on_device({4, 6});
  EXPECT_EQ(a.index("-1").to_doubles(), (std::vector<double>{18, 19, 20, 21, 22, 23}));
  EXPECT_EQ(a.index("::-1, -1").to_doubles(), (std::vector<double>{23, 17, 11, 5}));
  EXPECT_EQ(a.index("2, ::-2").to_doubles(), (std::vector<double>{17, 15, 13}));
  EXPECT_EQ(a.index("0, -2:0:-1").to_doubles(), (std::vector<double>{4, 3, 2, 1}));
  EXPECT_EQ(a.index("0, 10:-10:-3").to_doubles(), (std::vector<double>{5, 2}));
  EXPECT_EQ(a.index("0, 4:1").shape(), (Shape{0}));
  EXPECT_EQ(a.index("...").shape(), (Shape{4, 6}));
}

TEST(Views, EllipsisNewAxisAndIntegerDrops) {
  Array a = arange_on_device({2, 3, 4});
  EXPECT_EQ(a(ellipsis, 1).shape(), (Shape{2, 3}));
  EXPECT_EQ(a(1, ellipsis).shape(), (Shape{3, 4}));
  EXPECT_EQ(a(newaxis, ellipsis, newaxis).shape(), (Shape{1, 2, 3, 4, 1}));
  EXPECT_EQ(a(1, 2, 3).shape(), (Shape{}));
  EXPECT_EQ(a(1, 2, 3).to_doubles(), (std::vector<double>{23}));
  EXPECT_EQ(a(-1, ellipsis, -1).to_doubles(), (std::vector<double>{15, 19, 23}));
}

std::vector<Index> random_index(std::mt19937& rng, const Shape& shape) {
  std::vector<Index> out;
  std::uniform_int_distribution<int> kind(0, 9);
  bool used_ellipsis = false;
  std::size_t axis = 0;
  while (axis < shape.size()) {
    std::int64_t n = shape[axis];
    int k = kind(rng);
    if (k == 0 && !used_ellipsis && axis + 1 < shape.size()) {
      out.emplace_back(ellipsis);
      used_ellipsis = true;
      axis = shape.size() - 1;  // the entries after it address the trailing axes
      continue;
    }
    if (k == 1) {
      out.emplace_back(newaxis);
      continue;
    }
    if (k <= 3 && n > 0) {
      std::uniform_int_distribution<std::int64_t> i(-n, n - 1);
      out.emplace_back(i(rng));
    } else {
      std::uniform_int_distribution<std::int64_t> bound(-n - 3, n + 3), step(-4, 4), coin(0, 3);
      std::int64_t st = 0;
      while (st == 0) st = step(rng);
      Slice s;
      if (coin(rng)) s.start = bound(rng);
      if (coin(rng)) s.stop = bound(rng);
      s.step = st;
      out.emplace_back(s);
    }
    ++axis;
  }
  return out;
}

TEST(Views, RandomIndicesAndViewsOfViewsMatchOracle) {
  std::mt19937 rng(2024);
  const Shape base_shape = {5, 4, 6};
  Array base = arange_on_device(base_shape);
  RefView ref = ref_base(base_shape);
  for (int trial = 0; trial < 300; ++trial) {
    auto first = random_index(rng, base_shape);
    Array v = base.index(first);
    RefView rv = ref_index(ref, first);
    expect_view_matches(v, rv);
    if (v.rank() == 0 || v.size() == 0) continue;
    auto second = random_index(rng, v.shape());
    Array w = v.index(second);
    expect_view_matches(w, ref_index(rv, second));
    // A transposed view of a view, too.
    expect_view_matches(w.T().T(), ref_index(rv, second));
  }
}

TEST(Views, WritesThroughViewsTouchOnlyViewedElements) {
  std::mt19937 rng(99);
  const Shape shape = {6, 7};
  for (int trial = 0; trial < 60; ++trial) {
    Array z = Array::zeros(shape, DType::f32, device());
    auto entries = random_index(rng, shape);
    Array v = z.index(entries);
    RefView rv = ref_index(ref_base(shape), entries);
    // Distinct values through the view, so misplaced writes are caught.
    std::vector<float> values(static_cast<std::size_t>(v.size()));
    std::iota(values.begin(), values.end(), 1.0f);
    v.copy_from(std::span<const float>(values));
    std::vector<double> expected(static_cast<std::size_t>(shape_numel(shape)), 0.0);
    for (std::size_t i = 0; i < rv.flat.size(); ++i)
      expected[static_cast<std::size_t>(rv.flat[i])] = values[i];
    ASSERT_EQ(z.to_doubles(), expected);
    // fill through the same view overwrites exactly the same positions.
    v.fill(-5);
    for (std::size_t i = 0; i < rv.flat.size(); ++i)
      expected[static_cast<std::size_t>(rv.flat[i])] = -5;
    ASSERT_EQ(z.to_doubles(), expected);
  }
}

TEST(Views, AssignBroadcastsAndHandlesOverlap) {
  Array a = arange_on_device({3, 4});
  Array row = Array::from_vector(std::vector<float>{10, 20, 30, 40}, {4}, device());
  a.index("1:").assign(row);
  EXPECT_EQ(a.to_doubles(), (std::vector<double>{0, 1, 2, 3, 10, 20, 30, 40, 10, 20, 30, 40}));
  // Overlapping source and destination: a[1:] = a[:-1] must read the old values.
  Array b = arange_on_device({5});
  b.index("1:").assign(b.index(":-1"));
  EXPECT_EQ(b.to_doubles(), (std::vector<double>{0, 0, 1, 2, 3}));
  // Square transpose into itself.
  Array c = arange_on_device({3, 3});
  c.assign(c.T());
  EXPECT_EQ(c.to_doubles(), (std::vector<double>{0, 3, 6, 1, 4, 7, 2, 5, 8}));
  // From the host side of another device.
  Array host = Array::from_vector(std::vector<float>{7, 8}, {2});
  Array d = Array::zeros({2, 2}, DType::f32, device());
  d.index(":, 1").assign(host);
  EXPECT_EQ(d.to_doubles(), (std::vector<double>{0, 7, 0, 8}));
}

TEST(Views, TransposeAndT) {
  Array a = arange_on_device({2, 3, 4});
  Array t = a.T();
  EXPECT_EQ(t.shape(), (Shape{4, 3, 2}));
  Array p = a.transpose({1, -1, 0});
  EXPECT_EQ(p.shape(), (Shape{3, 4, 2}));
  auto pv = p.to_doubles();
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 2; ++k) ASSERT_EQ(pv[(i * 4 + j) * 2 + k], k * 12 + i * 4 + j);
  EXPECT_TRUE(p.shares_storage(a));
  EXPECT_FALSE(p.is_contiguous());
}

TEST(Views, ReshapeViewsWhenLayoutAllows) {
  Array a = arange_on_device({4, 6});
  Array r = a.reshape({2, -1, 3});
  EXPECT_EQ(r.shape(), (Shape{2, 4, 3}));
  EXPECT_TRUE(r.shares_storage(a));
  EXPECT_EQ(r.to_doubles(), a.to_doubles());
  // Merging axes that stay contiguous within a strided view still works: rows of a[::2].
  Array s = a.index("::2").reshape({2, 2, 3});
  EXPECT_EQ(s.to_doubles(), (std::vector<double>{0, 1, 2, 3, 4, 5, 12, 13, 14, 15, 16, 17}));
  // Size-1 axes can be added or removed anywhere.
  EXPECT_EQ(a.T().reshape({6, 1, 4}).to_doubles(), a.T().to_doubles());
  // Zero-size arrays reshape freely.
  EXPECT_EQ(Array::zeros({0, 3}, DType::f32, device()).reshape({3, 0, 5}).shape(),
            (Shape{3, 0, 5}));
}

TEST(Views, ReshapeRefusesWhenACopyWouldBeNeeded) {
  Array a = arange_on_device({4, 6});
  try {
    a.T().reshape({24});
    FAIL() << "reshape of a transposed array into one axis cannot be a view";
  } catch (const ShapeError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("reshape"), std::string::npos);
    EXPECT_NE(msg.find("contiguous"), std::string::npos) << msg;
  }
  EXPECT_EQ(a.T().contiguous().reshape({24}).to_doubles()[1], 6.0);
  EXPECT_THROW(a.reshape({5, 5}), ShapeError);
  EXPECT_THROW(a.reshape({-1, -1}), ValueError);
  EXPECT_THROW(a.reshape({7, -1}), ShapeError);
  EXPECT_THROW(a.reshape({1, 1, 1, 1, 1, 1, 1, 1, 24}), ShapeError);
}

TEST(Views, BroadcastToIsReadOnlyAndRepeats) {
  Array row = Array::from_vector(std::vector<float>{1, 2, 3}, {3}, device());
  Array b = row.broadcast_to({2, 3});
  EXPECT_EQ(b.to_doubles(), (std::vector<double>{1, 2, 3, 1, 2, 3}));
  EXPECT_EQ(b.strides(), (Strides{0, 1}));
  Array col = row.reshape({3, 1}).broadcast_to({2, 3, 4});
  EXPECT_EQ(col.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(col.to_doubles()[5], 2.0);
  EXPECT_THROW(b.fill(0), ValueError);
  EXPECT_THROW(row.broadcast_to({4}), ShapeError);
  EXPECT_THROW(row.broadcast_to({3, 2}), ShapeError);
}

TEST(Views, BadIndicesAreClearErrors) {
  Array a = arange_on_device({3, 4});
  try {
    a(3, 0);
    FAIL();
  } catch (const IndexError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("index 3 is out of bounds for axis 0 with size 3"), std::string::npos)
        << msg;
  }
  EXPECT_THROW(a(-4), std::out_of_range);
  EXPECT_THROW(a(0, 0, 0), IndexError);
  EXPECT_THROW(a(ellipsis, 0, ellipsis), IndexError);
  EXPECT_THROW(a(slice(0, 3, 0)), ValueError);
  EXPECT_THROW(a.index("::0"), ValueError);
  EXPECT_THROW(a.index("1:2:3:4"), ValueError);
  EXPECT_THROW(a.index("x"), ValueError);
  EXPECT_THROW(a.transpose({0, 0}), ValueError);
  EXPECT_THROW(a.transpose({0}), ValueError);
  EXPECT_THROW(a.transpose({0, 2}), ValueError);
  EXPECT_THROW(a.dim(2), IndexError);
  Array never;
  EXPECT_THROW(never.T(), ValueError);
}

TEST(Views, EveryDtypeViewsAlike) {
  for (DType dtype : {DType::f32, DType::bf16, DType::u8, DType::i32, DType::flex16}) {
    Array a = arange_on_device({4, 5}, dtype);
    EXPECT_EQ(a.index("::-2, 1::2").to_doubles(), (std::vector<double>{16, 18, 6, 8}))
        << dtype_name(dtype);
  }
}

}  // namespace
}  // namespace flexkit
