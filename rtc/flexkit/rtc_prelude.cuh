// Included first by every kernel flexkit compiles at run time (NVRTC): the portable codec and
// layout math shared with the host, and the spelling of an exported kernel.
#pragma once
#include "flexkit/portable/bits.hpp"
#include "flexkit/portable/config.hpp"
#include "flexkit/portable/flex16_codec.hpp"
#include "flexkit/portable/strided_layout.hpp"

// Unmangled names, so the host looks kernels up by the name it generated.
#define FLEXKIT_KERNEL extern "C" __global__
