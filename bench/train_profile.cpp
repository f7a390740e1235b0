// Where a training step's time goes on the GPU: runs `flexkit train` in process under CUPTI's
// activity trace and prints, per training step (steady state: the steps after --skip), the
// kernels launched, the copies and memsets, the host's waits for the GPU, the host time, the
// GPU's kernel time, and the kernels that take the most of it.
//
//   bench_train_profile [--model csnn] [--precision f32|flex16] [--steps 60] [--skip 20]
//                       [--cuda-graph on|off] [--host-samples on|off] [--trace on|off]
//                       [--launches N] [--attribute on|off] [--memory on|off]
//
// --host-samples on also samples the stack of the thread running the steps every 100 µs of wall
// time during the measured steps and prints the functions it spends its time in (waits
// included), with the CUDA calls' share by name: there is no perf on the GPU machine.
// --memory on records the device's live blocks at the run's peak and prints them by size.
// --trace off leaves CUPTI's trace out (it slows every CUDA call): the wall time and the samples.
//
// Each kernel, copy and memset is placed in the step whose host code issued it (CUPTI's
// correlation of GPU activity with the API call), so a step's counts do not depend on how far
// the GPU lags behind the host.
#include <cupti.h>
#include <cxxabi.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <csignal>

#include <algorithm>
#include <atomic>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "flexkit/cuda.hpp"
#include "flexkit/train.hpp"

using namespace flexkit;

namespace {

#define CUPTI_CHECK(call)                                                         \
  do {                                                                            \
    CUptiResult status_ = (call);                                                 \
    if (status_ != CUPTI_SUCCESS) {                                               \
      const char* text_ = nullptr;                                                \
      cuptiGetResultString(status_, &text_);                                      \
      std::fprintf(stderr, "bench_train_profile: %s failed: %s\n", #call, text_); \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

struct GpuWork {
  std::string name;  // kernel name, or "memcpy" / "memset"
  std::uint32_t correlation;
  std::uint64_t start, end;
  std::string shape;  // a kernel's grid and block, "" for copies and memsets
};
struct ApiCall {
  std::uint64_t start, end;
  bool waits;                         // a call that blocks the host until the GPU is done
  CUpti_CallbackId runtime_cbid = 0;  // the runtime call's id (0: a driver call alone)
};

std::mutex g_mutex;
std::vector<GpuWork> g_work;
std::unordered_map<std::uint32_t, ApiCall> g_api;  // by correlation id

// --attribute on: the host stack at each kernel launch, by correlation id (the runtime call's
// entry comes before the driver call's inside it, with the same id, and is the one kept).
constexpr int kLaunchFrames = 32;
struct LaunchSite {
  int depth;
  void* frames[kLaunchFrames];
};
std::unordered_map<std::uint32_t, LaunchSite> g_sites;

bool is_launch(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API)
    return cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel ||
           cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz ||
           cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx ||
           cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz ||
           cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel;
  return cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000 ||
         cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000 ||
         cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060 ||
         cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060;
}

void CUPTIAPI on_api_call(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                          const void* data) {
  const auto* info = static_cast<const CUpti_CallbackData*>(data);
  if (info->callbackSite != CUPTI_API_ENTER || !is_launch(domain, cbid)) return;
  LaunchSite site;
  site.depth = backtrace(site.frames, kLaunchFrames);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_sites.emplace(info->correlationId, site);
}

bool is_wait(CUpti_ActivityKind kind, CUpti_CallbackId cbid) {
  if (kind != CUPTI_ACTIVITY_KIND_RUNTIME) return false;
  switch (cbid) {
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaEventSynchronize_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_ptsz_v7000:
      return true;
    default:
      return false;
  }
}

void CUPTIAPI buffer_requested(std::uint8_t** buffer, std::size_t* size, std::size_t* max) {
  *size = std::size_t{16} << 20;
  *buffer = static_cast<std::uint8_t*>(std::aligned_alloc(8, *size));
  *max = 0;
}

void CUPTIAPI buffer_completed(CUcontext, std::uint32_t, std::uint8_t* buffer, std::size_t,
                               std::size_t valid) {
  std::lock_guard<std::mutex> lock(g_mutex);
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        char shape[96];
        std::snprintf(shape, sizeof shape, "grid %dx%dx%d, block %dx%dx%d", k->gridX, k->gridY,
                      k->gridZ, k->blockX, k->blockY, k->blockZ);
        g_work.push_back({k->name ? k->name : "?", k->correlationId, k->start, k->end, shape});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
        g_work.push_back({"memcpy", m->correlationId, m->start, m->end, ""});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
        g_work.push_back({"memset", m->correlationId, m->start, m->end, ""});
        break;
      }
      case CUPTI_ACTIVITY_KIND_RUNTIME:
      case CUPTI_ACTIVITY_KIND_DRIVER: {
        const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(record);
        ApiCall call{a->start, a->end, is_wait(a->kind, a->cbid),
                     a->kind == CUPTI_ACTIVITY_KIND_RUNTIME ? a->cbid : 0};
        auto [it, fresh] = g_api.emplace(a->correlationId, call);
        if (!fresh) {  // a runtime call and the driver call inside it: the outer one counts
          it->second.start = std::min(it->second.start, call.start);
          it->second.end = std::max(it->second.end, call.end);
          it->second.waits = it->second.waits || call.waits;
          if (call.runtime_cbid) it->second.runtime_cbid = call.runtime_cbid;
        }
        break;
      }
      default:
        break;
    }
  }
  std::free(buffer);
}

// The host sampler: SIGPROF every 100 µs of wall time stores the stack's return
// addresses into a preallocated buffer (nothing allocates in the handler).
constexpr int kFrames = 48;
constexpr std::size_t kMaxSamples = 200000;
struct Sample {
  int depth;
  void* frames[kFrames];
};
std::vector<Sample> g_samples(0);
std::atomic<std::size_t> g_sample_count{0};
std::atomic<bool> g_sampling{false};
constexpr long kSampleNs = 100000;  // 100 µs of wall time
std::optional<timer_t> g_timer;

void on_sigprof(int) {
  if (!g_sampling.load(std::memory_order_relaxed)) return;
  const std::size_t i = g_sample_count.fetch_add(1, std::memory_order_relaxed);
  if (i >= g_samples.size()) return;
  g_samples[i].depth = backtrace(g_samples[i].frames, kFrames);
}

// A monotonic-clock timer signalling the thread that runs the steps: high resolution, unlike
// the process CPU-time timer (which ticks at the kernel's HZ).
void start_sampler() {
  g_samples.resize(kMaxSamples);
  void* warm[4];
  backtrace(warm, 4);  // loads the unwinder outside the handler
  struct sigaction action {};
  action.sa_handler = on_sigprof;
  action.sa_flags = SA_RESTART;
  sigaction(SIGPROF, &action, nullptr);
  sigevent event{};
  event.sigev_notify = SIGEV_THREAD_ID;
  event.sigev_signo = SIGPROF;
  event._sigev_un._tid = static_cast<pid_t>(syscall(SYS_gettid));  // sigev_notify_thread_id
  timer_t timer;
  if (timer_create(CLOCK_MONOTONIC, &event, &timer) != 0) {
    std::perror("bench_train_profile: timer_create");
    return;
  }
  const itimerspec every{{0, kSampleNs}, {0, kSampleNs}};
  timer_settime(timer, 0, &every, nullptr);
  g_timer = timer;
}

void stop_sampler() {
  g_sampling = false;
  if (g_timer) timer_delete(*g_timer);
  g_timer.reset();
}

std::string demangled(const std::string& name) {
  int status = 0;
  char* text = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
  std::string out = status == 0 && text ? text : name;
  std::free(text);
  return out;
}

// Names for return addresses: addr2line reads the symbol tables (functions in anonymous
// namespaces included, which dladdr does not see), dladdr's name where it cannot.
std::map<void*, std::string> symbolize(const std::set<void*>& addresses) {
  std::map<void*, std::string> out;
  std::map<std::string, std::vector<std::pair<void*, std::uintptr_t>>> by_file;
  for (void* a : addresses) {
    Dl_info info{};
    if (dladdr(a, &info) == 0 || info.dli_fname == nullptr) {
      out[a] = std::string(1, '?');
      continue;
    }
    const auto offset =
        reinterpret_cast<std::uintptr_t>(a) - reinterpret_cast<std::uintptr_t>(info.dli_fbase) - 1;
    by_file[info.dli_fname].push_back({a, offset});
    std::string fallback = std::string("[") + info.dli_fname + "]";
    if (info.dli_sname) fallback = demangled(info.dli_sname);
    out[a] = fallback;
  }
  for (const auto& [file, list] : by_file) {
    for (std::size_t from = 0; from < list.size(); from += 256) {
      const std::size_t to = std::min(list.size(), from + 256);
      std::string command = "addr2line -f -C -e '" + file + "'";
      char hex[32];
      for (std::size_t i = from; i < to; ++i) {
        std::snprintf(hex, sizeof hex, " %#zx", static_cast<std::size_t>(list[i].second));
        command += hex;
      }
      FILE* pipe = popen(command.c_str(), "r");
      if (!pipe) continue;
      char line[4096];
      for (std::size_t i = from; i < to; ++i) {
        if (!std::fgets(line, sizeof line, pipe)) break;
        std::string name(line);
        while (!name.empty() && (name.back() == '\n' || name.back() == '\r')) name.pop_back();
        if (!std::fgets(line, sizeof line, pipe)) break;  // file:line
        if (name != "??" && !name.empty()) out[list[i].first] = name;
      }
      pclose(pipe);
    }
  }
  for (auto& [a, name] : out)
    if (name.size() > 110) {
      name.resize(110);
      name.append("...");
    }
  return out;
}

// The functions the samples were taken in: self (the innermost named frame) and inclusive
// (anywhere on the stack, once a sample).
void print_host_samples(double steps) {
  stop_sampler();
  const std::size_t n = std::min(g_sample_count.load(), g_samples.size());
  std::map<std::string, std::size_t> self, inclusive;
  std::set<void*> addresses;
  for (std::size_t i = 0; i < n; ++i)
    for (int f = 2; f < g_samples[i].depth; ++f) addresses.insert(g_samples[i].frames[f]);
  const std::map<void*, std::string> names = symbolize(addresses);
  auto name_of = [&](void* a) -> const std::string& { return names.at(a); };
  for (std::size_t i = 0; i < n; ++i) {
    const Sample& s = g_samples[i];
    std::set<std::string> seen;
    // Frames 0-1 are the handler and the signal trampoline.
    for (int f = 2; f < s.depth; ++f) {
      const std::string& name = name_of(s.frames[f]);
      if (f == 2) ++self[name];
      if (seen.insert(name).second) ++inclusive[name];
    }
  }
  auto print = [&](const char* title, const std::map<std::string, std::size_t>& counts,
                   std::size_t rows) {
    std::vector<std::pair<std::string, std::size_t>> top(counts.begin(), counts.end());
    std::sort(top.begin(), top.end(),
              [](const auto& a, const auto& b) { return a.second > b.second; });
    std::printf(
        "\n| host, %s (%zu samples, one per 100 µs) | share | µs per step |\n|---|---|---|\n",
        title, n);
    for (std::size_t i = 0; i < std::min(rows, top.size()); ++i)
      std::printf("| %s | %.1f %% | %.0f |\n", top[i].first.c_str(), 100.0 * top[i].second / n,
                  100.0 * top[i].second / steps);
  };
  print("self", self, 30);
  print("inclusive", inclusive, 60);
}

// Counts and nanoseconds by name, printed costliest first as `| name | per step | µs per step |
// share |` rows under `header` (its own heading row and separator).
using Costs = std::map<std::string, std::pair<std::int64_t, double>>;
void print_costliest(const std::string& header, const Costs& costs, std::size_t rows, double steps,
                     double gpu_ns) {
  std::vector<std::pair<std::string, std::pair<std::int64_t, double>>> sorted(costs.begin(),
                                                                              costs.end());
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
  std::printf("%s", header.c_str());
  for (std::size_t i = 0; i < std::min(rows, sorted.size()); ++i)
    std::printf("| %s | %.1f | %.1f | %.1f %% |\n", sorted[i].first.c_str(),
                sorted[i].second.first / steps, sorted[i].second.second / steps / 1e3,
                100.0 * sorted[i].second.second / gpu_ns);
}

// The training function a launch site belongs to: the innermost flexkit::nn frame that is not
// one of the layers' shared helpers, with the function that called it.
std::string site_name(const LaunchSite& site, const std::map<void*, std::string>& names) {
  auto is_helper = [](const std::string& f) {
    return f.find("::detail::") != std::string::npos || f.find("::heavy::") != std::string::npos ||
           f.find("new_tensor") != std::string::npos || f.find("std::") == 0;
  };
  std::string inner, outer;
  for (int f = 0; f < site.depth; ++f) {
    const std::string& name = names.at(site.frames[f]);
    if (name.rfind("flexkit::nn::", 0) != 0 || is_helper(name)) continue;
    std::string shortened = name;  // without its parameters, "(anonymous namespace)" kept
    for (std::size_t at; (at = shortened.find("(anonymous namespace)")) != std::string::npos;)
      shortened.replace(at, 21, "{anonymous}");
    shortened = shortened.substr(0, shortened.find('('));
    if (inner.empty()) {
      inner = shortened;
    } else if (shortened != inner) {
      outer = shortened;
      break;
    }
  }
  if (inner.empty()) return "(outside flexkit::nn)";
  return outer.empty() ? inner : inner + " < " + outer;
}

template <typename InWindow>
void print_attribution(const InWindow& in_window, double gpu_ns, double steps) {
  std::set<void*> addresses;
  for (const auto& [correlation, site] : g_sites)
    for (int f = 0; f < site.depth; ++f) addresses.insert(site.frames[f]);
  const std::map<void*, std::string> names = symbolize(addresses);
  Costs by_site;  // launches, ns
  for (const GpuWork& w : g_work) {
    if (w.shape.empty() || !in_window(w.correlation)) continue;
    auto it = g_sites.find(w.correlation);
    const std::string kernel = demangled(w.name).substr(0, 60);
    const std::string key =
        (it == g_sites.end() ? std::string("(no launch site)") : site_name(it->second, names)) +
        " | " + kernel + " (" + w.shape + ")";
    auto& e = by_site[key];
    ++e.first;
    e.second += static_cast<double>(w.end - w.start);
  }
  print_costliest(
      "\n| launched by | kernel (top 40 rows) | per step | µs per step | share |\n"
      "|---|---|---|---|---|\n",
      by_site, 40, steps, gpu_ns);
}

// The live blocks at the peak, grouped by size class, largest first.
void print_peak_blocks() {
  std::map<std::size_t, std::int64_t, std::greater<>> by_size;
  std::size_t total = 0;
  for (std::size_t bytes : flexkit::cuda::peak_blocks(0)) {
    ++by_size[bytes];
    total += bytes;
  }
  std::printf("\n| blocks live at the peak (%.1f MB in all) | count | MB |\n|---|---|---|\n",
              static_cast<double>(total) / 1e6);
  std::size_t rows = 0, rest = 0;
  for (const auto& [bytes, count] : by_size) {
    if (rows++ < 20)
      std::printf("| %.2f MB | %lld | %.1f |\n", static_cast<double>(bytes) / 1e6,
                  static_cast<long long>(count), static_cast<double>(bytes * count) / 1e6);
    else
      rest += bytes * static_cast<std::size_t>(count);
  }
  if (rest > 0) std::printf("| smaller | | %.1f |\n", static_cast<double>(rest) / 1e6);
}

const char* arg(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string model = arg(argc, argv, "--model", "csnn");
  const std::string precision = arg(argc, argv, "--precision", "f32");
  const std::int64_t steps = std::atoll(arg(argc, argv, "--steps", "60"));
  const std::int64_t skip = std::atoll(arg(argc, argv, "--skip", "20"));
  const std::string graph = arg(argc, argv, "--cuda-graph", "on");
  const bool host_samples = std::strcmp(arg(argc, argv, "--host-samples", "off"), "on") == 0;
  const bool trace = std::strcmp(arg(argc, argv, "--trace", "on"), "on") == 0;
  // --launches N: the N costliest kernels by name and launch shape (tells apart the calls of
  // one kernel on different problems, e.g. a product's forward and its gradients).
  const std::size_t launch_rows = std::strtoull(arg(argc, argv, "--launches", "0"), nullptr, 10);
  // --attribute on: GPU time by the training code that launched it (the innermost flexkit::nn
  // function on the launching stack, layers' helpers skipped), with the kernel's name.
  const bool attribute = std::strcmp(arg(argc, argv, "--attribute", "off"), "on") == 0;
  const bool memory = std::strcmp(arg(argc, argv, "--memory", "off"), "on") == 0;
  if (steps <= skip || skip < 1) {
    std::fprintf(stderr, "bench_train_profile: need --steps > --skip >= 1\n");
    return 2;
  }

  if (trace) {
    CUPTI_CHECK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
    for (CUpti_ActivityKind kind :
         {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
          CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER})
      CUPTI_CHECK(cuptiActivityEnable(kind));
    if (attribute) {
      CUpti_SubscriberHandle subscriber;
      CUPTI_CHECK(cuptiSubscribe(&subscriber, on_api_call, nullptr));
      CUPTI_CHECK(cuptiEnableDomain(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API));
      CUPTI_CHECK(cuptiEnableDomain(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API));
    }
  }

  std::vector<std::uint64_t> marks;  // host timestamps: marks[i] ends global step i + 1
  nn::TrainConfig config;
  config.model = model;
  config.precision = precision;
  config.device = "cuda";
  config.epochs = 1;
  config.quiet = true;
  config.cuda_graph = graph == "on";
  config.on_step = [&](std::int64_t) {
    std::uint64_t now = 0;
    cuptiGetTimestamp(&now);
    marks.push_back(now);
    if (host_samples && static_cast<std::int64_t>(marks.size()) == skip) {
      start_sampler();
      g_sampling = true;
    }
    if (static_cast<std::int64_t>(marks.size()) == steps) stop_sampler();
  };
  // One epoch of exactly `steps` batches (the trainer's batch is the preset's, 128 for both).
  config.limit = steps * 128;
  if (memory) flexkit::cuda::record_peak_blocks(0, true);
  const nn::TrainResult result = nn::train(config);
  if (memory) print_peak_blocks();
  if (trace) CUPTI_CHECK(cuptiActivityFlushAll(1));

  if (static_cast<std::int64_t>(marks.size()) < steps) {
    std::fprintf(stderr, "bench_train_profile: %zu steps ran, expected %lld\n", marks.size(),
                 static_cast<long long>(steps));
    return 1;
  }
  const std::uint64_t from = marks[skip - 1], to = marks[steps - 1];
  const double n = static_cast<double>(steps - skip);
  if (!trace) {  // the host undisturbed by the trace: the wall time and the samples only
    std::printf("\n%s, %s, cuda, untraced: steps %lld..%lld, wall %.3f ms a step\n", model.c_str(),
                precision.c_str(), static_cast<long long>(skip + 1), static_cast<long long>(steps),
                static_cast<double>(to - from) / n / 1e6);
    if (host_samples) print_host_samples(n);
    return 0;
  }
  auto in_window = [&](std::uint32_t correlation) {
    auto it = g_api.find(correlation);
    return it != g_api.end() && it->second.start >= from && it->second.start < to;
  };

  std::int64_t kernels = 0, copies = 0, memsets = 0;
  double gpu_ns = 0;
  Costs by_name, by_launch;  // count, ns
  for (const GpuWork& w : g_work) {
    if (!in_window(w.correlation)) continue;
    const double ns = static_cast<double>(w.end - w.start);
    if (w.name == "memcpy")
      ++copies;
    else if (w.name == "memset")
      ++memsets;
    else
      ++kernels;
    gpu_ns += ns;
    auto& e = by_name[w.name];
    ++e.first;
    e.second += ns;
    if (!w.shape.empty()) {
      auto& l = by_launch[demangled(w.name).substr(0, 90) + " (" + w.shape + ")"];
      ++l.first;
      l.second += ns;
    }
  }
  std::int64_t waits = 0;
  double wait_ns = 0;
  std::map<std::string, std::pair<std::int64_t, double>> api_by_name;  // count, ns
  for (const auto& [correlation, call] : g_api) {
    if (call.start < from || call.start >= to) continue;
    if (call.waits) {
      ++waits;
      wait_ns += static_cast<double>(call.end - call.start);
    }
    const char* name = nullptr;
    if (call.runtime_cbid == 0 || cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API,
                                                       call.runtime_cbid, &name) != CUPTI_SUCCESS)
      name = "(driver call)";
    auto& e = api_by_name[name];
    ++e.first;
    e.second += static_cast<double>(call.end - call.start);
  }
  const double wall_ns = static_cast<double>(to - from);

  std::printf("\n%s, %s, cuda: steps %lld..%lld of one epoch (per step)\n", model.c_str(),
              precision.c_str(), static_cast<long long>(skip + 1), static_cast<long long>(steps));
  std::printf("| per training step | value |\n|---|---|\n");
  std::printf("| wall time (ms) | %.3f |\n", wall_ns / n / 1e6);
  std::printf("| host time, waits excluded (ms) | %.3f |\n", (wall_ns - wait_ns) / n / 1e6);
  std::printf("| host waits for the GPU | %.1f (%.3f ms) |\n", waits / n, wait_ns / n / 1e6);
  std::printf("| GPU time in kernels, copies, memsets (ms) | %.3f |\n", gpu_ns / n / 1e6);
  std::printf("| kernel launches | %.1f |\n", kernels / n);
  std::printf("| peak device memory, the whole run (GiB) | %.3f |\n",
              static_cast<double>(result.peak_device_bytes) / (1024.0 * 1024.0 * 1024.0));
  std::printf("| copies | %.1f |\n| memsets | %.1f |\n", copies / n, memsets / n);
  if (result.cuda_graph.used)
    std::printf("| CUDA graph | %lld of %lld steps replayed, %zu nodes |\n",
                static_cast<long long>(result.cuda_graph.replays), static_cast<long long>(steps),
                result.cuda_graph.nodes);
  else
    std::printf("| CUDA graph | not used: %s |\n", result.cuda_graph.note.c_str());

  if (host_samples) {
    std::vector<std::pair<std::string, std::pair<std::int64_t, double>>> api(api_by_name.begin(),
                                                                             api_by_name.end());
    std::sort(api.begin(), api.end(),
              [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
    std::printf("\n| CUDA calls by name | per step | host µs per step |\n|---|---|---|\n");
    for (std::size_t i = 0; i < std::min<std::size_t>(15, api.size()); ++i)
      std::printf("| %s | %.1f | %.1f |\n", api[i].first.c_str(), api[i].second.first / n,
                  api[i].second.second / n / 1e3);
    print_host_samples(n);
  }

  Costs top15;  // names cut to 70 characters
  for (const auto& [name, cost] : by_name) {
    auto& row = top15[name.substr(0, 70)];
    row.first += cost.first;
    row.second += cost.second;
  }
  print_costliest(
      "\n| GPU work (top 15 by time) | per step | µs per step | share |\n|---|---|---|---|\n",
      top15, 15, n, gpu_ns);
  if (attribute) print_attribution(in_window, gpu_ns, n);
  if (launch_rows > 0)
    print_costliest("\n| kernels by launch shape (top " + std::to_string(launch_rows) +
                        ") | per step | µs per step | share |\n|---|---|---|---|\n",
                    by_launch, launch_rows, n, gpu_ns);
  return 0;
}
