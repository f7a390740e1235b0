// placeholder until the CUDA expression backend lands
#include "backend/expr_backend.hpp"
#include "flexkit/cuda.hpp"
#include "flexkit/error.hpp"
namespace flexkit::backend::cuda {
void run_stage(const ir::Stage&) { throw UnsupportedError("expressions on cuda: not built yet"); }
}  // namespace flexkit::backend::cuda
namespace flexkit::cuda {
KernelCacheStats kernel_cache_stats() { return {}; }
void clear_kernel_memory_cache() {}
}  // namespace flexkit::cuda
