// The CUDA convolution kernels ConvPlan's calls run on cuda arrays: a direct formulation (no
// lowering), every output computed from one exact int64 accumulator (integer products) and
// finished through the portable GEMM epilogue, so flex16 results are bit-identical to the CPU's
// (SPEC §1). f32 products sum in one fixed order per output (deterministic, not the CPU's order).
//
// The problem is the one the CPU kernels take (conv_cpu.hpp), with device pointers.
#pragma once
#include "conv/conv_cpu.hpp"

namespace flexkit::conv {

// Each queues one direction on `stream` (a cudaStream_t) of `device`. Integer products wait for
// and return the merged statistics (EpilogueMode::measure: the measured range); f32 products
// return gemm_stats_identity() without waiting.
portable::GemmStats fprop_cuda(const ConvProblem& problem, int device, void* stream);
portable::GemmStats bprop_cuda(const ConvProblem& problem, int device, void* stream);
portable::GemmStats update_cuda(const ConvProblem& problem, int device, void* stream);

}  // namespace flexkit::conv
