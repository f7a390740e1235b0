// The CUDA runtime as flexkit sees it: devices, streams and the caching allocator.
// Every function works in a build without CUDA or on a machine without a GPU: device_count()
// is then 0 and anything needing a device throws UnsupportedError or DeviceError.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace flexkit::cuda {

// True when this build contains the CUDA backend.
bool built_with_cuda();
// Number of usable devices; 0 without a driver or GPU (never throws).
int device_count();

struct DeviceInfo {
  int index = 0;
  std::string name;
  int compute_major = 0, compute_minor = 0;
  std::size_t total_memory = 0;
  int multiprocessors = 0;
  std::size_t l2_bytes = 0;
};
DeviceInfo device_info(int device);

struct Versions {
  int runtime = 0;  // e.g. 13000
  int driver = 0;   // 0 without a driver
  int nvrtc_major = 0, nvrtc_minor = 0;
};
Versions versions();

// A CUDA stream on one device. Work flexkit enqueues for a device goes to that device's current
// stream: the per-thread default stream unless a StreamGuard says otherwise.
class Stream {
 public:
  explicit Stream(int device);
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&&) = delete;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  void synchronize() const;
  int device() const { return device_; }
  void* handle() const { return handle_; }  // a cudaStream_t

 private:
  int device_;
  void* handle_;
};

// Makes `stream` current for its device on this thread until the guard is destroyed.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  // A stream another library made (a cudaStream_t, e.g. PyTorch's current stream) on `device`.
  StreamGuard(int device, void* stream_handle);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  int device_;
  void* previous_;
};

void* current_stream(int device);  // a cudaStream_t
void synchronize(int device);

// The caching allocator: freed blocks go back to a pool per (device, stream, size class) and
// are handed out again without calling cudaMalloc.
struct AllocatorStats {
  std::size_t in_use_bytes = 0;          // held by live allocations (size-class rounded)
  std::size_t cached_bytes = 0;          // free blocks kept for reuse
  std::size_t peak_in_use_bytes = 0;     // the most in_use_bytes has been
  std::uint64_t device_allocations = 0;  // cudaMalloc calls that succeeded
  std::uint64_t cache_hits = 0;          // requests served from the pool
};
AllocatorStats allocator_stats(int device);
// Returns every cached free block to the driver (all devices).
void empty_cache();
// Caps what the allocator holds on `device`, live and cached bytes together (0: no cap): a
// request past it releases the cached blocks and then fails with OutOfMemoryError, as a device
// of that size would.
void set_memory_limit(int device, std::size_t bytes);
// A diagnosis of peak memory: while on, each new peak of in_use_bytes (counted afresh from
// now) records the size classes of the blocks live then; peak_blocks gives them, largest first.
// Every new peak costs a pass over the live blocks.
void record_peak_blocks(int device, bool on);
std::vector<std::size_t> peak_blocks(int device);

// Work captured once as a CUDA graph and replayed by one launch: what `work` enqueues on a
// device's current stream, with the same kernels, arguments and addresses every time (new
// values come in through the arrays the work reads). Memory the work allocates or frees while
// it is captured belongs to the graph while the graph lives, so that a replay never writes
// where another array lives.
class CapturedGraph {
 public:
  CapturedGraph() = default;  // empty
  // Records what `work` enqueues on `device`'s current stream, which must be a Stream's (the
  // legacy default stream cannot be captured), without running it. UnsupportedError when the
  // work does what a graph cannot repeat (a copy from or to host memory, a wait for the device,
  // a flex16 write whose exponent the host picks); OutOfMemoryError when memory runs out. Then
  // nothing is kept and the stream is usable as before.
  static CapturedGraph capture(int device, const std::function<void()>& work);
  // Runs the captured work on the device's current stream.
  void replay() const;
  bool empty() const { return !state_; }
  std::size_t nodes() const;  // kernels, copies and memsets
  // Drops the graph; its memory goes back to the allocator once its launches are done.
  void reset();

 private:
  struct State;
  std::shared_ptr<State> state_;
};
// The size class a request of `bytes` is rounded up to.
std::size_t allocation_size_class(std::size_t bytes);

// The cache of run-time compiled kernels: in memory by a structural key (ops, dtypes, layout
// classes — never scalar values), and on disk under cache_directory()/kernels, keyed by the
// source, options, NVRTC version, architecture and library version, with a checksum verified on
// load. FLEXKIT_DUMP_KERNELS=<dir> writes every generated source there.
struct KernelCacheStats {
  std::uint64_t memory_hits = 0;    // served by a module already loaded in this process
  std::uint64_t disk_hits = 0;      // loaded from a verified cubin on disk
  std::uint64_t compiles = 0;       // compiled by NVRTC
  std::uint64_t corrupt_files = 0;  // cubins on disk that failed verification (then rebuilt)
  // Assignments that ran the description kept for an earlier one of the same structure (each
  // also counts as a memory hit).
  std::uint64_t assignment_reuses = 0;
};
KernelCacheStats kernel_cache_stats();
// The exact GEMM's plan cache (tile, split, workspace per shape class and layout): plans made
// and calls that reused one.
struct GemmPlanStats {
  std::uint64_t plans_made = 0;
  std::uint64_t plan_hits = 0;
};
GemmPlanStats gemm_plan_stats();

// Forgets the in-memory modules (the disk cache stays), as a new process would start.
void clear_kernel_memory_cache();

}  // namespace flexkit::cuda
