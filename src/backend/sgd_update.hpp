// SGD's update of many parameter tensors in one pass each (one launch on CUDA for up to
// kSgdMaxTensors of them): what nn::Sgd hands the backends. The per-element rule is
// flexkit/portable/sgd.hpp; the caller has already planned every flex16 write (the exponent
// each target stores at is set on it) and records the statistics after.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "flexkit/array.hpp"
#include "flexkit/portable/sgd.hpp"

namespace flexkit::backend {

inline constexpr int kSgdMaxTensors = 16;  // per CUDA launch (the arguments travel by value)

// An array the update writes: contiguous, covering its whole storage, f32, bf16 or flex16.
// flex16 targets are written at their iwl() and hold their statistics (pending on CUDA) after.
struct SgdTarget {
  Array array;       // undefined: no such target
  int read_iwl = 0;  // flex16 targets the update also reads: the exponent of the old values
  std::optional<std::uint64_t> stochastic_seed;  // flex16: stochastic rounding from this seed
};

struct SgdTensor {
  Array grad;           // contiguous, f32, bf16 or flex16
  SgdTarget buffer;     // the momentum buffer (undefined without momentum)
  SgdTarget weight;     // the f32 master copy, or the value itself
  SgdTarget published;  // the value rounded from the master copy (undefined without one)
};

struct SgdUpdate {
  std::vector<SgdTensor> tensors;  // non-empty tensors, each storage written by one target only
  Array lr;                        // f32, one element, on the tensors' device
  double momentum = 0, weight_decay = 0;  // rounded to f32 as expression constants are
  bool nesterov = false;
  bool first_step = false;  // the buffer starts at the gradient
};

// What the kernels read of a tensor (no statistics records, no blocks yet) and the update's
// scalars with the learning rate `lr` (defined in cpu/sgd_update.cpp, for both backends).
portable::SgdTensorView sgd_view(const SgdTensor& tensor);
portable::SgdRule sgd_rule(const SgdUpdate& update, float lr);

// Tensors handed to the fused update since the process started: the tests check with it that
// the fused path runs (its results are the expressions' bits, so they cannot tell).
void count_fused_sgd_tensors(std::int64_t tensors);
std::int64_t fused_sgd_tensor_count();

// Every tensor's update on the CPU (in parallel, the same bits whatever the thread count).
void run_sgd_update_cpu(const SgdUpdate& update);
// The same on CUDA, queued on the device's current stream: one kernel per kSgdMaxTensors
// tensors. Throws UnsupportedError for flex16 targets under graph capture (their statistics
// go to the host), as expressions do.
void run_sgd_update_cuda(const SgdUpdate& update);

}  // namespace flexkit::backend
