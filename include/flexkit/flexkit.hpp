// Everything a flexkit user includes.
#pragma once
#include "flexkit/array.hpp"
#include "flexkit/cuda.hpp"
#include "flexkit/device.hpp"
#include "flexkit/dtype.hpp"
#include "flexkit/error.hpp"
#include "flexkit/expr.hpp"
#include "flexkit/flex16.hpp"
#include "flexkit/gemm.hpp"
#include "flexkit/index.hpp"
#include "flexkit/npy.hpp"
#include "flexkit/shape.hpp"
#include "flexkit/version.hpp"
