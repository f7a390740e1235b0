// The CUDA runtime layer on a real GPU: devices, the caching allocator, out-of-memory handling,
// streams, and kernels compiled at run time producing the host codec's exact bits.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "backend/cuda/rtc_compiler.hpp"
#include "core/upload.hpp"
#include "flexkit/flexkit.hpp"
#include "support/test_device.hpp"

namespace flexkit {
namespace {

using test::device;

TEST(CudaRuntime, DeviceIsDescribed) {
  ASSERT_GT(cuda::device_count(), 0);
  cuda::DeviceInfo info = cuda::device_info(device().index);
  EXPECT_FALSE(info.name.empty());
  EXPECT_GE(info.compute_major, 7);
  EXPECT_GT(info.total_memory, std::size_t{1} << 30);
  EXPECT_GT(info.multiprocessors, 0);
  cuda::Versions v = cuda::versions();
  EXPECT_GT(v.driver, 0);
  EXPECT_GT(v.nvrtc_major, 0);
  EXPECT_THROW(cuda::device_info(cuda::device_count()), DeviceError);
}

TEST(CudaRuntime, UploadsWithoutWaitingArriveInStreamOrder) {
  // Behind a long queue of work, more uploads than the pinned buffers, each source overwritten
  // (and the last one freed) as soon as the call returns: every array holds what it was given,
  // and work queued after an upload reads it.
  const Device gpu = test::device();
  cuda::Stream stream(gpu.index);
  cuda::StreamGuard guard(stream);
  Array big = Array::zeros({std::int64_t{1} << 26}, DType::f32, gpu);
  for (int i = 0; i < 8; ++i) assign(big, exp(Expr(big) * 0.5) - 1.0);  // keeps the GPU busy
  std::vector<Array> uploaded, doubled;
  std::vector<float> values(100003);
  for (int k = 0; k < 12; ++k) {
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = float(k) * 1000.0f + float(i % 997);
    const Array host =
        Array::from_vector(values, {static_cast<std::int64_t>(values.size())}, Device::cpu());
    uploaded.push_back(detail::upload_without_waiting(host, gpu));
    doubled.push_back(evaluate(Expr(uploaded.back()) * 2.0));
  }
  for (int k = 0; k < 12; ++k) {
    const std::vector<float> got = uploaded[k].to_floats(), twice = doubled[k].to_floats();
    for (std::size_t i = 0; i < values.size(); ++i) {
      const float expected = float(k) * 1000.0f + float(i % 997);
      ASSERT_EQ(got[i], expected) << k << " " << i;
      ASSERT_EQ(twice[i], 2.0f * expected) << k << " " << i;
    }
  }
  // A cpu target is the array itself; labels (i32) go the same way as images.
  const Array labels = Array::from_vector(std::vector<std::int32_t>{3, 1, 4}, {3}, Device::cpu());
  EXPECT_TRUE(detail::upload_without_waiting(labels, Device::cpu()).shares_storage(labels));
  EXPECT_EQ(detail::upload_without_waiting(labels, gpu).to_vector<std::int32_t>(),
            (std::vector<std::int32_t>{3, 1, 4}));
}

TEST(CudaRuntime, FreedBlocksAreReused) {
  const int dev = device().index;
  void* first = nullptr;
  {
    Array a = Array::empty({12345}, DType::f32, device());
    first = a.data();
  }
  cuda::AllocatorStats before = cuda::allocator_stats(dev);
  Array b = Array::empty({12345}, DType::f32, device());
  EXPECT_EQ(b.data(), first);  // same block back, no cudaMalloc
  cuda::AllocatorStats after = cuda::allocator_stats(dev);
  EXPECT_EQ(after.cache_hits, before.cache_hits + 1);
  EXPECT_EQ(after.device_allocations, before.device_allocations);
  // A request in another size class does not take it.
  Array c = Array::empty({1 << 20}, DType::f32, device());
  EXPECT_NE(c.data(), first);
}

TEST(CudaRuntime, EmptyCacheReturnsFreeBlocks) {
  const int dev = device().index;
  { Array a = Array::empty({1 << 22}, DType::u8, device()); }
  EXPECT_GE(cuda::allocator_stats(dev).cached_bytes, std::size_t{1} << 22);
  cuda::empty_cache();
  EXPECT_EQ(cuda::allocator_stats(dev).cached_bytes, 0u);
}

TEST(CudaRuntime, ImpossibleAllocationIsANamedErrorAndTheProcessGoesOn) {
  Array keep = Array::ones({1000}, DType::f32, device());
  try {
    Array huge = Array::empty({std::int64_t{1} << 50}, DType::u8, device());  // 1 PiB
    FAIL() << "a 1 PiB allocation succeeded";
  } catch (const OutOfMemoryError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("1.00 PiB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("1125899906842624 bytes"), std::string::npos) << msg;
    EXPECT_NE(msg.find("holds"), std::string::npos) << msg;
    EXPECT_NE(msg.find(device().str()), std::string::npos) << msg;
  }
  // The device still works and earlier arrays are intact.
  EXPECT_EQ(keep.to_doubles(), std::vector<double>(1000, 1.0));
  Array again = Array::arange(10, DType::i32, device());
  EXPECT_EQ(again.to_doubles()[9], 9.0);
}

TEST(CudaRuntime, WorkFollowsTheCurrentStream) {
  cuda::Stream stream(device().index);
  std::vector<float> x(1 << 16);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.5f;
  {
    cuda::StreamGuard guard(stream);
    EXPECT_EQ(cuda::current_stream(device().index), stream.handle());
    Array a = Array::from_vector(x, {256, 256}, device());
    Array t = a.T().clone();
    stream.synchronize();
    EXPECT_EQ(t.to_floats()[1], x[256]);
  }
  EXPECT_EQ(cuda::current_stream(device().index), nullptr);
}

TEST(CudaRuntime, RunTimeCompiledCodecMatchesHostBitForBit) {
  const std::string source = R"(
#include "flexkit/rtc_prelude.cuh"
using namespace flexkit::portable;
FLEXKIT_KERNEL void codec(const float* x, int n, int iwl, unsigned long long seed, short* rne,
                          short* stochastic, unsigned short* bf16, float* decoded, int* iwl_for) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  rne[i] = flex16_encode(x[i], iwl).m;
  stochastic[i] = flex16_encode_stochastic(x[i], iwl, seed, (unsigned long long)i).m;
  bf16[i] = float_to_bf16_bits(x[i]);
  decoded[i] = flex16_decode(rne[i], iwl);
  iwl_for[i] = flex16_iwl_for_max(fabsf(x[i]));
}
)";
  cuda::DeviceInfo info = cuda::device_info(device().index);
  std::string cubin = backend::cuda::compile_cubin(
      "codec_test", source, backend::cuda::rtc_arch_for(info.compute_major, info.compute_minor));
  backend::cuda::RtcModule module(device().index, cubin);

  const int n = 1 << 20;
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> mant(-2.0f, 2.0f);
  std::uniform_int_distribution<int> exp(-40, 40);
  std::vector<float> x(n);
  for (auto& v : x) v = std::ldexp(mant(rng), exp(rng));
  x[0] = 0.0f;
  x[1] = 2.5f * std::ldexp(1.0f, -15);  // an exact tie at iwl 0
  x[2] = 1e-40f;                        // subnormal
  for (int iwl : {-30, 0, 1, 17}) {
    Array xd = Array::from_vector(x, {n}, device());
    Array rne = Array::empty({n}, DType::flex16, device());
    Array sr = Array::empty({n}, DType::flex16, device());
    Array bf = Array::empty({n}, DType::bf16, device());
    Array dec = Array::empty({n}, DType::f32, device());
    Array iw = Array::empty({n}, DType::i32, device());
    void* px = xd.data();
    void *prne = rne.data(), *psr = sr.data(), *pbf = bf.data(), *pdec = dec.data(),
         *piw = iw.data();
    int count = n;
    unsigned long long seed = 1234;
    void* args[] = {&px, &count, &iwl, &seed, &prne, &psr, &pbf, &pdec, &piw};
    module.launch("codec", (n + 255) / 256, 256, args);
    auto g_rne = rne.to_vector<std::int16_t>();
    auto g_sr = sr.to_vector<std::int16_t>();
    auto g_bf = bf.to_vector<BF16>();
    auto g_dec = dec.to_vector<float>();
    auto g_iw = iw.to_vector<std::int32_t>();
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(g_rne[i], portable::flex16_encode(x[i], iwl).m) << "x=" << x[i] << " iwl=" << iwl;
      ASSERT_EQ(g_sr[i], portable::flex16_encode_stochastic(x[i], iwl, seed, i).m) << x[i];
      ASSERT_EQ(g_bf[i].bits, portable::float_to_bf16_bits(x[i])) << x[i];
      float host_decoded = portable::flex16_decode(g_rne[i], iwl);
      ASSERT_EQ(std::memcmp(&g_dec[i], &host_decoded, sizeof(float)), 0) << g_rne[i];
      ASSERT_EQ(g_iw[i], portable::flex16_iwl_for_max(std::fabs(x[i]))) << x[i];
    }
  }
}

}  // namespace
}  // namespace flexkit
