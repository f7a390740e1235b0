// Views: indexing, transposes, reshape and broadcast_to. None of them touches elements.
#include <algorithm>

#include "core/storage.hpp"
#include "core/text.hpp"
#include "flexkit/array.hpp"
#include "flexkit/error.hpp"

namespace flexkit {

using detail::cat;

Array Array::index(std::span<const Index> entries) const {
  require_defined("index");
  int consumed = 0, ellipses = 0;
  for (const Index& e : entries) {
    if (std::holds_alternative<EllipsisIndex>(e.entry()))
      ++ellipses;
    else if (!std::holds_alternative<NewAxisIndex>(e.entry()))
      ++consumed;
  }
  if (ellipses > 1) throw IndexError(cat("index: an index can only have a single ellipsis"));
  if (consumed > rank())
    throw IndexError(cat("index: too many indices for ", describe(), ": array is ", rank(),
                         "-dimensional, but ", consumed, " were indexed"));

  Shape shape;
  Strides strides;
  std::int64_t offset = offset_;
  int axis = 0;
  auto keep_axis = [&](int a) {
    shape.push_back(shape_[a]);
    strides.push_back(strides_[a]);
  };
  for (const Index& e : entries) {
    const auto& entry = e.entry();
    if (std::holds_alternative<EllipsisIndex>(entry)) {
      int skip = rank() - consumed;
      for (int k = 0; k < skip; ++k) keep_axis(axis++);
    } else if (std::holds_alternative<NewAxisIndex>(entry)) {
      shape.push_back(1);
      strides.push_back(0);
    } else if (const auto* i = std::get_if<std::int64_t>(&entry)) {
      std::int64_t n = shape_[axis];
      std::int64_t k = *i < 0 ? *i + n : *i;
      if (k < 0 || k >= n)
        throw IndexError(cat("index: index ", *i, " is out of bounds for axis ", axis,
                             " with size ", n, " (", describe(), ")"));
      offset += k * strides_[axis];
      ++axis;
    } else {
      const Slice& s = std::get<Slice>(entry);
      if (s.step == 0)
        throw ValueError(cat("index: slice ", to_string(s), " on axis ", axis, " of ", describe(),
                             " has step zero"));
      ResolvedSlice r = resolve_slice(s, shape_[axis]);
      if (r.length > 0) offset += r.start * strides_[axis];
      shape.push_back(r.length);
      strides.push_back(r.step * strides_[axis]);
      ++axis;
    }
  }
  while (axis < rank()) keep_axis(axis++);
  if (shape.size() > static_cast<std::size_t>(kMaxRank))
    throw IndexError(cat("index: the result would have rank ", shape.size(), "; at most ", kMaxRank,
                         " is supported"));
  return Array(storage_, dtype_, std::move(shape), std::move(strides), offset, writable_);
}

Array Array::index(std::string_view numpy_text) const {
  std::vector<Index> entries = parse_index(numpy_text);
  return index(std::span<const Index>(entries));
}

Array Array::T() const {
  require_defined("T");
  Shape shape(shape_.rbegin(), shape_.rend());
  Strides strides(strides_.rbegin(), strides_.rend());
  return Array(storage_, dtype_, std::move(shape), std::move(strides), offset_, writable_);
}

Array Array::transpose(std::span<const int> perm) const {
  require_defined("transpose");
  std::string perm_text = "(";
  for (std::size_t i = 0; i < perm.size(); ++i) perm_text += cat(i ? ", " : "", perm[i]);
  perm_text += ")";
  if (static_cast<int>(perm.size()) != rank())
    throw ValueError(cat("transpose: permutation ", perm_text, " has ", perm.size(),
                         " entries but ", describe(), " has rank ", rank()));
  Shape shape(perm.size());
  Strides strides(perm.size());
  std::vector<bool> seen(perm.size(), false);
  for (std::size_t i = 0; i < perm.size(); ++i) {
    int p = perm[i] < 0 ? perm[i] + rank() : perm[i];
    if (p < 0 || p >= rank() || seen[p])
      throw ValueError(cat("transpose: ", perm_text, " is not a permutation of the ", rank(),
                           " axes of ", describe()));
    seen[p] = true;
    shape[i] = shape_[p];
    strides[i] = strides_[p];
  }
  return Array(storage_, dtype_, std::move(shape), std::move(strides), offset_, writable_);
}

namespace {

// NumPy's no-copy reshape: groups of old axes that multiply to groups of new axes must be
// contiguous among themselves; returns false when some group is not.
bool reshape_strides(const Shape& old_shape_in, const Strides& old_strides_in,
                     const Shape& new_shape, Strides& new_strides) {
  Shape old_shape;
  Strides old_strides;
  for (std::size_t i = 0; i < old_shape_in.size(); ++i) {
    if (old_shape_in[i] != 1) {
      old_shape.push_back(old_shape_in[i]);
      old_strides.push_back(old_strides_in[i]);
    }
  }
  const std::size_t old_nd = old_shape.size(), new_nd = new_shape.size();
  new_strides.assign(new_nd, 0);
  std::size_t oi = 0, oj = 1, ni = 0, nj = 1;
  while (ni < new_nd && oi < old_nd) {
    std::int64_t np = new_shape[ni], op = old_shape[oi];
    while (np != op) {
      if (np < op)
        np *= new_shape[nj++];
      else
        op *= old_shape[oj++];
    }
    for (std::size_t ok = oi; ok + 1 < oj; ++ok)
      if (old_strides[ok] != old_shape[ok + 1] * old_strides[ok + 1]) return false;
    new_strides[nj - 1] = old_strides[oj - 1];
    for (std::size_t nk = nj - 1; nk > ni; --nk)
      new_strides[nk - 1] = new_strides[nk] * new_shape[nk];
    ni = nj++;
    oi = oj++;
  }
  std::int64_t last = ni >= 1 ? new_strides[ni - 1] : 1;
  for (std::size_t nk = ni; nk < new_nd; ++nk) new_strides[nk] = last;
  return true;
}

}  // namespace

Array Array::reshape(const Shape& requested) const {
  require_defined("reshape");
  if (requested.size() > static_cast<std::size_t>(kMaxRank))
    throw ShapeError(cat("reshape: shape ", shape_str(requested), " has rank ", requested.size(),
                         "; at most ", kMaxRank, " is supported"));
  Shape shape = requested;
  int infer = -1;
  std::int64_t known = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0)
        throw ValueError(cat("reshape: ", shape_str(requested), " has more than one -1"));
      infer = static_cast<int>(i);
    } else if (shape[i] < 0) {
      throw ShapeError(cat("reshape: ", shape_str(requested), " has a negative extent"));
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || size() % known != 0)
      throw ShapeError(cat("reshape: cannot reshape ", describe(), " (", size(),
                           " elements) into shape ", shape_str(requested)));
    shape[infer] = size() / known;
  }
  if (shape_numel(shape) != size())
    throw ShapeError(cat("reshape: cannot reshape ", describe(), " (", size(),
                         " elements) into shape ", shape_str(requested), " (", shape_numel(shape),
                         " elements)"));
  Strides strides;
  if (size() == 0) {
    strides = contiguous_strides(shape);
  } else if (!reshape_strides(shape_, strides_, shape, strides)) {
    throw ShapeError(cat("reshape: cannot view ", describe(), " as ", shape_str(shape),
                         " without copying: the axes being merged are not contiguous in "
                         "memory; use contiguous().reshape(...)"));
  }
  return Array(storage_, dtype_, std::move(shape), std::move(strides), offset_, writable_);
}

Array Array::broadcast_to(const Shape& target) const {
  require_defined("broadcast_to");
  if (target.size() < shape_.size() || target.size() > static_cast<std::size_t>(kMaxRank))
    throw ShapeError(cat("broadcast_to: cannot broadcast ", describe(), " to ", shape_str(target),
                         " (rank ", rank(), " to rank ", target.size(), ")"));
  const std::size_t lead = target.size() - shape_.size();
  Strides strides(target.size(), 0);
  for (std::size_t i = 0; i < target.size(); ++i) {
    if (target[i] < 0)
      throw ShapeError(cat("broadcast_to: ", shape_str(target), " has a negative extent"));
    if (i < lead) continue;
    std::int64_t d = shape_[i - lead];
    if (d == target[i])
      strides[i] = strides_[i - lead];
    else if (d != 1)
      throw ShapeError(cat("broadcast_to: cannot broadcast ", describe(), " to ", shape_str(target),
                           ": axis ", i - lead, " has ", d, ", expected 1 or ", target[i]));
  }
  return Array(storage_, dtype_, target, std::move(strides), offset_, false);
}

}  // namespace flexkit
