// What a backend provides to run planned expression stages (see ir/plan.hpp). A stage's target
// has the stage's dtype rules applied on store; flex16 targets are written at the target's
// current iwl (IwlPolicy::fixed; the executor resolves `exact` before calling) and the backend
// records the write's statistics (max |m|, saturated, NaN) into the target's storage.
#pragma once
#include <cstdint>
#include <memory>

#include "ir/assign_signature.hpp"
#include "ir/plan.hpp"

namespace flexkit::backend {

namespace cpu {
void run_stage(const ir::Stage& stage);
}

namespace cuda {
void run_stage(const ir::Stage& stage);
// Runs the whole plan as one kernel when its stages are reductions along one axis feeding one
// elementwise stage over the same shape (softmax, x - max(x, -1), x - max(x, 0), ...), reading
// each row or column once; returns false, having done nothing, for any other plan. With the
// assignment's signature, the description is kept for later assignments of that signature.
bool run_row_fused(const ir::Plan& plan, const ir::AssignSignature* signature = nullptr);

// Assignments described once: after a one-stage elementwise plan has run, remember_assignment
// keeps its description and launch under the assignment's signature (ir/assign_signature.hpp),
// as run_row_fused does for a fused plan; a later assignment with an equal signature finds it
// and runs it with its own pointers, exponents, scalars and seed (and new temporaries), without
// planning or describing again.
struct CachedAssignment;
std::shared_ptr<const CachedAssignment> find_assignment(const ir::AssignSignature& signature);
void remember_assignment(const ir::AssignSignature& signature, const ir::Plan& plan);
void run_assignment(const CachedAssignment& cached, const ir::AssignSignature& signature,
                    const Array& out, std::uint64_t seed);
}  // namespace cuda

}  // namespace flexkit::backend
