// How the one IR (ir/op.hpp) is spelled in generated CUDA C++: element types, loads and stores,
// and the call of each elementwise instruction. The expression generators and the step-kernel
// generator both emit through these, so an op or a dtype is spelled in one place.
#pragma once
#include <string>

#include "flexkit/dtype.hpp"
#include "ir/op.hpp"

namespace flexkit::codegen {

// The element type of `dtype` in device code ("float", "uint16_t", ...).
const char* device_type(DType dtype);
// Device expressions converting a raw element to float, and a float to a raw element (flex16
// stores count into the StatsLocal named `stats`).
std::string device_load(DType dtype, const std::string& raw, const std::string& iwl);
std::string device_store(DType dtype, const std::string& value, const std::string& iwl,
                         const std::string& stats);

// An exact float in device code: a hex literal (no decimal rounding involved), or the bit
// pattern for infinities and NaNs, which have no literal.
std::string float_literal(float v);

// The device expression of elementwise instruction `in` over its argument expressions, e.g.
// "ew_add(v1, v2)" or "ew_surrogate_grad(kSurrogateAtan, 0x1p+1f, v3)": the portable op math
// (flexkit/portable/ew_ops.hpp, neuron_ops.hpp) the CPU evaluates too. detach spells its
// argument. Throws ValueError for a leaf or a reduction.
std::string device_op_call(const ir::Instr& in, const std::string& a, const std::string& b = {},
                           const std::string& c = {});

}  // namespace flexkit::codegen
