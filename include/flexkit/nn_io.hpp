// Files a training run writes for people and for Python: NumPy .npz archives (weights, metrics,
// with the model description as a string) and JSON documents, each written atomically.
#pragma once
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "flexkit/array.hpp"

namespace flexkit::nn {

// ---- .npz archives ---------------------------------------------------------------------------

// Writes an uncompressed .npz (a zip archive of stored .npy entries, as np.savez writes) that
// np.load reads. Each array becomes "<name>.npy": f32 as <f4, f64 as <f8, i32 as <i4, u8 as |u1;
// flex16 and bf16 are decoded to f32 (exactly). Arrays on any device and any view are written in
// their logical (row-major) order. Each string becomes a 0-d NumPy unicode array ("<U{n}",
// UTF-32LE; the string must be valid UTF-8), so np.load(path)["model"].item() gives it back.
//
// Names must be non-empty, unique across both lists, and hold no '/', '\\' or NUL. The file is
// written atomically: a temporary file in the same directory, flushed to disk, then renamed over
// `path`; on failure nothing is left behind and an existing file is untouched. Entries are not
// timestamped (1980-01-01), so the same contents give the same bytes. Throws ValueError for bad
// names or strings, or for an archive that would need ZIP64 (an entry or the archive over
// 4 GiB), and IoError when writing fails.
void save_npz(const std::string& path, const std::vector<std::pair<std::string, Array>>& arrays,
              const std::vector<std::pair<std::string, std::string>>& strings = {});

// Reads the numeric entries of an uncompressed .npz (save_npz's, or np.savez's): f32, f64, i32
// and u8 .npy entries, keyed by name without ".npy", as cpu arrays; string entries are skipped
// (see load_npz_strings). CRCs are verified. Throws IoError (cannot read) or FormatError (not a
// zip archive, a compressed entry, a CRC mismatch, an entry of another dtype, a bad .npy header).
std::map<std::string, Array> load_npz(const std::string& path);

// The 0-d unicode entries of an .npz (save_npz's strings), as UTF-8, keyed by name.
std::map<std::string, std::string> load_npz_strings(const std::string& path);

// ---- JSON ------------------------------------------------------------------------------------

// A JSON value: null, bool, number (an int64 or a finite double), string (UTF-8), array, or
// object whose members keep their insertion order.
class JsonValue {
 public:
  enum class Kind { null, boolean, integer, number, string, array, object };
  using Elements = std::vector<JsonValue>;
  using Members = std::vector<std::pair<std::string, JsonValue>>;

  JsonValue() = default;  // null
  JsonValue(std::nullptr_t) {}
  JsonValue(bool value) : kind_(Kind::boolean), bool_(value) {}
  // Integers are kept exactly; an unsigned value above INT64_MAX throws ValueError.
  template <std::integral T>
  requires(!std::same_as<T, bool>) JsonValue(T value)
      : kind_(Kind::integer), int_(checked_int(value)) {}
  // NaN and infinities throw ValueError: JSON has no spelling for them.
  JsonValue(double value);
  JsonValue(float value) : JsonValue(static_cast<double>(value)) {}
  JsonValue(const char* value) : kind_(Kind::string), string_(value) {}
  JsonValue(std::string value) : kind_(Kind::string), string_(std::move(value)) {}
  JsonValue(std::string_view value) : kind_(Kind::string), string_(value) {}

  static JsonValue array(Elements elements = {});
  // Throws ValueError on a duplicate key.
  static JsonValue object(Members members = {});

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::null; }

  // Arrays: appends; throws ValueError when this is not an array.
  JsonValue& push_back(JsonValue value);
  // Objects: replaces the value of `key` where it is, or appends the member; throws ValueError
  // when this is not an object. Returns *this, so that calls chain.
  JsonValue& set(std::string_view key, JsonValue value);
  // Objects: the member's value, or nullptr.
  const JsonValue* find(std::string_view key) const;

  // Each throws ValueError when the value has another kind (as_double also takes an integer).
  bool as_bool() const;
  std::int64_t as_int() const;
  double as_double() const;
  const std::string& as_string() const;
  const Elements& elements() const;
  const Members& members() const;

 private:
  template <class T>
  static std::int64_t checked_int(T value) {
    if constexpr (std::is_unsigned_v<T> && sizeof(T) >= sizeof(std::int64_t)) {
      if (value > static_cast<T>(std::numeric_limits<std::int64_t>::max())) out_of_range(value);
    }
    return static_cast<std::int64_t>(value);
  }
  [[noreturn]] static void out_of_range(unsigned long long value);
  void require(Kind kind, const char* operation) const;

  Kind kind_ = Kind::null;
  bool bool_ = false;
  std::int64_t int_ = 0;
  double number_ = 0;
  std::string string_;
  Elements elements_;
  Members members_;
};

// The JSON text of `value`. indent > 0: one member or element per line, nested `indent` spaces
// deeper, "key": value; indent <= 0: everything on one line with no spaces. Doubles are printed
// in the shortest form that reads back to the same double, always with a '.' or an exponent
// (1.0, not 1), so that readers keep them floating point. Strings are escaped as JSON requires
// ('"', '\\' and control characters); other characters pass through as UTF-8. Throws
// ValueError for a string that is not valid UTF-8. No trailing newline.
std::string to_json(const JsonValue& value, int indent = 2);

// Writes `text` to `path` atomically: a temporary file in the same directory, flushed to disk,
// then renamed over `path`; on failure nothing is left behind. Throws IoError.
void write_text_file_atomically(const std::string& path, const std::string& text);

}  // namespace flexkit::nn
