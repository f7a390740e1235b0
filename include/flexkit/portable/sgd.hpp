// One element of SGD's update (torch.optim.SGD with momentum, Nesterov and weight decay), for
// the fused update of many tensors (src/backend/sgd_update.hpp) on the CPU and in CUDA kernels.
// It must give the bits of the expressions the optimizer otherwise assigns one after another
// (src/nn/optimizer.cpp):
//   g   = grad + wd · w                        (only when wd != 0)
//   buf = momentum · buf + g                   (g at the first step)
//   w   = w − lr · buf,  w − lr · (g + momentum · buf) (Nesterov),  w − lr · g (no momentum)
// so each is the same f32 operations in the same order (constants on the left, as `double *
// Expr` builds them), each rounded once: no fused multiply-add.
#pragma once
#include "flexkit/portable/ew_ops.hpp"

namespace flexkit::portable {

// The dtypes the fused update reads and writes.
enum SgdDType : int32_t { kSgdF32 = 0, kSgdBF16 = 1, kSgdFlex16 = 2 };

// One array the update writes (data null: none), contiguous: element i at data[i].
struct SgdTargetView {
  void* data;
  void* stats;    // CUDA: the flex16 statistics record of this write
  uint64_t seed;  // stochastic rounding: element i draws from (seed, i)
  int32_t dtype;
  int32_t read_iwl;   // flex16: the exponent the old values are read at
  int32_t write_iwl;  // flex16: the exponent the new values are stored at
  int32_t stochastic;
};

// One tensor of the update.
struct SgdTensorView {
  const void* grad;
  int64_t n;
  int32_t grad_dtype;
  int32_t grad_iwl;
  int32_t first_block;  // CUDA: the blocks [first_block, first_block + blocks) update it
  int32_t blocks;
  int32_t aligned16;        // CUDA: every array starts on a 16-byte boundary (8-wide accesses)
  SgdTargetView buffer;     // the momentum buffer (none without momentum)
  SgdTargetView weight;     // the f32 master copy, or the value itself
  SgdTargetView published;  // the value rounded from the master copy (none without one)
};

// The scalars of one update, f32 as the expressions' constants are.
struct SgdRule {
  float momentum;
  float weight_decay;
  float lr;
  bool decay;  // weight_decay != 0 (in double): the expression adds wd · w even if wd rounds to 0
  bool momentum_buffer;  // momentum != 0
  bool nesterov;
  bool first_step;  // the buffer starts at g
};

FLEXKIT_HD float sgd_load(const void* p, int32_t dtype, int32_t iwl, int64_t i) {
  if (dtype == kSgdF32) return static_cast<const float*>(p)[i];
  if (dtype == kSgdBF16) return load_bf16(static_cast<const uint16_t*>(p)[i]);
  return load_flex16(static_cast<const int16_t*>(p)[i], iwl);
}

// v encoded for `t` at an element whose index mixes to `mixed_index` (mix64(i), which
// stochastic rounding draws from): `bits` receives what is stored (the f32 bits, or the bf16 or
// flex16 code in the low 16 bits) and the value a later read of it gives is returned. flex16
// counts into `s` (max |m|, saturated, NaN) as every flex16 write does.
template <class Stats>
FLEXKIT_HD float sgd_encode(const SgdTargetView& t, uint64_t mixed_index, float v, Stats& s,
                            uint32_t& bits) {
  if (t.dtype == kSgdF32) {
    bits = float_to_bits(v);
    return v;
  }
  if (t.dtype == kSgdBF16) {
    const uint16_t b = store_bf16(v);
    bits = b;
    return load_bf16(b);
  }
  const Flex16Code c = t.stochastic ? flex16_encode_stochastic_mixed(
                                          static_cast<double>(v), t.write_iwl, t.seed, mixed_index)
                                    : flex16_encode(v, t.write_iwl);
  const int m = c.m < 0 ? -int(c.m) : int(c.m);
  s.max_abs_m = m > s.max_abs_m ? m : s.max_abs_m;
  s.saturated += c.saturated ? 1u : 0u;
  s.nan_count += is_nan(v) ? 1u : 0u;
  bits = static_cast<uint16_t>(c.m);
  return load_flex16(c.m, t.write_iwl);
}

// Stores v at element i of `t` and returns the value a later read of it gives.
template <class Stats>
FLEXKIT_HD float sgd_store(const SgdTargetView& t, int64_t i, uint64_t mixed_index, float v,
                           Stats& s) {
  uint32_t bits = 0;
  const float read_back = sgd_encode(t, mixed_index, v, s, bits);
  if (t.dtype == kSgdF32)
    static_cast<uint32_t*>(t.data)[i] = bits;
  else
    static_cast<uint16_t*>(t.data)[i] = static_cast<uint16_t>(bits);
  return read_back;
}

// Whether any target of `t` rounds stochastically (its elements' indices are then mixed).
FLEXKIT_HD bool sgd_draws(const SgdTensorView& t) {
  return t.buffer.stochastic || t.weight.stochastic || t.published.stochastic;
}

// The rule on one element's loaded values: w the weight, g the gradient, old the momentum
// buffer (unread at the first step). store(k, v) stores output k (0 the buffer, 1 the weight,
// 2 the published value, only when there is one) and returns what a later read of it gives.
template <class Store>
FLEXKIT_HD void sgd_apply(const SgdRule& r, float w, float g, float old, bool published,
                          Store&& store) {
  if (r.decay) g = fadd_rn(g, fmul_rn(r.weight_decay, w));
  float step = g;
  if (r.momentum_buffer) {
    const float buf = store(0, r.first_step ? g : fadd_rn(fmul_rn(r.momentum, old), g));
    step = r.nesterov ? fadd_rn(g, fmul_rn(r.momentum, buf)) : buf;  // the buffer read back
  }
  const float updated = store(1, fsub_rn(w, fmul_rn(r.lr, step)));
  if (published) store(2, updated);
}

// Element i of tensor `t`; stats[0..2]: the buffer's, the weight's and the published value's.
template <class Stats>
FLEXKIT_HD void sgd_element(const SgdTensorView& t, const SgdRule& r, int64_t i, Stats* stats) {
  const float w = sgd_load(t.weight.data, t.weight.dtype, t.weight.read_iwl, i);
  const float g = sgd_load(t.grad, t.grad_dtype, t.grad_iwl, i);
  const float old = r.momentum_buffer && !r.first_step
                        ? sgd_load(t.buffer.data, t.buffer.dtype, t.buffer.read_iwl, i)
                        : 0.0f;
  const SgdTargetView* targets[3] = {&t.buffer, &t.weight, &t.published};
  const uint64_t mixed = sgd_draws(t) ? mix64(static_cast<uint64_t>(i)) : 0;
  sgd_apply(r, w, g, old, t.published.data != nullptr,
            [&](int k, float v) { return sgd_store(*targets[k], i, mixed, v, stats[k]); });
}

}  // namespace flexkit::portable
