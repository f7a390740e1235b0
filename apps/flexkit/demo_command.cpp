// flexkit demo: arrays, views, flex16, matrix products and .npy files, on the cpu and on cuda:0
// when present.
#include <cstdio>
#include <filesystem>

#include "cli_parse.hpp"
#include "commands.hpp"
#include "flexkit/expr.hpp"
#include "flexkit/flexkit.hpp"

namespace flexkit::cli {

namespace {

void show(const char* label, const Array& a) {
  std::printf("%s  -> %s\n%s\n\n", label, a.describe().c_str(), a.str().c_str());
}

void tour(Device device) {
  std::printf("== arrays on %s ==\n", device.str().c_str());
  Array a = Array::arange(18, DType::f32, device).reshape({3, 6});
  show("A = arange(18).reshape(3, 6)", a);
  show("A[:, 0:5:2]", a.index(":, 0:5:2"));
  show("A[::-1, -1]", a.index("::-1, -1"));
  show("A.T", a.T());
  Array b = a.index("1:, 1:3");
  b.fill(-1);
  show("A after A[1:, 1:3] = -1 (through the view)", a);

  std::printf("== flex16 on %s ==\n", device.str().c_str());
  std::vector<float> x = {0.5f, -0.25f, 1.0f};
  Array f = Array::from_floats(x, {3}, DType::flex16, device);
  auto m = f.to_vector<std::int16_t>();
  std::printf("[0.5, -0.25, 1.0] -> iwl %d, mantissas [%d, %d, %d]\n", f.iwl(), m[0], m[1], m[2]);
  Array s = Array::zeros({2}, DType::flex16, device);
  s.set_iwl(1);
  std::vector<float> y = {0.4f, 2.0f};
  s.assign_floats(y);
  auto back = s.to_floats();
  std::printf("[0.4, 2.0] at iwl 1 -> [%.15g, %.15g], saturated %llu, max|m| %d\n\n", back[0],
              back[1], static_cast<unsigned long long>(s.stats().saturated), s.stats().max_abs_m);

  std::printf("== fused expressions on %s ==\n", device.str().c_str());
  Array v = Array::arange(-3, 3, 1, DType::f32, device).reshape({2, 3});
  show("v", v);
  show("sig(v * 2 + 1) (one kernel)", evaluate(sig(v * 2 + 1)));
  show("softmax over rows: exp(v - max(v, 1)) / sum(exp(v - max(v, 1)), 1)",
       evaluate(exp(v - max(v, 1)) / sum(exp(v - max(v, 1)), 1)));
  Array w = Array::zeros({2, 3}, DType::flex16, device);
  assign(w, v * 0.3, {.iwl_policy = IwlPolicy::exact});
  show("flex16 w = v * 0.3 with the exact exponent policy", w);

  std::printf("== exact matrix products on %s ==\n", device.str().c_str());
  // flex16's (docs/flex16.md) discriminator: summed in float32, 32767² − 32767² + 1 loses the 1.
  Array da = Array::from_flex16(std::vector<std::int16_t>{32767, -32767, 1}, 15, {1, 3}, device);
  Array db = Array::from_flex16(std::vector<std::int16_t>{32767, 32767, 1}, 15, {3, 1}, device);
  show("[32767, -32767, 1] · [32767, 32767, 1]ᵀ in flex16 (float32 accumulation gives 0)",
       dot(da, db));
  Array spikes = Array::from_vector(std::vector<std::uint8_t>{1, 0, 1, 1, 1, 0}, {3, 2}, device);
  Array weights = Array::from_floats(std::vector<float>{0.5f, -0.25f, 1.0f, 0.75f, 0.125f, -1.0f},
                                     {2, 3}, DType::flex16, device);
  show("weights (flex16) · spikes (u8)", dot(weights, spikes));
}

}  // namespace

int demo_command(const Args& args) {
  CLI::App app{"A short tour of arrays, views, flex16 and .npy files (cpu, and cuda when present).",
               "flexkit demo"};
  if (const auto rc = parse(app, args)) return *rc;
  tour(Device::cpu());
  if (cuda::device_count() > 0)
    tour(Device::cuda(0));
  else
    std::printf("(no CUDA device here: the cuda tour is skipped)\n\n");

  auto dir = std::filesystem::temp_directory_path() / "flexkit-demo";
  std::filesystem::create_directories(dir);
  Array w = Array::from_floats(std::vector<float>{0.1f, -0.7f, 0.33f, 0.9f}, {2, 2}, DType::flex16);
  save_npy(dir / "w.npy", w);
  Array r = load_npy(dir / "w.npy");
  std::printf("== .npy ==\nsaved and reloaded %s (iwl in %s):\n%s\n", r.describe().c_str(),
              flex16_sidecar_path(dir / "w.npy").string().c_str(), r.str().c_str());
  return 0;
}

}  // namespace flexkit::cli
