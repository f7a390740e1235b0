// The CUDA entry points of a build without a CUDA toolkit: nothing is found, and anything that
// needs a device says why it cannot run.
#include "backend/cuda/conv/conv_direct.hpp"
#include "backend/cuda/gemm_cuda_calls.hpp"
#include "backend/expr_backend.hpp"
#include "backend/finite_check.hpp"
#include "backend/rate_loss.hpp"
#include "backend/sgd_update.hpp"
#include "core/device_memory.hpp"
#include "core/strided_ops.hpp"
#include "flexkit/cuda.hpp"
#include "flexkit/error.hpp"
#include "ir/step_kernel.hpp"

namespace flexkit {
namespace {
[[noreturn]] void unavailable(const char* operation) {
  throw UnsupportedError(std::string(operation) +
                         ": flexkit was built without CUDA (no CUDA toolkit at configure time)");
}
}  // namespace
}  // namespace flexkit

namespace flexkit::cuda {

KernelCacheStats kernel_cache_stats() {
  return {};
}
void clear_kernel_memory_cache() {}
GemmPlanStats gemm_plan_stats() {
  return {};
}
bool built_with_cuda() {
  return false;
}
int device_count() {
  return 0;
}
DeviceInfo device_info(int) {
  unavailable("device_info");
}
Versions versions() {
  return {};
}
Stream::Stream(int device) : device_(device), handle_(nullptr) {
  unavailable("Stream");
}
Stream::Stream(Stream&& other) noexcept : device_(other.device_), handle_(other.handle_) {}
Stream::~Stream() = default;
void Stream::synchronize() const {
  unavailable("Stream::synchronize");
}
StreamGuard::StreamGuard(const Stream&) : device_(0), previous_(nullptr) {
  unavailable("StreamGuard");
}
StreamGuard::StreamGuard(int, void*) : device_(0), previous_(nullptr) {
  unavailable("StreamGuard");
}
StreamGuard::~StreamGuard() = default;
void* current_stream(int) {
  unavailable("current_stream");
}
void synchronize(int) {
  unavailable("synchronize");
}
AllocatorStats allocator_stats(int) {
  return {};
}
void empty_cache() {}
void set_memory_limit(int, std::size_t) {
  unavailable("set_memory_limit");
}
void record_peak_blocks(int, bool) {
  unavailable("record_peak_blocks");
}
std::vector<std::size_t> peak_blocks(int) {
  unavailable("peak_blocks");
}
struct CapturedGraph::State {};
CapturedGraph CapturedGraph::capture(int, const std::function<void()>&) {
  unavailable("CapturedGraph::capture");
}
void CapturedGraph::replay() const {
  unavailable("CapturedGraph::replay");
}
std::size_t CapturedGraph::nodes() const {
  return 0;
}
void CapturedGraph::reset() {
  state_.reset();
}
std::size_t allocation_size_class(std::size_t bytes) {
  return bytes;
}

}  // namespace flexkit::cuda

namespace flexkit::backend::cuda {

// Asking for memory on a device that cannot exist is a device error, as on a CUDA build
// without a GPU.
void* allocate(int device, std::size_t) {
  throw DeviceError("cuda:" + std::to_string(device) +
                    " requested but no CUDA device is available (built without CUDA)");
}
void deallocate(int, void*) noexcept {}
void copy(int, const StridedDst&, const StridedSrc&, std::size_t) {
  unavailable("copy");
}
std::shared_ptr<::flexkit::detail::PendingFlex16Stats> flex16_copy(int, const StridedDst&,
                                                                   const StridedSrc&, int, int) {
  unavailable("flex16 copy");
}
void fill(int, const StridedDst&, std::uint64_t, std::size_t) {
  unavailable("fill");
}
bool upload_staged(int, void*, const void*, std::size_t) {
  return false;
}
void memcpy_bytes(Device, void*, Device, const void*, std::size_t) {
  unavailable("memcpy");
}
void run_stage(const ir::Stage&) {
  unavailable("expression on cuda");
}
bool run_row_fused(const ir::Plan&, const ir::AssignSignature*) {
  return false;
}
std::shared_ptr<const CachedAssignment> find_assignment(const ir::AssignSignature&) {
  return nullptr;
}
void remember_assignment(const ir::AssignSignature&, const ir::Plan&) {}
void run_assignment(const CachedAssignment&, const ir::AssignSignature&, const Array&,
                    std::uint64_t) {
  unavailable("expression on cuda");
}

}  // namespace flexkit::backend::cuda

namespace flexkit::backend {

void run_sgd_update_cuda(const SgdUpdate&) {
  unavailable("sgd update on cuda");
}

void record_finite_cuda(const std::vector<const void*>&, const std::vector<DType>&,
                        const std::vector<std::int64_t>&, float*, int) {
  unavailable("the finiteness check on cuda");
}

void run_rate_loss_cuda(const portable::RateLossArgs&, int) {
  unavailable("the rate loss on cuda");
}

}  // namespace flexkit::backend

namespace flexkit::snn {

void run_step_kernel_cuda(const StepKernel&, const StepKernelLaunch&) {
  unavailable("step kernel on cuda");
}

}  // namespace flexkit::snn

namespace flexkit::gemm {

bool cublas_accepts(const GemmProblem&) {
  return true;
}
const backend::HeavyOpPlan& gemm_cuda_plan(const GemmProblem&, int) {
  unavailable("dot");
}
void gemm_f32_cuda(const GemmProblem&, int, void*) {
  unavailable("dot");
}
ExactStats gemm_integer_cuda_stats(const GemmProblem&, int, void*) {
  unavailable("dot");
}

}  // namespace flexkit::gemm

namespace flexkit::conv {

const backend::HeavyOpPlan& cuda_plan(ConvDirection, const ConvProblem&, int) {
  unavailable("conv");
}
gemm::ExactStats fprop_cuda(const ConvProblem&, int, void*) {
  unavailable("conv fprop");
}
gemm::ExactStats bprop_cuda(const ConvProblem&, int, void*) {
  unavailable("conv bprop");
}
gemm::ExactStats update_cuda(const ConvProblem&, int, void*) {
  unavailable("conv update");
}

}  // namespace flexkit::conv
