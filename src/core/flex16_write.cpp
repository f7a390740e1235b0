#include "core/flex16_write.hpp"

#include "core/shard_agreement.hpp"
#include "core/storage.hpp"
#include "core/text.hpp"
#include "flexkit/error.hpp"

namespace flexkit {

namespace {
thread_local std::int64_t t_write_label = -1;  // AutoflexWriteLabel's
}  // namespace

AutoflexWriteLabel::AutoflexWriteLabel(std::int64_t label) : previous_(t_write_label) {
  t_write_label = label;
}

AutoflexWriteLabel::~AutoflexWriteLabel() {
  t_write_label = previous_;
}

struct Autoflex::Shared {
  portable::AutoflexState state = portable::autoflex_initial();
  int pending_iwl = 0;
  std::int64_t pending_label = -1;
  std::shared_ptr<detail::PendingFlex16Stats>
      pending;                        // a recorded write's statistics, not yet taken
  std::int64_t first_nan_label = -1;  // the label of the first write that stored a NaN
  void take(int iwl, const Flex16Stats& stats, std::int64_t label) {
    portable::autoflex_record(state, iwl, stats.max_abs_m, stats.saturated, stats.nan_count);
    if (stats.nan_count != 0 && first_nan_label < 0) first_nan_label = label;
  }
};

Autoflex::Autoflex() : shared_(std::make_shared<Shared>()) {}

void Autoflex::settle() const {
  if (!shared_->pending) return;
  const Flex16Stats stats = shared_->pending->wait();
  shared_->pending.reset();
  shared_->take(shared_->pending_iwl, stats, shared_->pending_label);
}

const portable::AutoflexState& Autoflex::state() const {
  settle();
  return shared_->state;
}

void Autoflex::reset() const {
  shared_->pending.reset();
  shared_->state = portable::autoflex_initial();
  shared_->first_nan_label = -1;
}

void Autoflex::restore(const portable::AutoflexState& state) const {
  shared_->pending.reset();
  shared_->state = state;
  shared_->first_nan_label = -1;
}

void Autoflex::record(int written_iwl, const Flex16Stats& stats) const {
  settle();
  shared_->take(written_iwl, stats, t_write_label);
}

void Autoflex::record_pending(int written_iwl,
                              std::shared_ptr<detail::PendingFlex16Stats> stats) const {
  settle();
  shared_->pending_iwl = written_iwl;
  shared_->pending_label = t_write_label;
  shared_->pending = std::move(stats);
}

AutoflexSet::AutoflexSet() : managers_(std::make_shared<std::map<std::string, Autoflex>>()) {}

Autoflex AutoflexSet::operator[](const std::string& name) const {
  return (*managers_)[name];
}

std::vector<std::pair<std::string, Autoflex>> AutoflexSet::entries() const {
  return {managers_->begin(), managers_->end()};
}

AutoflexReport Autoflex::report() const {
  const portable::AutoflexState& s = state();
  AutoflexReport r;
  r.writes = s.writes;
  r.overflow_writes = s.overflows;
  r.clamped = s.clamped;
  r.saturated = s.saturated;
  r.nan_count = s.nan_count;
  if (s.writes > 0) {
    r.min_iwl = s.min_iwl;
    r.max_iwl = s.max_iwl;
  }
  r.next_iwl = s.iwl;
  r.first_nan_label = shared_->first_nan_label;
  return r;
}

namespace detail {

bool covers_part_of_storage(const Array& out) {
  return out.nbytes() != ArrayAccess::storage(out).bytes();
}

void rescale_storage(const Array& out, int to) {
  Storage& storage = ArrayAccess::storage(out);
  const int from = storage.iwl;
  if (from == to) return;
  const auto n = static_cast<std::int64_t>(storage.bytes() / sizeof(std::int16_t));
  // A second view of the same memory at the old exponent, read element by element while the
  // storage is rewritten at the new one (each element is read before it is written).
  const Array old = Array::from_external(storage.data(), DType::flex16, {n}, {1}, storage.device(),
                                         ArrayAccess::storage_ptr(out), false, from);
  Array all = ArrayAccess::make(ArrayAccess::storage_ptr(out), DType::flex16, {n}, {1}, 0, true);
  storage.iwl = to;
  assign(all, Expr(old));
}

Flex16WritePlan plan_flex16_write(const Array& out, IwlPolicy policy, std::optional<int> iwl,
                                  const char* operation) {
  Flex16WritePlan plan{policy, iwl, std::nullopt};
  if (policy != IwlPolicy::autoflex) return plan;
  if (iwl)
    throw ValueError(cat(operation,
                         ": IwlPolicy::autoflex picks the exponent itself; an explicit iwl "
                         "goes with IwlPolicy::fixed"));
  if (!out.defined() || out.dtype() != DType::flex16) {
    plan.policy = IwlPolicy::fixed;  // nothing to manage, as `exact` on a float output
    return plan;
  }
  plan.manager = out.autoflex();
  const portable::AutoflexState& state = plan.manager->state();
  if (portable::autoflex_wants_exact(state)) {
    plan.policy = IwlPolicy::exact;
    return plan;
  }
  plan.policy = IwlPolicy::fixed;
  plan.iwl = state.iwl;
  return plan;
}

void prepare_flex16_write(const Array& out, const Flex16WritePlan& plan, bool keeps_old_values) {
  if (!plan.manager || !plan.iwl || out.size() == 0) return;
  if (keeps_old_values || covers_part_of_storage(out)) rescale_storage(out, *plan.iwl);
}

void finish_flex16_write(const Array& out, const Flex16WritePlan& plan) {
  if (!plan.manager || out.size() == 0) return;
  if (writes_are_sharded()) {  // the statistics of the whole tensor, now (waited for)
    plan.manager->record(out.iwl(), agreed_stats(out.stats()));
    return;
  }
  if (auto pending = ArrayAccess::storage(out).pending_stats())
    plan.manager->record_pending(out.iwl(), std::move(pending));
  else
    plan.manager->record(out.iwl(), out.stats());
}

}  // namespace detail
}  // namespace flexkit
