// Lowering an assignment `out = tree` to stages a backend executes: straight-line programs over
// a shared iteration shape, each either elementwise (writing a view) or a reduction along one
// axis or all axes (writing a keep-dims target). Reductions that feed further computation get
// their own stage writing a temporary; everything else fuses into its consumer.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "flexkit/array.hpp"
#include "flexkit/expr.hpp"
#include "ir/node.hpp"

namespace flexkit::ir {

struct Program {
  Shape shape;                  // iteration shape: every operand is broadcast to it
  std::vector<Instr> code;      // the last instruction is the result (operand/scalar leaves)
  std::vector<Array> operands;  // views already broadcast to `shape` (0 strides), de-duplicated
  std::vector<double> scalars;  // parameters, in slot order (values never enter a cache key)
};

struct Stage {
  Program body;
  std::optional<Op> reduce;  // sum/max/min/mean/argmax/argmin; empty: elementwise
  int axis = kAllAxes;       // reductions: the axis of body.shape reduced, or kAllAxes
  // Elementwise: a view of body.shape. Reduction: body.shape with the reduced axes at 1.
  // Values are converted to the target's dtype when stored (see store rules in expr.hpp).
  Array target;
  // flex16 targets only: the exponent policy of this store, and the seed of a stochastic
  // rounding (empty: round to nearest even).
  IwlPolicy iwl_policy = IwlPolicy::fixed;
  std::optional<std::uint64_t> stochastic_seed;
};

struct Plan {
  std::vector<Stage> stages;  // run in order; later stages read earlier stages' targets
};

// Plans `out = root`. Checks devices (every operand on out's device: DeviceError), shapes
// (root broadcasts to out, leading size-1 axes may be dropped: ShapeError), writability, and
// makes aliasing safe: an operand sharing out's storage with a different layout is read from a
// snapshot copy. Temporaries are f32 (i32 for argmax/argmin) on out's device.
Plan make_plan(const Array& out, const NodePtr& root, const AssignOptions& options);

// Human-readable program text, for debugging and error messages.
std::string to_string(const Program& program);

}  // namespace flexkit::ir
