// Timing helpers shared by the benchmarks: medians of repeats after warm-up.
#pragma once
#include <algorithm>
#include <cctype>
#include <chrono>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "flexkit/flexkit.hpp"

namespace flexkit::bench {

inline constexpr int kWarmup = 3;
inline constexpr int kRepeats = 15;

// Median wall time in ms of `body` (which must finish its work before returning).
inline double median_host_ms(const std::function<void()>& body, int repeats = kRepeats) {
  for (int i = 0; i < kWarmup; ++i) body();
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    auto start = std::chrono::steady_clock::now();
    body();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                    .count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Uniform random values in [lo, hi) as `dtype` on `device` (never zeros: the flex16 codec's rule).
inline Array random_array(const Shape& shape, DType dtype, Device device, unsigned seed,
                          float lo = -1.0f, float hi = 1.0f) {
  std::vector<float> v(static_cast<std::size_t>(shape_numel(shape)));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  for (auto& x : v) x = u(rng);
  return Array::from_floats(v, shape, dtype, device);
}

// Lower case, without spaces: how layer names are compared.
inline std::string normalized(const std::string& s) {
  std::string r;
  for (char ch : s)
    if (!std::isspace(static_cast<unsigned char>(ch)))
      r += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return r;
}

// The layers of `all` (each with a `name` and `pointwise()`) that a comma-separated spec picks:
// "all" (also an unset or empty spec), "3x3" (every layer that is not pointwise), "1x1", or
// layer names (spaces and case ignored), in `all`'s order. A token that matches nothing throws,
// naming `variable` and listing the layers.
template <typename Layer>
std::vector<Layer> pick_layers(const std::vector<Layer>& all, const char* spec,
                               const char* variable) {
  const std::string text = spec && *spec ? spec : "all";
  std::vector<bool> chosen(all.size(), false);
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t end = std::min(text.find(',', pos), text.size());
    const std::string tok = normalized(text.substr(pos, end - pos));
    pos = end + 1;
    if (tok.empty()) continue;
    bool matched = false;
    for (std::size_t i = 0; i < all.size(); ++i) {
      const bool hit = tok == "all" || (tok == "3x3" && !all[i].pointwise()) ||
                       (tok == "1x1" && all[i].pointwise()) || tok == normalized(all[i].name);
      if (hit) chosen[i] = matched = true;
    }
    if (!matched) {
      std::string names;
      for (const Layer& l : all) names += "\n  " + l.name;
      throw std::invalid_argument(std::string(variable) + ": no layer '" + tok +
                                  "'; want all, 3x3, 1x1 or one of:" + names);
    }
  }
  std::vector<Layer> layers;
  for (std::size_t i = 0; i < all.size(); ++i)
    if (chosen[i]) layers.push_back(all[i]);
  return layers;
}

}  // namespace flexkit::bench
