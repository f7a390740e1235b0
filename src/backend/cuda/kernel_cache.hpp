// The cache of run-time compiled kernel programs. In memory: loaded modules by (device,
// structural key), so a repeated expression costs a hash lookup and no source generation. On
// disk: cubins under cache_directory()/kernels, named by a hash of everything that determines
// the binary (source, NVRTC options and version, architecture, library version), each behind a
// header whose checksum is verified on load; a damaged file is counted, deleted and rebuilt.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "backend/cuda/rtc_compiler.hpp"
#include "flexkit/cuda.hpp"

namespace flexkit::backend::cuda {

// FNV-1a, 64 bits: the file-name hash and the content checksum of cached cubins.
std::uint64_t fnv1a64(std::string_view bytes, std::uint64_t seed = 0xcbf29ce484222325ull);

// Compiles a generated program for `arch` with the cache's NVRTC options. With
// FLEXKIT_DUMP_KERNELS=<dir> the source is first written to <dir>/<name>.cu. A failure throws
// CompileError carrying the NVRTC log and the path of the dumped source.
std::string compile_kernel_program(std::string_view name, const std::string& source,
                                   const std::string& arch);

class KernelCache {
 public:
  static KernelCache& instance();

  // The module for `key` on `device`. On a memory miss `make_source` generates the program;
  // it is loaded from a verified cubin on disk when one exists, else compiled and stored.
  // Thread-safe; a CompileError leaves the cache unchanged.
  std::shared_ptr<const RtcModule> get(int device, const std::string& key,
                                       const std::function<std::string()>& make_source);

  // The cubin of `source` for `arch` through the disk cache alone: what get() does on a memory
  // miss before loading the module. Needs no GPU.
  std::string cubin(std::string_view name, const std::string& source, const std::string& arch);

  flexkit::cuda::KernelCacheStats stats() const;
  // The module for `key` on `device` if it is loaded (not counted in the statistics).
  std::shared_ptr<const RtcModule> loaded(int device, const std::string& key);
  // An assignment that ran a kept description (a memory hit and an assignment reuse); such
  // descriptions are valid while generation() is what it was when they took the module.
  void count_reuse();
  std::uint64_t generation() const { return generation_.load(std::memory_order_acquire); }
  // Drops the loaded modules after the devices' queued work is done; the disk cache stays.
  void clear_memory();

 private:
  struct Cubin {
    std::string bytes;
    bool from_disk;
  };

  KernelCache() = default;
  std::atomic<std::uint64_t> generation_{0};  // how many times clear_memory() ran
  // Counted apart from stats_ and without its lock: a reuse is on every warm call's path.
  std::atomic<std::uint64_t> reuses_{0};
  const std::string& arch_of(int device);
  // With the lock held. Counts compiles and corrupt files; disk hits are counted by the caller
  // once the bytes are known to load. `reject_disk` treats an existing file as corrupt.
  Cubin cubin_locked(std::string_view name, const std::string& source, const std::string& arch,
                     bool reject_disk);

  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<const RtcModule>> modules_;
  std::map<int, std::string> arch_;
  flexkit::cuda::KernelCacheStats stats_;
};

}  // namespace flexkit::backend::cuda
