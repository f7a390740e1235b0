// The CUDA form of a FlexSN step kernel (ir/step_kernel.hpp): the kernel parameter struct the
// generated program and the launcher share, and the slot limits it implies. Initial values of
// carried slots are parameters, so kernels that differ only in them share one program (the cache
// key is snn::step_kernel_structure).
#pragma once
#include <cstdint>
#include <string>

#include "flexkit/portable/strided_layout.hpp"
#include "ir/step_kernel.hpp"

namespace flexkit::snn {

// The generated CUDA program for a kernel (what run_step_kernel_cuda compiles; Neuron::cuda_source
// shows it). Built with the CUDA backend only. fixed_steps > 0 builds T into the program (the
// launch's T must then be that one): its step loops unroll, and a replay keeps its values in
// registers instead of local memory.
std::string cuda_step_kernel_source(const StepKernel& kernel, std::int64_t fixed_steps = 0);

}  // namespace flexkit::snn

namespace flexkit::codegen {

// The two kernels a step-kernel program exports: one neuron per thread, and four neighbouring
// neurons per thread moved as one vector word per sequence (N and inner multiples of 4, aligned
// data).
inline constexpr const char* kStepKernelEntry = "flexkit_step_kernel";
inline constexpr const char* kStepKernelEntryVec4 = "flexkit_step_kernel_vec4";
// Slots of each kind (seq_in, seq_out, carried, params) one kernel may have: the parameter
// struct holds fixed arrays of this size (under 1 KiB in all, well inside the 4 KiB limit).
inline constexpr int kStepMaxSlots = 16;
// Threads per block the generated kernel is built for (__launch_bounds__); launches use this
// or a smaller multiple of 32.
inline constexpr int kStepMaxBlock = 256;

// The kernel's only parameter, passed by value. The generated source declares the same struct
// (with typed stats pointers) and checks its size against this one.
struct StepKernelArgs {
  std::int64_t neurons;          // N
  std::int64_t steps;            // T
  std::int64_t inner;            // sequences are [outer, T, inner] (inner = N: [T, N])
  std::int64_t channel_neurons;  // neurons per channel of per-channel params (else 1)
  std::int64_t final_group;      // 1 or snn::kFinalGroup (summed_in_groups carried finals)
  const void* seq_in[kStepMaxSlots];
  void* seq_out[kStepMaxSlots];
  void* seq_out_stats[kStepMaxSlots];        // zeroed ExprStats per flex16 seq_out, else null
  const float* carried_init[kStepMaxSlots];  // null: carried_init_value
  float* carried_final[kStepMaxSlots];       // null: not stored
  const float* params[kStepMaxSlots];        // [N] or [1]
  float carried_init_value[kStepMaxSlots];
  std::int32_t seq_in_iwl[kStepMaxSlots];   // flex16 slots
  std::int32_t seq_out_iwl[kStepMaxSlots];  // flex16 slots
  const void* pool_source;                  // u8: the pooled slot's pool input (or null)
  std::int64_t pool_height;                 // its images (snn::StepKernelLaunch)
  std::int64_t pool_width;
  // Multiply-high dividers by inner, channel_neurons, pool_width and pool_height, used where
  // every neuron index fits 31 bits (index32); else the kernel divides in 64 bits.
  portable::IndexDivider inner_divider;
  portable::IndexDivider channel_divider;
  portable::IndexDivider pool_width_divider;
  portable::IndexDivider pool_height_divider;
  std::int32_t index32;
  std::int32_t unused;
};
static_assert(sizeof(StepKernelArgs) == 1064, "the generated programs assume this layout");

// Throws UnsupportedError when `kernel` has more slots of a kind than kStepMaxSlots, DTypeError
// for a sequence dtype other than f32, bf16, flex16 and u8, ValueError when it is malformed (an
// operand that is not an earlier instruction, a slot that does not exist, output lists of the wrong
// length).
void check_step_kernel(const snn::StepKernel& kernel);

}  // namespace flexkit::codegen
