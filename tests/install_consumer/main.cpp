// Uses an installed flexkit through its public headers and checks one computed value; exits
// non-zero on any mismatch.
#include <cstdio>
#include <exception>
#include <string_view>
#include <vector>

#include "flexkit/flexkit.hpp"

#ifdef FLEXKIT_HAVE_CUDA
constexpr int kHeadersSeeCuda = 1;
#else
constexpr int kHeadersSeeCuda = 0;
#endif

int main() {
  try {
    std::printf("flexkit %.*s\n", static_cast<int>(flexkit::kVersion.size()),
                flexkit::kVersion.data());
    if (flexkit::kVersion != std::string_view(PACKAGE_VERSION)) {
      std::fprintf(stderr, "version.hpp says %.*s, the package version file %s\n",
                   static_cast<int>(flexkit::kVersion.size()), flexkit::kVersion.data(),
                   PACKAGE_VERSION);
      return 1;
    }
    // FLEXKIT_HAVE_CUDA reaches users through the exported target's compile definitions.
    if (kHeadersSeeCuda != PACKAGE_HAS_CUDA) {
      std::fprintf(stderr, "FLEXKIT_HAVE_CUDA is %d here, but the package was built with %d\n",
                   kHeadersSeeCuda, PACKAGE_HAS_CUDA);
      return 1;
    }

    const flexkit::Array a = flexkit::Array::arange(6, flexkit::DType::f32).reshape({2, 3});
    const flexkit::Array s = flexkit::evaluate(flexkit::sum(a * 2.0, 1));

    // The row sums of 2 * [[0, 1, 2], [3, 4, 5]], computed without flexkit.
    std::vector<float> expected;
    for (int row = 0; row < 2; ++row) {
      float total = 0.0f;
      for (int col = 0; col < 3; ++col) total += 2.0f * static_cast<float>(row * 3 + col);
      expected.push_back(total);
    }

    const std::vector<float> got = s.to_vector<float>();
    const flexkit::Shape expected_shape = {2, 1};  // a reduced axis is kept with size 1
    std::printf("sum(a * 2, 1) = %s\n", s.str().c_str());
    if (s.shape() != expected_shape || got != expected) {
      std::fprintf(stderr, "expected %s = {%g, %g}, got %s\n",
                   flexkit::shape_str(expected_shape).c_str(), expected[0], expected[1],
                   s.describe().c_str());
      return 1;
    }
    std::printf("ok\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
