// Capturing what flexkit enqueues on a stream as a CUDA graph, and replaying it.
//
// Capture runs in relaxed mode, so that the caching allocator may call cudaMalloc while the
// work is recorded. What a graph cannot hold is refused where flexkit does it (a copy between
// host and device memory, a flex16 write whose exponent the host picks: refuse_in_capture),
// and anything else CUDA refuses invalidates the capture, which then fails as a whole.
#include <cuda_runtime_api.h>

#include <array>
#include <exception>

#include "backend/cuda/check.hpp"
#include "backend/cuda/graph_capture.hpp"
#include "core/text.hpp"
#include "flexkit/cuda.hpp"
#include "flexkit/error.hpp"

namespace flexkit::backend::cuda {
namespace {

constexpr int kMaxDevices = 64;
thread_local std::array<std::uint64_t, kMaxDevices> t_capture_pool{};

}  // namespace

std::uint64_t capture_pool(int device) noexcept {
  return device >= 0 && device < kMaxDevices ? t_capture_pool[device] : 0;
}

void refuse_in_capture(int device, const char* what) {
  if (capturing(device))
    throw UnsupportedError(detail::cat(what, " on cuda:", device,
                                       " cannot be part of a captured CUDA graph (a replay would "
                                       "not repeat it)"));
}

}  // namespace flexkit::backend::cuda

namespace flexkit::cuda {

using backend::cuda::DeviceGuard;
using detail::cat;

struct CapturedGraph::State {
  int device = 0;
  std::uint64_t pool = 0;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  std::size_t nodes = 0;

  ~State() {
    DeviceGuard guard(device);
    // Launches still queued must finish before the graph goes and its memory is handed out.
    if (exec) cudaDeviceSynchronize();
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    backend::cuda::release_memory_pool(device, pool);
  }
};

CapturedGraph CapturedGraph::capture(int device, const std::function<void()>& work) {
  auto stream = static_cast<cudaStream_t>(current_stream(device));  // validates the device
  if (stream == nullptr)
    throw UnsupportedError(cat("CapturedGraph::capture: cuda:", device,
                               "'s current stream is the legacy default stream, which cannot be "
                               "captured; make a Stream current (StreamGuard)"));
  if (backend::cuda::capturing(device))
    throw UnsupportedError(cat("CapturedGraph::capture: cuda:", device, " is already capturing"));
  DeviceGuard guard(device);
  auto state = std::make_shared<State>();
  state->device = device;
  state->pool = backend::cuda::new_memory_pool(device);
  FLEXKIT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
  backend::cuda::t_capture_pool[device] = state->pool;
  std::exception_ptr failure;
  try {
    work();
  } catch (...) {
    failure = std::current_exception();
  }
  backend::cuda::t_capture_pool[device] = 0;
  const cudaError_t ended = cudaStreamEndCapture(stream, &state->graph);
  cudaGetLastError();  // a capture's errors are not sticky; the stream is usable again
  if (failure) {
    try {
      std::rethrow_exception(failure);
    } catch (const CudaError& e) {
      // CUDA refused a call while capturing: the work waits for the device or the like.
      throw UnsupportedError(cat("capturing a CUDA graph on cuda:", device,
                                 ": the work does what a graph cannot hold: ", e.what()));
    }
  }
  if (ended != cudaSuccess)
    throw UnsupportedError(cat("capturing a CUDA graph on cuda:", device, ": ",
                               cudaGetErrorName(ended), " (", cudaGetErrorString(ended), ")"));
  const cudaError_t made = cudaGraphInstantiate(&state->exec, state->graph, 0);
  if (made == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    throw OutOfMemoryError(
        cat("cuda:", device, ": out of memory instantiating a captured CUDA graph"));
  }
  FLEXKIT_CUDA_CHECK(made);
  FLEXKIT_CUDA_CHECK(cudaGraphGetNodes(state->graph, nullptr, &state->nodes));
  CapturedGraph out;
  out.state_ = std::move(state);
  return out;
}

void CapturedGraph::replay() const {
  if (!state_) throw ValueError("CapturedGraph::replay: nothing was captured");
  DeviceGuard guard(state_->device);
  auto stream = static_cast<cudaStream_t>(current_stream(state_->device));
  const cudaError_t launched = cudaGraphLaunch(state_->exec, stream);
  if (launched == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    throw OutOfMemoryError(cat("cuda:", state_->device,
                               ": out of memory launching a captured CUDA graph of ", state_->nodes,
                               " nodes"));
  }
  FLEXKIT_CUDA_CHECK(launched);
}

std::size_t CapturedGraph::nodes() const {
  return state_ ? state_->nodes : 0;
}

void CapturedGraph::reset() {
  state_.reset();
}

}  // namespace flexkit::cuda
