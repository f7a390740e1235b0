// Autoflex managers: the per-tensor exponent prediction behind IwlPolicy::autoflex.
//
// Every flex16 storage can carry a manager. A write under IwlPolicy::autoflex asks it for the
// iwl to store at, then feeds it the statistics the write recorded (max |m|, saturated and NaN
// counts). A manager outlives the arrays it served: a layer that allocates a fresh output every
// step hands each one the same manager (Array::set_autoflex), so the history carries over.
//
//   Array y = Array::empty({1}, DType::flex16);
//   for (double x : {0.0, 1.0, 2.0, 3.0}) assign(y, Expr(x) + 1.5, {.iwl_policy =
//   IwlPolicy::autoflex});
//   // y reads back 1.5, 1.99993896484375 (saturated), 3.5, 4.5
//
// The rule and its constants are in flexkit/portable/autoflex.hpp and docs/flex16.md.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "flexkit/flex16.hpp"
#include "flexkit/portable/autoflex.hpp"

namespace flexkit {

// What a manager has seen, for reports.
struct AutoflexReport {
  std::int64_t writes = 0;
  std::int64_t overflow_writes = 0;  // writes that saturated at least one value
  std::int64_t clamped = 0;          // predictions clamped to the legal iwl range
  std::uint64_t saturated = 0;       // values saturated over all writes
  std::uint64_t nan_count = 0;       // NaN values stored as 0 over all writes
  int min_iwl = 0, max_iwl = 0;      // the iwls the writes used (0, 0 before any write)
  int next_iwl = 0;                  // what the next write uses (after the first)
  // The AutoflexWriteLabel in force at the write that first stored a NaN (-1: none did, or it
  // was unlabelled).
  std::int64_t first_nan_label = -1;
};

// Labels the flex16 writes this thread makes while it lives (a training loop's step number),
// so that a manager's report can say which write first stored a NaN: the statistics of a write
// may be taken much later, when the device has finished it.
class AutoflexWriteLabel {
 public:
  explicit AutoflexWriteLabel(std::int64_t label);
  ~AutoflexWriteLabel();
  AutoflexWriteLabel(const AutoflexWriteLabel&) = delete;
  AutoflexWriteLabel& operator=(const AutoflexWriteLabel&) = delete;

 private:
  std::int64_t previous_;
};

// Data-parallel training: each process writes its shard of a tensor (its part of the batch), and
// every process must store it at the exponent one process writing the whole tensor would pick.
// While a ShardedWrites lives, this thread's flex16 writes agree through its ShardAgreement: an
// `exact` write's measured range and the statistics an Autoflex manager records are combined
// over the processes (maxima and sums, so the order of the processes does not matter) before
// they decide an exponent. Every process must then make the same writes in the same order.
class ShardAgreement {
 public:
  virtual ~ShardAgreement() = default;
  // Every process's `bytes` bytes, in rank order, into `all` (processes() · bytes).
  virtual void all_gather(const void* mine, void* all, std::size_t bytes) = 0;
  virtual int processes() const = 0;
};

class ShardedWrites {
 public:
  explicit ShardedWrites(ShardAgreement& agreement);
  ~ShardedWrites();
  ShardedWrites(const ShardedWrites&) = delete;
  ShardedWrites& operator=(const ShardedWrites&) = delete;

 private:
  ShardAgreement* previous_;
};

namespace detail {
class PendingFlex16Stats;
}

// A handle, as Array is: copies share one manager, and const methods may still record into it.
class Autoflex {
 public:
  Autoflex();
  const portable::AutoflexState& state() const;
  AutoflexReport report() const;
  // Back to no history: the next write takes the exact iwl again.
  void reset() const;
  // Takes over a saved history (a checkpoint's `state()`): what is pending is dropped, and the
  // next write continues as the saved manager's would have.
  void restore(const portable::AutoflexState& state) const;
  // Feeds one write's statistics (what every flex16 write does under IwlPolicy::autoflex).
  void record(int written_iwl, const Flex16Stats& stats) const;
  // The same for statistics a device may still be computing: they are taken (waited for) at the
  // manager's next use — the next write's planning, a report — so that a write never waits for
  // its own kernel.
  void record_pending(int written_iwl, std::shared_ptr<detail::PendingFlex16Stats> stats) const;
  bool operator==(const Autoflex& other) const { return shared_ == other.shared_; }

 private:
  struct Shared;
  std::shared_ptr<Shared> shared_;
  void settle() const;
};

// Managers by name, each made on first use; copies share them. A call that writes several
// flex16 arrays at once (a neuron's output, state and residual sequences) keeps one manager
// per array here, so that the next call with the same set continues every history.
class AutoflexSet {
 public:
  AutoflexSet();
  Autoflex operator[](const std::string& name) const;
  std::vector<std::pair<std::string, Autoflex>> entries() const;  // by name

 private:
  std::shared_ptr<std::map<std::string, Autoflex>> managers_;
};

}  // namespace flexkit
