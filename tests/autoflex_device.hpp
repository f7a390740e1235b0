// Runs the Autoflex manager on a CUDA device over a sequence of writes' statistics (for
// test_autoflex: the device update must agree with the host one bit for bit).
#pragma once
#include <cstdint>
#include <vector>

#include "flexkit/portable/autoflex.hpp"

namespace autoflex_test {

struct Write {
  std::int32_t iwl;
  std::int32_t max_abs_m;
  std::uint32_t saturated;
};

// The state after each write, as the device computed it.
std::vector<flexkit::portable::AutoflexState> record_on_device(const std::vector<Write>& writes);

}  // namespace autoflex_test
