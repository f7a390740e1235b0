// What a backend provides to run planned expression stages (see ir/plan.hpp). A stage's target
// has the stage's dtype rules applied on store; flex16 targets are written at the target's
// current iwl (IwlPolicy::fixed; the executor resolves `exact` before calling) and the backend
// records the write's statistics (max |m|, saturated, NaN) into the target's storage.
#pragma once
#include "ir/plan.hpp"

namespace flexkit::backend {

namespace cpu {
void run_stage(const ir::Stage& stage);
}

namespace cuda {
void run_stage(const ir::Stage& stage);
}

}  // namespace flexkit::backend
