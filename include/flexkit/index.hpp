// NumPy-style index entries: integers, slices, `...` and new axes.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

namespace flexkit {

// start:stop:step with NumPy semantics; an empty bound means "from the end the step points away
// from". Length is ceil((stop - start) / step) after clamping.
struct Slice {
  std::optional<std::int64_t> start;
  std::optional<std::int64_t> stop;
  std::int64_t step = 1;
};

struct EllipsisIndex {};
struct NewAxisIndex {};

inline constexpr Slice all{};
inline constexpr EllipsisIndex ellipsis{};
inline constexpr NewAxisIndex newaxis{};

inline Slice slice(std::optional<std::int64_t> start = {}, std::optional<std::int64_t> stop = {},
                   std::int64_t step = 1) {
  return Slice{start, stop, step};
}

class Index {
 public:
  using Entry = std::variant<std::int64_t, Slice, EllipsisIndex, NewAxisIndex>;
  template <class I>
  requires std::is_integral_v<I> Index(I i) : entry_(static_cast<std::int64_t>(i)) {}
  Index(Slice s) : entry_(s) {}
  Index(EllipsisIndex e) : entry_(e) {}
  Index(NewAxisIndex n) : entry_(n) {}
  const Entry& entry() const { return entry_; }

 private:
  Entry entry_;
};

// Parses NumPy index text such as "1:, ::-2, ..., 3" or "None, 0" into index entries; throws
// ValueError naming the offending token.
std::vector<Index> parse_index(std::string_view text);

// The normalised form of a slice over an axis of length n: first index, step and length.
struct ResolvedSlice {
  std::int64_t start;
  std::int64_t step;
  std::int64_t length;
};
// Throws ValueError for step 0.
ResolvedSlice resolve_slice(const Slice& s, std::int64_t n);

std::string to_string(const Slice& s);

}  // namespace flexkit
