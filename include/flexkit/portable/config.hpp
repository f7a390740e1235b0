// The one place that knows which compiler is reading the code. Everything in
// include/flexkit/portable/ compiles unchanged under the host compiler, nvcc and NVRTC,
// so the flex16 codec and index math have one definition on every backend.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define FLEXKIT_HD __host__ __device__ __forceinline__
#define FLEXKIT_DEVICE_COMPILER 1
#else
#define FLEXKIT_HD inline
#define FLEXKIT_DEVICE_COMPILER 0
#endif

#if defined(__CUDA_ARCH__)
#define FLEXKIT_DEVICE_PASS 1
#else
#define FLEXKIT_DEVICE_PASS 0
#endif

#if defined(__CUDACC_RTC__)
// NVRTC has no standard headers: the fixed-width types come from its built-ins.
namespace flexkit_rtc_types {
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
}  // namespace flexkit_rtc_types
#define FLEXKIT_INT_TYPES using namespace flexkit_rtc_types;
#else
#include <cstdint>
#define FLEXKIT_INT_TYPES \
  using std::int16_t;     \
  using std::int32_t;     \
  using std::int64_t;     \
  using std::uint16_t;    \
  using std::uint32_t;    \
  using std::uint64_t;    \
  using std::uint8_t;
#endif
