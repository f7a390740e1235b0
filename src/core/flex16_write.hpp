// How one flex16 write picks its exponent: the IwlPolicy resolved before the backend runs, and
// the write's statistics fed back to the output's Autoflex manager after it. Every operation
// that writes flex16 (assign, dot, the convolutions) goes through these two calls, so the three
// policies mean the same everywhere.
#pragma once
#include <optional>

#include "flexkit/array.hpp"
#include "flexkit/autoflex.hpp"
#include "flexkit/expr.hpp"

namespace flexkit::detail {

struct Flex16WritePlan {
  IwlPolicy policy = IwlPolicy::fixed;  // what the backend runs: fixed or exact
  std::optional<int> iwl;               // fixed: the iwl to store at (unset: the output's own)
  std::optional<Autoflex> manager;      // autoflex: the manager the write reports to
};

// IwlPolicy::autoflex becomes `exact` for a manager's first write and `fixed` at the predicted
// iwl after it. No side effects. Throws ValueError for autoflex together with an explicit iwl.
// Other policies pass through.
Flex16WritePlan plan_flex16_write(const Array& out, IwlPolicy policy, std::optional<int> iwl,
                                  const char* operation);

// Right before the write runs: when an autoflex write moves the storage to another iwl and
// reads its own output or covers only part of its storage (`keeps_old_values`), the stored
// values are first re-expressed at the new iwl, so that nothing else it holds changes value.
// (Heavy products read their old output at its old iwl themselves and pass false.)
void prepare_flex16_write(const Array& out, const Flex16WritePlan& plan, bool keeps_old_values);

// After the write: the manager records the iwl used and the write's statistics (on CUDA this
// waits for them).
void finish_flex16_write(const Array& out, const Flex16WritePlan& plan);

// Every element of out's storage re-expressed at iwl `to` (round half to even, saturating).
void rescale_storage(const Array& out, int to);

// True when `out` views fewer elements than its storage holds.
bool covers_part_of_storage(const Array& out);

}  // namespace flexkit::detail
