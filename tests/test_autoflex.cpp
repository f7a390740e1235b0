// The Autoflex exponent manager (flexkit/portable/autoflex.hpp) against the behaviour it
// promises — the pinned traces, overflow then convergence, steady values, clamping — and against
// a plain float64 re-statement of its rule on random sequences, iwl for iwl. With --device=cuda,
// the same sequences run through the manager on the GPU must give the same states bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <random>
#include <vector>

#include "flexkit/portable/autoflex.hpp"
#include "support/test_device.hpp"

#if FLEXKIT_HAVE_CUDA
#include "autoflex_device.hpp"
#endif

namespace {

namespace portable = flexkit::portable;
using portable::AutoflexState;

// One flex16 write of a tensor whose largest |value| is `max_abs`: the exact iwl on the first
// write, the manager's afterwards; returns what the tensor reads back for that value, and the
// iwl the write used in `used_iwl` when given.
double write(AutoflexState& s, double max_abs, int* used_iwl = nullptr) {
  const int iwl = portable::autoflex_wants_exact(s)
                      ? portable::flex16_iwl_holding(static_cast<float>(max_abs))
                      : s.iwl;
  if (used_iwl) *used_iwl = iwl;
  const portable::Flex16Code code = portable::flex16_encode(max_abs, iwl);
  portable::autoflex_record(s, iwl, std::abs(code.m), code.saturated ? 1 : 0, 0);
  return std::ldexp(static_cast<double>(code.m), iwl - 15);
}

// The rule restated plainly: a deque for the window, std::frexp for the power of two.
struct ReferenceManager {
  int iwl = 0;
  int writes = 0;
  std::deque<double> window;

  int next_write_iwl(double max_abs) const {
    if (writes > 0) return iwl;
    int e = 0;  // the finest iwl holding max_abs, found by trying
    for (e = -111; e < 127; ++e)
      if (std::nearbyint(std::ldexp(max_abs, 15 - e)) <= 32767) break;
    return max_abs == 0 ? 0 : e;
  }

  void record(int written, double stored_max, bool saturated) {
    ++writes;
    int next = written;
    if (saturated) {
      window.clear();
      next = written + 2;
    } else {
      window.push_back(stored_max);
      if (window.size() > 16) window.pop_front();
      double top = 0, sum = 0;
      for (double v : window) top = std::max(top, v), sum += v;
      if (writes > 1 && top > 0) {
        const double mean = sum / window.size();
        double squares = 0;
        for (double v : window) squares += (v - mean) * (v - mean);
        const double sigma = std::sqrt(squares / window.size());
        const double predicted = 2 * (top + 3 * sigma) + 100 * std::ldexp(1.0, written - 15);
        int e = 0;
        const double f = std::frexp(predicted, &e);  // predicted = f * 2^e, f in [0.5, 1)
        next = f == 0.5 ? e - 1 : e;
      }
    }
    iwl = std::clamp(next, -111, 127);
  }
};

TEST(Autoflex, FirstWriteTakesTheFinestIwl) {
  AutoflexState s = portable::autoflex_initial();
  EXPECT_EQ(write(s, 0.4), 0.399993896484375);
  EXPECT_EQ(s.min_iwl, -1);
  EXPECT_EQ(s.overflows, 0);
}

// y = x + 1.5 for x = 0, 1, 2, 3: the second write saturates at the first one's range, the
// third has a range 4x wider, the fourth keeps it.
TEST(Autoflex, PinnedTrace) {
  AutoflexState s = portable::autoflex_initial();
  const double want[] = {1.5, 1.99993896484375, 3.5, 4.5};
  const int iwls[] = {1, 1, 3, 3};
  for (int x = 0; x < 4; ++x) {
    int iwl = 0;
    EXPECT_EQ(write(s, x + 1.5, &iwl), want[x]) << "x = " << x;
    EXPECT_EQ(iwl, iwls[x]) << "x = " << x;
  }
  EXPECT_EQ(s.overflows, 1);
  EXPECT_EQ(s.saturated, 1u);
  EXPECT_EQ(s.min_iwl, 1);
  EXPECT_EQ(s.max_iwl, 3);
}

// A steady value: no saturation after the first write, and one iwl from the third write on, the
// finest that the headroom allows: 2 * 0.4 + 100 units of 2^-16 rounds up to 2^0.
TEST(Autoflex, SteadyValuesSettleWithoutSaturating) {
  AutoflexState s = portable::autoflex_initial();
  std::vector<int> iwls;
  for (int i = 0; i < 40; ++i) {
    write(s, 0.4);
    iwls.push_back(s.iwl);
  }
  EXPECT_EQ(s.saturated, 0u);
  for (std::size_t i = 1; i < iwls.size(); ++i) EXPECT_EQ(iwls[i], 0) << "after write " << i + 1;
  EXPECT_EQ(iwls[0], -1);  // the second write keeps the first one's iwl
}

// A jump by 100x: each saturating write widens by 2 binades until the value fits, then the
// window forgets the old values and the iwl settles where the prediction puts it.
TEST(Autoflex, OverflowThenConvergence) {
  AutoflexState s = portable::autoflex_initial();
  for (int i = 0; i < 20; ++i) write(s, 1.0);
  ASSERT_EQ(s.overflows, 0);
  // 2 * 1 + 100 units of the scale is just above 2: the range 2^2.
  EXPECT_EQ(s.iwl, 2);
  std::vector<bool> saturated;
  for (int i = 0; i < 40; ++i) {
    const std::uint64_t was = s.saturated;
    const double got = write(s, 100.0);
    saturated.push_back(s.saturated != was);
    if (s.saturated == was) {
      EXPECT_EQ(got, 100.0);
    }
  }
  // 2^2 -> 2^4 -> 2^6 -> 2^8 holds 100: three saturating writes, in a row, then none.
  EXPECT_EQ(s.overflows, 3);
  for (int i = 0; i < 40; ++i) EXPECT_EQ(saturated[i], i < 3) << "write " << i;
  // 2 * 100 + 100 * 2^(8 - 15) rounds up to 2^8.
  EXPECT_EQ(s.iwl, 8);
  EXPECT_EQ(s.max_iwl, 8);
}

// A window of zeros teaches nothing: the iwl stays where it was (the additive term alone would
// walk it down 8 binades a write). A tensor that shrinks follows once its window has forgotten
// the large values (16 writes).
TEST(Autoflex, ZerosKeepTheIwlAndShrinkingFollowsTheWindow) {
  AutoflexState zeros = portable::autoflex_initial();
  for (int i = 0; i < 5; ++i) {
    write(zeros, 0.0);
    EXPECT_EQ(zeros.iwl, 0) << "after zero write " << i + 1;
  }
  AutoflexState s = portable::autoflex_initial();
  write(s, 3.0);
  write(s, 3.0);
  std::vector<int> iwls;
  for (int i = 0; i < 30; ++i) {
    write(s, 0.0);
    iwls.push_back(s.iwl);
  }
  for (int i = 16; i < 30; ++i) EXPECT_EQ(iwls[i], iwls[15]) << "zero write " << i + 1;
  EXPECT_EQ(s.saturated, 0u);

  AutoflexState t = portable::autoflex_initial();
  for (int i = 0; i < 5; ++i) write(t, 64.0);
  const int large = t.iwl;
  EXPECT_EQ(large, 8);
  for (int i = 0; i < 15; ++i) {
    write(t, 0.01);
    EXPECT_GE(t.iwl, large) << "the window still holds 64 after " << i + 1 << " small writes";
  }
  write(t, 0.01);  // 64 leaves the window now
  EXPECT_LT(t.iwl, large);
  // The additive term is in units of the current scale, and the window holds the coarser
  // roundings of 0.01 until it turns over: the descent takes a few windows, then stops at
  // 2 * 0.01 + 100 units, rounded up to 2^-5.
  for (int i = 0; i < 64; ++i) write(t, 0.01);
  EXPECT_EQ(t.iwl, -5);
  EXPECT_EQ(t.saturated, 0u);
}

TEST(Autoflex, PredictionsAreClampedToTheLegalRange) {
  AutoflexState s = portable::autoflex_initial();
  write(s, std::ldexp(1.0, 126));
  write(s, std::ldexp(1.0, 126));  // predicts 2^128: clamped to 127
  EXPECT_EQ(s.iwl, 127);
  EXPECT_EQ(s.clamped, 1);
  AutoflexState t = portable::autoflex_initial();
  write(t, std::ldexp(1.0, -120));  // the exact iwl is already the smallest legal one
  EXPECT_EQ(t.min_iwl, -111);
  write(t, std::ldexp(1.0, -120));  // predicts 2^-119: clamped to -111
  EXPECT_EQ(t.iwl, -111);
  EXPECT_EQ(t.clamped, 1);
}

// Random sequences — slow drifts, noise, jumps both ways, zeros — against the restated rule.
std::vector<double> random_sequence(unsigned seed, int length) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<double> values;
  double level = std::ldexp(1.0, static_cast<int>(rng() % 40) - 20);
  for (int i = 0; i < length; ++i) {
    const double r = unit(rng);
    if (r < 0.03) level *= std::ldexp(1.0, static_cast<int>(rng() % 13) - 6);  // a jump
    level *= 1.0 + 0.05 * (unit(rng) - 0.5);                                   // a drift
    values.push_back(r > 0.98 ? 0.0 : level * (0.5 + unit(rng)));
  }
  return values;
}

TEST(Autoflex, MatchesTheRuleOnRandomSequences) {
  for (unsigned seed = 1; seed <= 50; ++seed) {
    const std::vector<double> values = random_sequence(seed, 300);
    AutoflexState s = portable::autoflex_initial();
    ReferenceManager ref;
    for (std::size_t i = 0; i < values.size(); ++i) {
      const int want_iwl = ref.next_write_iwl(values[i]);
      const int got_iwl = portable::autoflex_wants_exact(s)
                              ? portable::flex16_iwl_holding(static_cast<float>(values[i]))
                              : s.iwl;
      ASSERT_EQ(got_iwl, want_iwl) << "seed " << seed << " write " << i;
      const double stored = write(s, values[i]);
      const double scaled = std::nearbyint(std::ldexp(values[i], 15 - want_iwl));
      const bool saturated = scaled > 32767;
      ref.record(want_iwl, saturated ? 0 : std::ldexp(scaled, want_iwl - 15), saturated);
      if (!saturated) {
        ASSERT_EQ(stored, std::ldexp(scaled, want_iwl - 15));
      }
    }
  }
}

#if FLEXKIT_HAVE_CUDA
// The same writes, the manager updated by a CUDA kernel: the states agree byte for byte.
TEST(Autoflex, DeviceManagerAgreesWithTheHostBitForBit) {
  if (!flexkit::test::device().is_cuda()) GTEST_SKIP() << "a host-only run (--device=cpu)";
  for (unsigned seed = 1; seed <= 20; ++seed) {
    const std::vector<double> values = random_sequence(seed, 200);
    // The writes' statistics, produced on the host: the iwl each write used comes from the
    // manager, so the host manager runs alongside to produce them.
    AutoflexState host = portable::autoflex_initial();
    std::vector<autoflex_test::Write> writes;
    for (double v : values) {
      const int iwl = portable::autoflex_wants_exact(host)
                          ? portable::flex16_iwl_holding(static_cast<float>(v))
                          : host.iwl;
      const portable::Flex16Code code = portable::flex16_encode(v, iwl);
      writes.push_back({iwl, std::abs(code.m), code.saturated ? 1u : 0u});
      portable::autoflex_record(host, iwl, std::abs(code.m), code.saturated ? 1 : 0, 0);
    }
    const std::vector<AutoflexState> device = autoflex_test::record_on_device(writes);
    AutoflexState replay = portable::autoflex_initial();
    ASSERT_EQ(device.size(), writes.size());
    for (std::size_t i = 0; i < writes.size(); ++i) {
      portable::autoflex_record(replay, writes[i].iwl, writes[i].max_abs_m, writes[i].saturated, 0);
      ASSERT_EQ(0, std::memcmp(&replay, &device[i], sizeof(AutoflexState)))
          << "seed " << seed << " after write " << i << ": host iwl " << replay.iwl
          << ", device iwl " << device[i].iwl;
    }
  }
}
#endif

}  // namespace
