// The CPU backend of step kernels: neurons in blocks of up to kLanes, split over the worker
// threads; a block never crosses an outer row of `inner` neurons, so its lanes are contiguous in
// every sequence. Within a block the program runs one instruction at a time over all lanes (loops
// the compiler vectorises), for every step, with the carried values held in the block's buffers.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "backend/cpu/thread_pool.hpp"
#include "core/storage.hpp"
#include "core/text.hpp"
#include "flexkit/error.hpp"
#include "flexkit/portable/ew_ops.hpp"
#include "flexkit/portable/neuron_ops.hpp"
#include "ir/op_eval.hpp"
#include "ir/step_kernel.hpp"

namespace flexkit::snn {

namespace {

namespace p = ::flexkit::portable;
constexpr std::int64_t kLanes = 256;

void load_lanes(const Array& a, std::int64_t offset, int lanes, float* out) {
  switch (a.dtype()) {
    case DType::f32: {
      const float* src = static_cast<const float*>(a.data()) + offset;
      std::memcpy(out, src, static_cast<std::size_t>(lanes) * sizeof(float));
      break;
    }
    case DType::bf16: {
      const auto* src = static_cast<const std::uint16_t*>(a.data()) + offset;
      for (int l = 0; l < lanes; ++l) out[l] = p::load_bf16(src[l]);
      break;
    }
    case DType::flex16: {
      const auto* src = static_cast<const std::int16_t*>(a.data()) + offset;
      const int iwl = a.iwl();
      for (int l = 0; l < lanes; ++l) out[l] = p::load_flex16(src[l], iwl);
      break;
    }
    case DType::u8: {
      const auto* src = static_cast<const std::uint8_t*>(a.data()) + offset;
      for (int l = 0; l < lanes; ++l) out[l] = p::load_u8(src[l]);
      break;
    }
    case DType::f64: {
      const double* src = static_cast<const double*>(a.data()) + offset;
      for (int l = 0; l < lanes; ++l) out[l] = p::load_f64(src[l]);
      break;
    }
    default:
      throw DTypeError("step kernel: unsupported sequence dtype");
  }
}

void store_lanes(const Array& a, std::int64_t offset, int lanes, const float* in,
                 p::Flex16Stats& stats) {
  switch (a.dtype()) {
    case DType::f32:
      std::memcpy(static_cast<float*>(a.data()) + offset, in,
                  static_cast<std::size_t>(lanes) * sizeof(float));
      break;
    case DType::bf16: {
      auto* dst = static_cast<std::uint16_t*>(a.data()) + offset;
      for (int l = 0; l < lanes; ++l) dst[l] = p::store_bf16(in[l]);
      break;
    }
    case DType::flex16: {
      auto* dst = static_cast<std::int16_t*>(a.data()) + offset;
      const int iwl = a.iwl();
      for (int l = 0; l < lanes; ++l) {
        const p::Flex16Code c = p::flex16_encode(in[l], iwl);
        dst[l] = c.m;
        const int m = c.m < 0 ? -int(c.m) : int(c.m);
        stats.max_abs_m = std::max(stats.max_abs_m, m);
        stats.saturated += c.saturated ? 1 : 0;
        stats.nan_count += p::is_nan(in[l]) ? 1 : 0;
      }
      break;
    }
    case DType::u8: {
      auto* dst = static_cast<std::uint8_t*>(a.data()) + offset;
      for (int l = 0; l < lanes; ++l) dst[l] = p::store_u8(in[l]);
      break;
    }
    default:
      throw DTypeError("step kernel: unsupported sequence dtype");
  }
}

// One instruction over `lanes` lanes, through the one op math (ir/op_eval.hpp): its switch is
// outside the lane loop, so each loop is a plain vectorisable kernel.
void run_instr(const ir::Instr& in, int lanes, const float* a, const float* b, const float* c,
               float* out) {
  if (in.op == ir::Op::detach) {  // kernels are built without it; pass the value through anyway
    std::memcpy(out, a, static_cast<std::size_t>(lanes) * sizeof(float));
    return;
  }
  if (!ir::with_op_math(in, [&](auto fn) {
        for (int l = 0; l < lanes; ++l) out[l] = fn(a, b, c, l);
      }))
    throw ValueError(
        detail::cat("step kernel: ", ir::op_info(in.op).name, " is not an elementwise op"));
}

// A leaf's value over the lanes of the block at neuron n0 (param, steady or per-step seq_in at
// element `base`); false for any other instruction.
bool load_leaf(const StepKernel& k, const StepKernelLaunch& launch, const ir::Instr& in,
               std::int64_t n0, std::int64_t base, int lanes, float* dst) {
  if (in.op == ir::Op::constant) {
    std::fill(dst, dst + lanes, in.constant);
    return true;
  }
  if (in.op == ir::Op::seq_in) {
    const bool steady = k.seq_in[static_cast<std::size_t>(in.slot)].steady;
    load_lanes(launch.seq_in[static_cast<std::size_t>(in.slot)], steady ? n0 : base, lanes, dst);
    return true;
  }
  if (in.op != ir::Op::param) return false;
  const Array& param = launch.params[static_cast<std::size_t>(in.slot)];
  const ParamSlot& slot = k.params[static_cast<std::size_t>(in.slot)];
  const float* values = static_cast<const float*>(param.data());
  if (slot.per_neuron)
    load_lanes(param, n0, lanes, dst);
  else if (slot.per_channel)  // a block's lanes may straddle two channels
    for (int l = 0; l < lanes; ++l) dst[l] = values[(n0 + l) / launch.channel_neurons];
  else
    std::fill(dst, dst + lanes, values[0]);
  return true;
}

// Where a block in outer row `row` reads a pooled slot (StepKernelLaunch::pool_source): the
// row of its window in the pooled array, the rows of the window's taps in the source, and which
// tap the block's neurons are.
struct PooledRows {
  std::int64_t pooled_row = 0;
  std::int64_t tap_rows[kMaxPool * kMaxPool] = {};
  int taps = 0;
  int self = 0;
};

PooledRows pooled_rows(const StepKernelLaunch& launch, std::int64_t k, std::int64_t row) {
  const std::int64_t height = launch.pool_height, width = launch.pool_width;
  const std::int64_t w = row % width, h = row / width % height, image = row / (width * height);
  PooledRows r;
  r.taps = static_cast<int>(k * k);
  r.self = static_cast<int>(h % k * k + w % k);
  r.pooled_row = (image * (height / k) + h / k) * (width / k) + w / k;
  const std::int64_t top_left = (image * height + h / k * k) * width + w / k * k;
  for (int u = 0; u < r.taps; ++u) r.tap_rows[u] = top_left + u / k * width + u % k;
  return r;
}

// The pooled slot's values at step t for the block's lanes (from lane offset i0 in its row).
void load_pooled(const Array& pooled, const Array& source, const PooledRows& r, std::int64_t steps,
                 std::int64_t inner, std::int64_t t, std::int64_t i0, int lanes, float* dst) {
  float g[kLanes];
  float taps[kMaxPool * kMaxPool][kLanes];
  load_lanes(pooled, (r.pooled_row * steps + t) * inner + i0, lanes, g);
  for (int u = 0; u < r.taps; ++u)
    load_lanes(source, (r.tap_rows[u] * steps + t) * inner + i0, lanes, taps[u]);
  for (int l = 0; l < lanes; ++l) {
    float window[kMaxPool * kMaxPool] = {};
    for (int u = 0; u < r.taps; ++u) window[u] = taps[u][l];
    dst[l] = p::pool_first_max_gradient(window, r.taps, r.self, g[l]);
  }
}

// The replay of one block: its program over t = 0..T-1 from the carried init values; the
// replayed values of step t go to out[(t * R + r) * kLanes + lane].
void replay_block(const StepKernel& k, const StepKernelLaunch& launch, std::int64_t n0,
                  std::int64_t row_start, std::int64_t inner, int lanes, float* out) {
  const StepReplay& r = *k.replay;
  const std::size_t count = r.body.instrs.size(), outs = r.values.size();
  std::vector<float> reg(count * kLanes), carried(r.carried.size() * kLanes);
  auto lane_ptr = [&](int id) { return reg.data() + static_cast<std::size_t>(id) * kLanes; };
  for (std::size_t c = 0; c < r.carried.size(); ++c)
    std::fill_n(carried.data() + c * kLanes, lanes, r.carried[c].init_value);
  for (std::int64_t t = 0; t < launch.steps; ++t) {
    for (std::size_t i = 0; i < count; ++i) {
      const ir::Instr& in = r.body.instrs[i];
      float* dst = lane_ptr(static_cast<int>(i));
      if (in.op == ir::Op::carried) {
        std::memcpy(dst, carried.data() + static_cast<std::size_t>(in.slot) * kLanes,
                    static_cast<std::size_t>(lanes) * sizeof(float));
      } else if (!load_leaf(k, launch, in, n0, row_start + t * inner, lanes, dst)) {
        const int arity = ir::op_info(in.op).arity;
        run_instr(in, lanes, arity >= 1 ? lane_ptr(in.a) : nullptr,
                  arity >= 2 ? lane_ptr(in.b) : nullptr, arity >= 3 ? lane_ptr(in.c) : nullptr,
                  dst);
      }
    }
    for (std::size_t v = 0; v < outs; ++v)
      std::memcpy(out + (static_cast<std::size_t>(t) * outs + v) * kLanes, lane_ptr(r.values[v]),
                  static_cast<std::size_t>(lanes) * sizeof(float));
    for (std::size_t c = 0; c < r.carried.size(); ++c)
      std::memcpy(carried.data() + c * kLanes, lane_ptr(r.carried_next[c]),
                  static_cast<std::size_t>(lanes) * sizeof(float));
  }
}

}  // namespace

void run_step_kernel_cpu(const StepKernel& k, const StepKernelLaunch& launch) {
  const std::int64_t n = launch.neurons, steps = launch.steps;
  if (n == 0) return;
  const std::int64_t inner = launch.inner > 0 ? launch.inner : n;
  if (n % inner != 0)
    throw ValueError(detail::cat("step kernel ", k.name, ": inner ", inner,
                                 " does not divide the neuron count ", n));
  const std::int64_t group = launch.final_group;
  if (group != 1 && (group != kFinalGroup || n % group != 0 || inner % group != 0))
    throw ValueError(detail::cat("step kernel ", k.name, ": final_group ", group, " must be 1 or ",
                                 kFinalGroup, " dividing neurons and inner"));
  static_assert(kLanes % kFinalGroup == 0, "a block holds whole groups");
  check_pool_launch(k, launch);
  const int pooled = pooled_slot(k);
  const std::int64_t pool = pooled >= 0 ? k.seq_in[static_cast<std::size_t>(pooled)].pool : 0;
  const std::size_t values = k.body.instrs.size();
  const std::int64_t row_blocks = (inner + kLanes - 1) / kLanes;  // per outer row
  const std::int64_t blocks = n / inner * row_blocks;
  std::mutex stats_mutex;
  std::vector<p::Flex16Stats> stats(k.seq_out.size(), p::Flex16Stats{0, 0, 0});
  // Replayed seq_in slot -> its index in the replay's values (and in a step's block of them).
  std::vector<int> replayed_index(k.seq_in.size(), -1);
  for (std::size_t s = 0, r = 0; s < k.seq_in.size(); ++s)
    if (k.seq_in[s].replayed) replayed_index[s] = static_cast<int>(r++);
  const std::size_t replayed = k.replay ? k.replay->values.size() : 0;

  backend::cpu::parallel_for(blocks, 1, [&](std::int64_t first, std::int64_t last) {
    std::vector<float> reg(values * kLanes);
    std::vector<float> carried(k.carried.size() * kLanes);
    // The replay's values for every step of the block: [step][replayed slot][lane].
    std::vector<float> replay_values(static_cast<std::size_t>(steps) * replayed * kLanes);
    std::vector<p::Flex16Stats> local(k.seq_out.size(), p::Flex16Stats{0, 0, 0});
    auto lane_ptr = [&](int id) { return reg.data() + static_cast<std::size_t>(id) * kLanes; };
    for (std::int64_t block = first; block < last; ++block) {
      const std::int64_t row = block / row_blocks;
      const std::int64_t i0 = block % row_blocks * kLanes;
      const std::int64_t n0 = row * inner + i0;  // first neuron of the block
      const int lanes = static_cast<int>(std::min<std::int64_t>(kLanes, inner - i0));
      // Element (t, n0) of every sequence is at row_start + t * inner.
      const std::int64_t row_start = row * steps * inner + i0;
      const PooledRows pool_rows = pool > 0 ? pooled_rows(launch, pool, row) : PooledRows{};
      for (std::size_t c = 0; c < k.carried.size(); ++c) {
        float* dst = carried.data() + c * kLanes;
        const Array& init = launch.carried_init[c];
        if (init.defined())
          load_lanes(init, n0, lanes, dst);
        else
          std::fill(dst, dst + lanes, k.carried[c].init_value);
      }
      // Constants, parameters and steady inputs do not change over the steps.
      for (std::size_t i = 0; i < values; ++i) {
        const ir::Instr& in = k.body.instrs[i];
        const bool steady_in =
            in.op == ir::Op::seq_in && k.seq_in[static_cast<std::size_t>(in.slot)].steady;
        if (in.op == ir::Op::constant || in.op == ir::Op::param || steady_in)
          load_leaf(k, launch, in, n0, 0, lanes, lane_ptr(static_cast<int>(i)));
      }
      if (k.replay) replay_block(k, launch, n0, row_start, inner, lanes, replay_values.data());
      for (std::int64_t step = 0; step < steps; ++step) {
        const std::int64_t t = k.reverse ? steps - 1 - step : step;
        const std::int64_t base = row_start + t * inner;
        for (std::size_t i = 0; i < values; ++i) {
          const ir::Instr& in = k.body.instrs[i];
          float* dst = lane_ptr(static_cast<int>(i));
          switch (in.op) {
            case ir::Op::constant:
            case ir::Op::param:
              break;
            case ir::Op::seq_in:
              if (const int r = replayed_index[static_cast<std::size_t>(in.slot)]; r >= 0)
                std::memcpy(dst, replay_values.data() + (t * replayed + r) * kLanes,
                            static_cast<std::size_t>(lanes) * sizeof(float));
              else if (in.slot == pooled)
                load_pooled(launch.seq_in[static_cast<std::size_t>(in.slot)], launch.pool_source,
                            pool_rows, steps, inner, t, i0, lanes, dst);
              else if (!k.seq_in[static_cast<std::size_t>(in.slot)].steady)
                load_lanes(launch.seq_in[static_cast<std::size_t>(in.slot)], base, lanes, dst);
              break;
            case ir::Op::carried:
              std::memcpy(dst, carried.data() + static_cast<std::size_t>(in.slot) * kLanes,
                          static_cast<std::size_t>(lanes) * sizeof(float));
              break;
            default: {
              const int arity = ir::op_info(in.op).arity;
              run_instr(in, lanes, arity >= 1 ? lane_ptr(in.a) : nullptr,
                        arity >= 2 ? lane_ptr(in.b) : nullptr,
                        arity >= 3 ? lane_ptr(in.c) : nullptr, dst);
            }
          }
        }
        for (std::size_t o = 0; o < k.seq_out.size(); ++o)
          store_lanes(launch.seq_out[o], base, lanes, lane_ptr(k.seq_out_value[o]), local[o]);
        for (std::size_t c = 0; c < k.carried.size(); ++c)
          std::memcpy(carried.data() + c * kLanes, lane_ptr(k.carried_next[c]),
                      static_cast<std::size_t>(lanes) * sizeof(float));
      }
      for (std::size_t c = 0; c < k.carried.size(); ++c) {
        const Array& final_array = launch.carried_final[c];
        if (!final_array.defined()) continue;
        const float* v = carried.data() + c * kLanes;
        float* out = static_cast<float*>(final_array.data());
        if (!k.carried[c].summed_in_groups || group == 1) {
          std::memcpy(out + n0, v, static_cast<std::size_t>(lanes) * sizeof(float));
          continue;
        }
        // A block starts a group and holds whole groups (group divides inner and kLanes); each
        // group summed as a balanced binary tree in neuron order, as the CUDA kernel sums it.
        for (int l0 = 0; l0 < lanes; l0 += static_cast<int>(group)) {
          float tree[kFinalGroup];
          std::memcpy(tree, v + l0, sizeof tree);
          for (int w = 1; w < kFinalGroup; w *= 2)
            for (int l = 0; l < kFinalGroup; l += 2 * w) tree[l] = tree[l] + tree[l + w];
          out[(n0 + l0) / group] = tree[0];
        }
      }
    }
    std::lock_guard<std::mutex> lock(stats_mutex);
    for (std::size_t o = 0; o < stats.size(); ++o) {
      stats[o].max_abs_m = std::max(stats[o].max_abs_m, local[o].max_abs_m);
      stats[o].saturated += local[o].saturated;
      stats[o].nan_count += local[o].nan_count;
    }
  });
  for (std::size_t o = 0; o < k.seq_out.size(); ++o)
    if (launch.seq_out[o].dtype() == DType::flex16)
      ArrayAccess::storage(launch.seq_out[o]).set_stats(stats[o]);
}

}  // namespace flexkit::snn
