// Pieces of the convolution front end shared between its source files.
#pragma once
#include <initializer_list>

#include "conv/conv_cpu.hpp"
#include "flexkit/conv.hpp"

namespace flexkit::conv {

// The plan's geometry with 3 spatial dims (missing leading dims of size 1).
Geometry geometry_of(const ConvPlan& plan);

// Throws ValueError naming `operation` when any handle is empty.
void require_defined(const char* operation, std::initializer_list<const Array*> arrays);

}  // namespace flexkit::conv
