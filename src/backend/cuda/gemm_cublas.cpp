// f32 matrix products through cuBLAS, and the synchronous wrapper of the integer kernels.
//
// Deep, thin products — a weight gradient summed over every position and sample, a few hundred
// outputs a hundred thousand products deep — give cuBLAS a handful of output tiles for the whole
// GPU, and it runs them on a few thread blocks for milliseconds. Such a product is split along k
// into equal chunks, run as one strided-batched product into a workspace, and the partial
// products are summed in a fixed order by one kernel (so a run repeats bit for bit).
//
// cuBLAS is column-major. A logical r×c matrix with element strides (rs, cs) is a cuBLAS
// operand as it is when rs == 1 (op N, ld = cs), or as the transpose of a column-major c×r
// matrix when cs == 1 (op T, ld = rs). The output decides the orientation: with unit column
// stride we compute Cᵀ = Bᵀ·Aᵀ instead of C = A·B.
#include <cublas_v2.h>

#include <algorithm>
#include <compare>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "backend/cuda/check.hpp"
#include "backend/cuda/gemm/gemm_integer.hpp"
#include "backend/cuda/gemm/split_k_sum.hpp"
#include "backend/cuda/gemm_cuda_calls.hpp"
#include "backend/cuda/launch_support.hpp"
#include "backend/cuda/pending_stats.hpp"
#include "core/text.hpp"
#include "flexkit/error.hpp"

namespace flexkit::gemm {
namespace {

void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw CudaError(detail::cat("dot: ", what, " failed: ", cublasGetStatusName(status), " (",
                                cublasGetStatusString(status), ")"));
}

// One handle per device, made on first use and kept for the process (cuBLAS handles are costly
// to create and may be shared by threads that serialise on the mutex).
cublasHandle_t handle_for(int device) {
  static std::mutex mutex;
  static std::map<int, cublasHandle_t> handles;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = handles.find(device); it != handles.end()) return it->second;
  backend::cuda::DeviceGuard guard(device);
  cublasHandle_t h = nullptr;
  check_cublas(cublasCreate(&h), "cublasCreate");
  // Plain IEEE f32 products: no TF32 (cuBLAS's default math mode, stated for clarity).
  check_cublas(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  handles.emplace(device, h);
  return h;
}

struct CublasOperand {
  cublasOperation_t op;
  long long ld;
};

// See the file comment. Size-1 dimensions leave their stride free.
bool as_cublas(std::int64_t rows, std::int64_t cols, std::int64_t rs, std::int64_t cs,
               CublasOperand& out) {
  if ((rs == 1 || rows == 1) && (cols == 1 || cs >= rows) && cs >= 0) {
    out = {CUBLAS_OP_N, cols == 1 ? std::max<std::int64_t>(rows, 1) : cs};
    return true;
  }
  if ((cs == 1 || cols == 1) && (rows == 1 || rs >= cols) && rs >= 0) {
    out = {CUBLAS_OP_T, rows == 1 ? std::max<std::int64_t>(cols, 1) : rs};
    return true;
  }
  return false;
}

// The problem class of an f32 product: cuBLAS takes every shape; only whether it takes the
// layout as it is (or dot() stages it) tells two classes apart.
struct F32Key {
  int device;
  std::int64_t batch, m, n, k;
  bool staged;
  auto operator<=>(const F32Key&) const = default;
  std::string describe() const {
    return detail::cat("batch ", batch, " m ", m, " n ", n, " k ", k, ", f32, device ", device);
  }
};

// The plan of an f32 class: cuBLAS as it is, or split along k (see the file comment).
struct F32Plan : backend::HeavyOpPlan {
  std::int64_t chunk = 0;  // > 0: k split into chunks this deep (the last one may be shorter)
};

// Splitting pays where the output has fewer tiles (of cuBLAS's 128 × 128) than the GPU has
// multiprocessors and k is deep: enough chunks for two blocks a multiprocessor, each at least
// 2048 deep (the workspace, parts × m × n floats, stays small beside the operands).
constexpr std::int64_t kSplitMinDepth = 8192, kSplitMinChunk = 2048, kSplitMaxParts = 64;

F32Plan make_f32_plan(const F32Key& key) {
  F32Plan plan;
  plan.kernel_name = "cuda.cublas_f32";
  plan.choices =
      key.staged ? "sgemm strided batched, through contiguous copies" : "sgemm strided batched";
  if (key.staged || key.batch != 1 || key.k < kSplitMinDepth) return plan;
  const std::int64_t tiles = ((key.m + 127) / 128) * ((key.n + 127) / 128);
  const std::int64_t sms = backend::cuda::multiprocessors(key.device);
  if (tiles >= sms) return plan;
  const std::int64_t parts =
      std::min({(2 * sms + tiles - 1) / tiles, kSplitMaxParts, key.k / kSplitMinChunk});
  if (parts < 2) return plan;
  // Chunks of a multiple of 32 elements keep every chunk's start as aligned as the operand's.
  plan.chunk = ((key.k + parts - 1) / parts + 31) / 32 * 32;
  const std::int64_t full = key.k / plan.chunk, rest = key.k - full * plan.chunk;
  plan.kernel_name = "cuda.cublas_f32_split_k";
  plan.choices =
      detail::cat("sgemm strided batched over ", full, " chunks of k ", plan.chunk,
                  rest ? detail::cat(" and one of ", rest) : std::string(), ", summed in order");
  plan.workspace_bytes =
      static_cast<std::size_t>((full + (rest > 0)) * key.m * key.n) * sizeof(float);
  return plan;
}

const F32Plan& f32_plan(const GemmProblem& p, int device, bool staged) {
  static backend::PlanCache<F32Key, F32Plan> cache("dot");
  const F32Key key{device, p.batch, p.m, p.n, p.k, staged};
  return cache.get(key, [&] { return make_f32_plan(key); });
}

}  // namespace

const backend::HeavyOpPlan& gemm_cuda_plan(const GemmProblem& p, int device) {
  if (p.a.kind == ElementKind::f32) return f32_plan(p, device, !cublas_accepts(p));
  return gemm_integer_cuda_plan(p, device);
}

bool cublas_accepts(const GemmProblem& p) {
  CublasOperand x{CUBLAS_OP_N, 0};
  bool c_direct = as_cublas(p.m, p.n, p.c.row_stride, p.c.col_stride, x) && x.op == CUBLAS_OP_N;
  bool c_transposed = as_cublas(p.n, p.m, p.c.col_stride, p.c.row_stride, x) && x.op == CUBLAS_OP_N;
  return (c_direct || c_transposed) && as_cublas(p.m, p.k, p.a.row_stride, p.a.col_stride, x) &&
         as_cublas(p.k, p.n, p.b.row_stride, p.b.col_stride, x) && p.a.batch_stride >= 0 &&
         p.b.batch_stride >= 0 && p.c.batch_stride >= 0;
}

namespace {

// One cuBLAS call for the whole (batched) problem.
void sgemm(const GemmProblem& p, int device, void* stream) {
  backend::cuda::DeviceGuard guard(device);
  cublasHandle_t h = handle_for(device);
  check_cublas(cublasSetStream(h, static_cast<cudaStream_t>(stream)), "cublasSetStream");
  // Orientation: X = L·R with X column-major (rows × cols, ldc).
  std::int64_t rows = p.m, cols = p.n;
  MatrixRef left = p.a, right = p.b;
  CublasOperand c_op{CUBLAS_OP_N, 0};
  long long ldc = 0;
  if (as_cublas(p.m, p.n, p.c.row_stride, p.c.col_stride, c_op) && c_op.op == CUBLAS_OP_N) {
    ldc = c_op.ld;
  } else {
    as_cublas(p.n, p.m, p.c.col_stride, p.c.row_stride, c_op);
    ldc = c_op.ld;
    rows = p.n;
    cols = p.m;
    left = {p.b.data, p.b.kind, p.b.col_stride, p.b.row_stride, p.b.batch_stride};
    right = {p.a.data, p.a.kind, p.a.col_stride, p.a.row_stride, p.a.batch_stride};
  }
  CublasOperand l{CUBLAS_OP_N, 0}, r{CUBLAS_OP_N, 0};
  if (!as_cublas(rows, p.k, left.row_stride, left.col_stride, l) ||
      !as_cublas(p.k, cols, right.row_stride, right.col_stride, r))
    throw ValueError(
        "dot: internal error: an f32 operand reached cuBLAS with a layout it cannot "
        "take");
  float alpha = p.alpha, beta = p.beta;
  check_cublas(cublasSgemmStridedBatched(
                   h, l.op, r.op, static_cast<int>(rows), static_cast<int>(cols),
                   static_cast<int>(p.k), &alpha, static_cast<const float*>(left.data),
                   static_cast<int>(l.ld), left.batch_stride, static_cast<const float*>(right.data),
                   static_cast<int>(r.ld), right.batch_stride, &beta, static_cast<float*>(p.c.data),
                   static_cast<int>(ldc), p.c.batch_stride, static_cast<int>(p.batch)),
               "cublasSgemmStridedBatched");
}

// The k chunks into a workspace (one batched call, and one more for a shorter last chunk), then
// their ordered sum into the output with alpha and beta.
void split_k(const GemmProblem& p, const F32Plan& plan, int device, void* stream) {
  const std::int64_t full = p.k / plan.chunk, rest = p.k - full * plan.chunk;
  const std::int64_t mn = p.m * p.n;
  backend::cuda::Scratch workspace(device, plan.workspace_bytes);
  auto* partials = static_cast<float*>(workspace.get());
  GemmProblem chunks = p;
  chunks.batch = full;
  chunks.k = plan.chunk;
  chunks.a.batch_stride = plan.chunk * p.a.col_stride;
  chunks.b.batch_stride = plan.chunk * p.b.row_stride;
  chunks.c = {partials, ElementKind::f32, p.n, 1, mn};
  chunks.alpha = 1.0f;
  chunks.beta = 0.0f;
  sgemm(chunks, device, stream);
  if (rest > 0) {
    GemmProblem last = chunks;
    last.batch = 1;
    last.k = rest;
    last.a.data = static_cast<const float*>(p.a.data) + full * plan.chunk * p.a.col_stride;
    last.b.data = static_cast<const float*>(p.b.data) + full * plan.chunk * p.b.row_stride;
    last.c.data = partials + full * mn;
    sgemm(last, device, stream);
  }
  backend::cuda::split_k_sum(partials, full + (rest > 0), p.m, p.n, static_cast<float*>(p.c.data),
                             p.c.row_stride, p.c.col_stride, p.alpha, p.beta,
                             backend::cuda::multiprocessors(device),
                             static_cast<cudaStream_t>(stream));
}

}  // namespace

void gemm_f32_cuda(const GemmProblem& p, int device, void* stream) {
  const F32Plan& plan = f32_plan(p, device, false);  // made (and logged) once per class
  if (plan.chunk > 0)
    split_k(p, plan, device, stream);
  else
    sgemm(p, device, stream);
}

ExactStats gemm_integer_cuda_stats(const GemmProblem& p, int device, void* stream) {
  backend::cuda::DeviceGuard guard(device);
  backend::cuda::DeviceStatsRecord stats(device, static_cast<cudaStream_t>(stream));
  gemm_integer_cuda(p, device, stream, stats.device_record());
  return stats.finish(p.mode == EpilogueMode::measure);
}

}  // namespace flexkit::gemm
