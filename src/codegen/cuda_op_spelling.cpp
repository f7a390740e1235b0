// The one spelling of IR ops and dtypes in generated CUDA C++ (see cuda_op_spelling.hpp).
#include "codegen/cuda_op_spelling.hpp"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "core/text.hpp"
#include "flexkit/error.hpp"
#include "flexkit/portable/neuron_ops.hpp"

namespace flexkit::codegen {

using detail::cat;
using ir::Op;
using ir::Surrogate;

namespace {

// The generated code names surrogates by the portable enumerators, which must stay in step
// with Surrogate.
static_assert(int(Surrogate::kSigmoid) == portable::kSurrogateSigmoid &&
              int(Surrogate::kAtan) == portable::kSurrogateAtan &&
              int(Surrogate::kPiecewiseQuadratic) == portable::kSurrogatePiecewiseQuadratic &&
              int(Surrogate::kPiecewiseExp) == portable::kSurrogatePiecewiseExp &&
              int(Surrogate::kSoftSign) == portable::kSurrogateSoftSign &&
              int(Surrogate::kSuperSpike) == portable::kSurrogateSuperSpike &&
              int(Surrogate::kErf) == portable::kSurrogateErf);

const char* surrogate_enumerator(Surrogate s) {
  switch (s) {
    case Surrogate::kSigmoid:
      return "kSurrogateSigmoid";
    case Surrogate::kAtan:
      return "kSurrogateAtan";
    case Surrogate::kPiecewiseQuadratic:
      return "kSurrogatePiecewiseQuadratic";
    case Surrogate::kPiecewiseExp:
      return "kSurrogatePiecewiseExp";
    case Surrogate::kSoftSign:
      return "kSurrogateSoftSign";
    case Surrogate::kSuperSpike:
      return "kSurrogateSuperSpike";
    case Surrogate::kErf:
      break;
  }
  return "kSurrogateErf";
}

}  // namespace

// An exact float in device code: a hex literal (no decimal rounding involved), or the bit
// pattern for infinities and NaNs, which have no literal.
std::string float_literal(float v) {
  if (v != v || v - v != 0.0f) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, &v, sizeof bits);
    char buf[40];
    std::snprintf(buf, sizeof buf, "bits_to_float(0x%08xu)", static_cast<unsigned>(bits));
    return buf;
  }
  char buf[48];
  char* p = buf;
  if (std::signbit(v)) *p++ = '-';
  *p++ = '0';
  *p++ = 'x';
  const auto r = std::to_chars(p, buf + sizeof buf - 1, std::fabs(v), std::chars_format::hex);
  *r.ptr = 'f';
  return std::string(buf, r.ptr + 1);
}

const char* device_type(DType t) {
  switch (t) {
    case DType::f32:
      return "float";
    case DType::bf16:
      return "uint16_t";
    case DType::flex16:
      return "int16_t";
    case DType::u8:
      return "uint8_t";
    case DType::i32:
      return "int32_t";
    case DType::f64:
      break;
  }
  return "double";
}

std::string device_load(DType dtype, const std::string& raw, const std::string& iwl) {
  switch (dtype) {
    case DType::f32:
      return cat("load_f32(", raw, ")");
    case DType::bf16:
      return cat("load_bf16(", raw, ")");
    case DType::flex16:
      return cat("load_flex16(", raw, ", ", iwl, ")");
    case DType::u8:
      return cat("load_u8(", raw, ")");
    case DType::i32:
      return cat("load_i32(", raw, ")");
    case DType::f64:
      break;
  }
  return cat("load_f64(", raw, ")");
}

std::string device_store(DType dtype, const std::string& value, const std::string& iwl,
                         const std::string& stats) {
  switch (dtype) {
    case DType::f32:
      return value;
    case DType::bf16:
      return cat("store_bf16(", value, ")");
    case DType::flex16:
      return cat("encode_flex16(", value, ", ", iwl, ", ", stats, ")");
    case DType::u8:
      return cat("store_u8(", value, ")");
    case DType::i32:
      return cat("store_i32(", value, ")");
    case DType::f64:
      break;
  }
  return cat("store_f64(", value, ")");
}

std::string device_op_call(const ir::Instr& in, const std::string& a, const std::string& b,
                           const std::string& c) {
  const ir::OpInfo& info = ir::op_info(in.op);
  if (info.kind != ir::OpKind::elementwise)
    throw ValueError(cat("cuda code generator: ", info.name, " is not an elementwise op"));
  if (in.op == Op::detach) return a;  // only gradients see it; the value passes through
  if (in.op == Op::spike_grad)
    return cat("ew_surrogate_grad(", surrogate_enumerator(in.surrogate), ", ",
               float_literal(in.alpha), ", ", a, ")");
  switch (info.arity) {
    case 1:
      return cat("ew_", info.name, "(", a, ")");
    case 2:
      return cat("ew_", info.name, "(", a, ", ", b, ")");
    default:
      return cat("ew_", info.name, "(", a, ", ", b, ", ", c, ")");
  }
}

}  // namespace flexkit::codegen
