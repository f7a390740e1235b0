// What a flex16 write combines over the processes while a ShardedWrites lives
// (flexkit/autoflex.hpp); outside one, each function returns its argument.
#pragma once
#include "flexkit/portable/flex16_codec.hpp"
#include "flexkit/portable/gemm_epilogue.hpp"

namespace flexkit::detail {

// Whether this thread's writes are inside a ShardedWrites.
bool writes_are_sharded();

// A write's statistics for the whole tensor: the largest |m|, and the saturated and NaN counts
// summed.
portable::Flex16Stats agreed_stats(const portable::Flex16Stats& mine);
// The largest magnitude over the processes (an `exact` expression or neuron write's range).
float agreed_max_abs(float mine);
// A measuring pass's record merged over the processes (an `exact` product's range).
portable::GemmStats agreed_gemm_stats(const portable::GemmStats& mine);

}  // namespace flexkit::detail
