// The CPU GEMM microkernels and how the driver picks them. A microkernel multiplies one packed
// MR-row panel of A by one packed NR-column panel of B over one k block and adds the MR × NR
// result into a tile; the driver (backend/cpu/gemm_cpu.cpp) owns blocking, packing, threads and
// the epilogue, so every instruction set shares one packed layout and one summation order.
//
// Packed layouts (zero-padded past the matrix edge, so kernels never branch on it):
// - integer A panel: for each k pair p, for each row r: { a(r, 2p), a(r, 2p+1) } as int16
//   (so one int32 broadcast feeds vpmaddwd / vpdpwssd);
// - integer B panel: for each k pair p, for each plane q, for each column j:
//   { plane_q(b(2p, j)), plane_q(b(2p+1, j)) } as int16. A u8 B has one plane (the byte); a flex16
//   B has two, h = b >> 8 (weight 256) and l = b & 255 (weight 1), so that b = 256·h + l;
// - f32 A panel: for each k, MR floats; f32 B panel: for each k, NR floats.
//
// Exactness of the integer kernels (every int16 a, every int16 or u8 b, any K):
//   |a| ≤ 2^15, h ∈ [−128, 127], l ∈ [0, 255] and a u8 b ∈ [0, 255], so every product is at most
//   |a·h| ≤ 2^22 and |a·l|, |a·b_u8| ≤ 2^15·255 = 8 355 840. One vpmaddwd / vpdpwssd lane adds two
//   of them: at most 2^23 (h) or 16 711 680 (l, u8), so no pair sum ever wraps (unlike a raw
//   int16 × int16 pair, where (−2^15)² + (−2^15)² = 2^31 does). A kernel call sums at most
//   kMaxIntPairs = 128 pair sums into each int32 lane: at most 128 · 2^23 = 2^30 (h) and
//   128 · 16 711 680 = 2 139 095 040 < 2^31 − 1 (l, u8), so the int32 accumulators are exact too.
//   Each call then widens them to int64 (256·H + L for two planes) and adds into the int64 tile,
//   whose magnitude stays ≤ K · 2^30: exact for K < 2^33.
#pragma once
#include <cstdint>

#include "backend/cpu/gemm/gemm_pack.hpp"
#include "backend/gemm_problem.hpp"
#include "backend/heavy_op_plan.hpp"

namespace flexkit::backend::cpu::gemm_detail {

// Most k pairs one integer kernel call may take (the int32 bound above); 256 k values.
inline constexpr std::int64_t kMaxIntPairs = 128;

// tile[r·ldc + j] (+)= Σ_p Σ_q weight_q · (a-pair · b-pair) over `pairs` k pairs; accumulate
// false stores instead of adding.
using IntKernelFn = void (*)(std::int64_t pairs, const std::int16_t* a, const std::int16_t* b,
                             std::int64_t* tile, std::int64_t ldc, bool accumulate);
// tile[r·ldc + j] = fma chain over k = 0..k−1 (in order), starting from the tile (accumulate)
// or from +0. Every instruction set runs the same chain, so f32 results do not depend on it.
using F32KernelFn = void (*)(std::int64_t k, const float* a, const float* b, float* tile,
                             std::int64_t ldc, bool accumulate);

// The statistics of one rounded row: the largest |m| and how many elements saturated.
struct RowStats {
  std::int32_t max_abs = 0;
  std::int32_t saturated = 0;
};
// m[j] = gemm_flex16_result(e, acc[j], 0).m for j < nv (≤ 64), and the row's statistics, for an
// integer-only epilogue with 0 < e.scale < 63 (the driver checks). Straight-line vector code
// instead of the portable rounding's data-dependent branch per element (which mispredicts about
// half the time) and a separate statistics pass: with a 64-deep reduction this epilogue had
// taken twice as long as the products.
using RoundRowFn = RowStats (*)(const portable::GemmEpilogue& e, const std::int64_t* acc, int nv,
                                std::int16_t* m);
// The same through the portable rule, element by element, for any flex16 epilogue that reads no
// old value (the scalar kernel set's round_row, and the driver's path for the other epilogues).
RowStats round_row_portable(const portable::GemmEpilogue& e, const std::int64_t* acc, int nv,
                            std::int16_t* m);

// The same from one call's plane sums (IntPlanesFn), for a product whose whole K is one call:
// acc = 256·h[j] + l[j] with two planes, acc = h[j] with one (l null). The rounding then runs
// in 32-bit lanes, twice as many per vector, and the int64 tile is never written. Taken where
// planes_round_fits holds.
using RoundPlanesRowFn = RowStats (*)(const portable::GemmEpilogue& e, const std::int32_t* h,
                                      const std::int32_t* l, int nv, std::int16_t* m);
// Two planes: 256·h + l + 2^(s−1) = 256·(h + (l >> 8) + 2^(s−9)) + (l mod 256), whose middle term
// stays inside int32 for 9 ≤ s ≤ 38 (|h| ≤ 2^30, |l| < 2^31). One plane: RNE in int32 for
// 1 ≤ s ≤ 31 (gemm_round_int32).
inline bool planes_round_fits(const portable::GemmEpilogue& e, int planes) {
  return e.integer_only &&
         (planes == 2 ? e.scale >= 9 && e.scale <= 38 : e.scale >= 1 && e.scale <= 31);
}

// The int32 sums of one call (≤ kMaxIntPairs pairs), not widened: sums[(q·MR + r)·NR + j] for
// plane q (0: the high plane, weight 256; 1: the low plane, or a u8 B's only plane).
using IntPlanesFn = void (*)(std::int64_t pairs, const std::int16_t* a, const std::int16_t* b,
                             std::int32_t* sums);

// pack_a_int / pack_b_int for an int16 B (gemm_pack.hpp) or an instruction set's faster form of
// them, as F32PackFn below.
using IntPackFn = void (*)(StridedBlock<std::int16_t>, std::int64_t, std::int64_t, int,
                           std::int16_t*);
struct IntKernel {
  int mr = 0, nr = 0, planes = 0;
  IntKernelFn fn = nullptr;
  IntPlanesFn planes_fn = nullptr;  // optional: the single-k-block store path
  IntPackFn pack_a = &pack_a_int;   // (a, rows, kv, mr, dst)
  IntPackFn pack_b = &pack_b_int;   // (b, kv, cols, nr, dst): an int16 B (a u8 B: pack_b_int)
};
// pack_a_f32 / pack_b_f32 (gemm_pack.hpp) or an instruction set's faster form of them: the same
// panels, bit for bit. The vector forms take the transposing cases, blocks whose k values lie
// contiguous in memory (a row-major A, the filter-gradient's operands), where the portable pack
// moves one element at a time.
using F32PackFn = void (*)(StridedBlock<float>, std::int64_t, std::int64_t, int, float*);
struct F32Kernel {
  int mr = 0, nr = 0;
  F32KernelFn fn = nullptr;
  F32PackFn pack_a = nullptr;  // (a, rows, kv, mr, dst)
  F32PackFn pack_b = nullptr;  // (b, kv, cols, nr, dst)
};

// The kernels of one instruction set: flex16 × u8 (one plane), flex16 × flex16 (two), f32.
struct KernelSet {
  IntKernel u8;
  IntKernel flex16;
  F32Kernel f32;
  RoundRowFn round_row = nullptr;
  RoundPlanesRowFn round_planes_row = nullptr;  // with the kernels' planes_fn
};

enum class GemmIsa : std::uint8_t { scalar, avx2, avx512 };

KernelSet scalar_kernels();
KernelSet avx2_kernels();    // AVX2 + FMA
KernelSet avx512_kernels();  // AVX-512 F/BW/DQ/VL + VNNI

// The kernel sets are the CPU's plan candidates, fastest first (gemm_cpu_plan.cpp): each one's
// name ("cpu.avx512_vnni", "cpu.avx2", "cpu.scalar"), and whether it runs here when `cap` is the
// fastest set allowed (FLEXKIT_GEMM_ISA, or a test's chosen set).
const char* isa_kernel_name(GemmIsa isa);
backend::CanImplement can_implement_isa(GemmIsa isa, GemmIsa cap);
// The first candidate that applies under `cap`; the faster ones passed over go into `plan`.
GemmIsa choose_isa(GemmIsa cap, backend::HeavyOpPlan& plan);

// FLEXKIT_GEMM_ISA=scalar|avx2|avx512 (read once), the fastest set allowed; unset, avx512.
GemmIsa gemm_isa_cap();
// The set the planner picks under that cap: the best this CPU runs, capped.
GemmIsa gemm_isa();
// What the hardware alone supports.
GemmIsa gemm_hardware_isa();
KernelSet kernels_for(GemmIsa isa);

// gemm_cpu with a chosen instruction set (lowered to what the hardware supports): the tests use
// it to check that the scalar and SIMD paths agree bit for bit.
portable::GemmStats gemm_cpu_with_isa(const gemm::GemmProblem& problem, GemmIsa isa);

}  // namespace flexkit::backend::cpu::gemm_detail
