// The structure of an assignment `out = tree` as a list of numbers, for reusing what was
// described for an earlier assignment of the same structure: the tree's ops in order, each
// leaf's dtype, shape, strides and data alignment, each reduction's axis, which leaves are the
// same view (and which scalars the same value), whether the output is read, the output's layout
// and the write's options. Two assignments with equal signatures lower to the same plan over
// operands in the same order; only data pointers, flex16 exponents and scalar values differ, and
// those are bound at launch.
#pragma once
#include <cstdint>
#include <vector>

#include "flexkit/array.hpp"
#include "flexkit/expr.hpp"
#include "ir/node.hpp"

namespace flexkit::ir {

struct AssignSignature {
  std::vector<std::int64_t> words;
  // The distinct operand views in the order make_plan gives them slots (first use in a
  // depth-first walk, arguments in order), and the distinct scalar values likewise.
  std::vector<const Array*> operands;
  std::vector<double> scalars;
  bool reads_out = false;  // some operand shares the output's storage
};

// Fills `s` for `out = root` with the resolved write options. Returns false for assignments the
// signature does not cover, which take the full planning path: operands on another device, an
// operand sharing out's storage as any view but out's own (or at all when out is flex16), exact
// flex16 exponents, non-writable or empty outputs.
bool sign_assignment(const Array& out, const NodePtr& root, const AssignOptions& options,
                     AssignSignature& s);

}  // namespace flexkit::ir
