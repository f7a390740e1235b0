#include "backend/cuda/kernel_cache.hpp"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include "backend/cuda/check.hpp"
#include "backend/embedded_files.hpp"
#include "core/environment.hpp"
#include "core/text.hpp"
#include "flexkit/error.hpp"
#include "flexkit/version.hpp"

namespace flexkit::backend::cuda {

using detail::cat;
using detail::env_value;
namespace fs = std::filesystem;

namespace {

// Bumped whenever the file layout or the meaning of its hash changes.
constexpr std::uint32_t kFormatVersion = 1;
constexpr char kMagic[8] = {'F', 'L', 'X', 'C', 'U', 'B', 'I', 'N'};

// Options added to the ones compile_cubin always passes (-arch, -std=c++17). Contraction into
// fused multiply-adds is off so that + - * / round exactly as on the CPU backend; the kernels are
// memory-bound, so it costs nothing measurable.
const std::vector<std::string>& extra_options() {
  static const std::vector<std::string> options = {"--fmad=false"};
  return options;
}

struct FileHeader {
  char magic[8];
  std::uint32_t format_version;
  std::uint32_t reserved;
  std::uint64_t name_hash;  // the hash the file is named by: a file copied over another fails
  std::uint64_t payload_size;
  std::uint64_t checksum;  // fnv1a64 of the payload
};
static_assert(sizeof(FileHeader) == 40);

std::string hex64(std::uint64_t v) {
  static const char digits[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[static_cast<std::size_t>(i)] = digits[v & 15];
  return s;
}

// The device headers a program may include are part of what it compiles to: a library built
// with edited headers must not pick up cubins built from the old ones.
std::uint64_t headers_hash() {
  static const std::uint64_t hash = [] {
    std::uint64_t h = fnv1a64("embedded headers");
    for (const EmbeddedFile& f : embedded_device_headers()) {
      h = fnv1a64(f.name, h);
      h = fnv1a64(std::string_view(f.data, f.size), h);
    }
    return h;
  }();
  return hash;
}

// Everything that determines the cubin, hashed into its file name.
std::uint64_t identity_hash(const std::string& source, const std::string& arch) {
  const flexkit::cuda::Versions v = flexkit::cuda::versions();
  std::string id =
      cat("flexkit kernel cache ", kFormatVersion, "|flexkit ", kVersion, "|", arch, "|nvrtc ",
          v.nvrtc_major, ".", v.nvrtc_minor, "|headers ", hex64(headers_hash()), "|-std=c++17");
  for (const std::string& o : extra_options()) id += " " + o;
  id += '\n';
  return fnv1a64(source, fnv1a64(id));
}

// Writes the source to $FLEXKIT_DUMP_KERNELS/<name>.cu; the path, or "" when not asked for or
// not writable.
std::string dump_source(std::string_view name, const std::string& source) {
  const std::optional<std::string> dir = env_value("FLEXKIT_DUMP_KERNELS");
  if (!dir) return {};
  std::error_code ec;
  fs::create_directories(*dir, ec);
  fs::path path = fs::path(*dir) / cat(name, ".cu");
  std::ofstream out(path, std::ios::binary);
  out << source;
  out.close();
  return out ? path.string() : std::string();
}

// The verified cubin stored at `path`. `exists` says whether there was a file at all, `corrupt`
// whether it failed verification (then the result is empty).
std::string read_cubin(const fs::path& path, std::uint64_t name_hash, bool& exists, bool& corrupt) {
  exists = corrupt = false;
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  exists = true;
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string file = buffer.str();
  FileHeader h{};
  if (file.size() < sizeof h) {
    corrupt = true;
    return {};
  }
  std::memcpy(&h, file.data(), sizeof h);
  std::string payload = file.substr(sizeof h);
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0 || h.format_version != kFormatVersion ||
      h.name_hash != name_hash || h.payload_size != payload.size() ||
      h.checksum != fnv1a64(payload)) {
    corrupt = true;
    return {};
  }
  return payload;
}

// Best effort: a cache that cannot be written only costs a compile next time. The temporary
// file lives in the same directory, so the rename is atomic and readers never see half a file.
void write_cubin(const fs::path& path, std::uint64_t name_hash, const std::string& cubin) {
  static std::atomic<std::uint64_t> counter{0};
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  FileHeader h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.format_version = kFormatVersion;
  h.name_hash = name_hash;
  h.payload_size = cubin.size();
  h.checksum = fnv1a64(cubin);
  fs::path temp = path;
  temp += cat(".tmp.", static_cast<long>(::getpid()), ".", counter.fetch_add(1));
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(&h), sizeof h);
    out.write(cubin.data(), static_cast<std::streamsize>(cubin.size()));
    out.close();
    if (!out) {
      fs::remove(temp, ec);
      return;
    }
  }
  fs::rename(temp, path, ec);
  if (ec) fs::remove(temp, ec);
}

fs::path cubin_path(std::uint64_t name_hash) {
  return cache_directory() / "kernels" / (hex64(name_hash) + ".cubin");
}

}  // namespace

std::uint64_t fnv1a64(std::string_view bytes, std::uint64_t seed) {
  std::uint64_t h = seed;
  for (unsigned char c : bytes) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

std::string compile_kernel_program(std::string_view name, const std::string& source,
                                   const std::string& arch) {
  const std::string dumped = dump_source(name, source);
  try {
    return compile_cubin(name, source, arch, extra_options());
  } catch (const CompileError& e) {
    if (dumped.empty()) throw;
    throw CompileError(cat(e.what(), "\n(the source is also in ", dumped, ")"));
  }
}

KernelCache& KernelCache::instance() {
  // Never destroyed: modules must not be unloaded after the CUDA runtime has shut down.
  static KernelCache* cache = new KernelCache();
  return *cache;
}

const std::string& KernelCache::arch_of(int device) {
  auto it = arch_.find(device);
  if (it != arch_.end()) return it->second;
  int major = 0, minor = 0;
  FLEXKIT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  FLEXKIT_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return arch_.emplace(device, rtc_arch_for(major, minor)).first->second;
}

KernelCache::Cubin KernelCache::cubin_locked(std::string_view name, const std::string& source,
                                             const std::string& arch, bool reject_disk) {
  const std::uint64_t name_hash = identity_hash(source, arch);
  const fs::path path = cubin_path(name_hash);
  bool exists = false, corrupt = false;
  std::string cubin = read_cubin(path, name_hash, exists, corrupt);
  if (exists && !corrupt && !reject_disk) {
    dump_source(name, source);
    return {std::move(cubin), true};
  }
  if (exists) {
    ++stats_.corrupt_files;
    std::error_code ec;
    fs::remove(path, ec);
  }
  cubin = compile_kernel_program(name, source, arch);
  ++stats_.compiles;
  write_cubin(path, name_hash, cubin);
  return {std::move(cubin), false};
}

std::string KernelCache::cubin(std::string_view name, const std::string& source,
                               const std::string& arch) {
  std::lock_guard<std::mutex> lock(mutex_);
  Cubin c = cubin_locked(name, source, arch, false);
  if (c.from_disk) ++stats_.disk_hits;
  return std::move(c.bytes);
}

std::shared_ptr<const RtcModule> KernelCache::get(int device, const std::string& key,
                                                  const std::function<std::string()>& make_source) {
  const std::string map_key = std::to_string(device) + '|' + key;
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = modules_.find(map_key); it != modules_.end()) {
    ++stats_.memory_hits;
    return it->second;
  }
  const std::string source = make_source();
  const std::string& arch = arch_of(device);
  const std::string name = "flexkit_" + hex64(fnv1a64(key));
  Cubin c = cubin_locked(name, source, arch, false);
  std::shared_ptr<const RtcModule> module;
  try {
    module = std::make_shared<RtcModule>(device, c.bytes);
  } catch (const CudaError&) {
    if (!c.from_disk) throw;
    // Verified bytes the driver still refuses: count the file as bad and rebuild it.
    c = cubin_locked(name, source, arch, true);
    module = std::make_shared<RtcModule>(device, c.bytes);
  }
  if (c.from_disk) ++stats_.disk_hits;
  modules_.emplace(map_key, module);
  return module;
}

flexkit::cuda::KernelCacheStats KernelCache::stats() const {
  flexkit::cuda::KernelCacheStats s;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    s = stats_;
  }
  const std::uint64_t reuses = reuses_.load(std::memory_order_relaxed);
  s.memory_hits += reuses;
  s.assignment_reuses += reuses;
  return s;
}

std::shared_ptr<const RtcModule> KernelCache::loaded(int device, const std::string& key) {
  const std::string map_key = std::to_string(device) + '|' + key;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = modules_.find(map_key);
  return it == modules_.end() ? nullptr : it->second;
}

void KernelCache::count_reuse() {
  reuses_.fetch_add(1, std::memory_order_relaxed);
}

void KernelCache::clear_memory() {
  std::lock_guard<std::mutex> lock(mutex_);
  generation_.fetch_add(1, std::memory_order_release);
  // A module must outlive the kernels queued from it.
  for (const auto& [device, arch] : arch_) {
    DeviceGuard guard(device);
    cudaDeviceSynchronize();
    cudaGetLastError();
  }
  modules_.clear();
}

}  // namespace flexkit::backend::cuda

namespace flexkit::cuda {

KernelCacheStats kernel_cache_stats() {
  return backend::cuda::KernelCache::instance().stats();
}

void clear_kernel_memory_cache() {
  backend::cuda::KernelCache::instance().clear_memory();
}

}  // namespace flexkit::cuda
