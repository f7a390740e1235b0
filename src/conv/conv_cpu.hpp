// The CPU convolution kernels. ConvPlan's calls check and normalise their arguments into a
// ConvProblem (3 spatial dims, strides in elements) and run one of these.
//
// fprop and bprop are lowered onto gemm_cpu one block of output positions at a time: a packed
// filter matrix times a lowered block of the input (im2col) or of the gradient (a gather form of
// the transposed convolution, so no two threads ever add into one element). Each block holds the
// whole reduction, so every output is one exact integer sum finished once by the portable
// epilogue. update reduces over the batch and every output position, far too long to lower at
// once, so it drives the GEMM microkernels directly into int64 (or f32) accumulators over
// bounded chunks of positions, and finishes them through the same epilogue.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backend/conv_problem.hpp"

namespace flexkit::conv {

// Each returns the merged statistics (gemm_stats_identity() for f32 products).
portable::GemmStats fprop_cpu(const ConvProblem& problem);
portable::GemmStats bprop_cpu(const ConvProblem& problem);
portable::GemmStats update_cpu(const ConvProblem& problem);

// Scratch bytes the lowered blocks of one call take (operand elements of `element_bytes`).
std::size_t fprop_workspace_bytes(const Geometry& g, std::size_t element_bytes);
std::size_t bprop_workspace_bytes(const Geometry& g, std::size_t element_bytes);
std::size_t update_workspace_bytes(const Geometry& g, std::size_t element_bytes);

}  // namespace flexkit::conv
