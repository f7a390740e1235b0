#include "flexkit/train.hpp"

namespace flexkit::nn {

const std::vector<Preset>& presets() {
  static const std::vector<Preset> kPresets = {
      {"mlp",
       "a spiking MLP that suits the CPU: 784-512 LIF-10 LIF, T = 4",
       "flatten linear(512) sn linear(10) sn",
       "lif",
       {},
       4,
       10,
       128,
       1e-3,
       0.9,
       0.0,
       false,
       "adam",
       "mse",
       "cosine"},
      {"csnn",
       "SpikingJelly's Fashion-MNIST network: two conv3x3(128)-BN-IF-maxpool2 blocks, FC 2048-IF, "
       "FC 10-IF, ATan surrogate, T = 4, MSE on the rate, SGD 0.1 momentum 0.9, cosine",
       "conv(128, 3, padding=1, bias=false) bn sn maxpool(2) "
       "conv(128, 3, padding=1, bias=false) bn sn maxpool(2) "
       "flatten linear(2048, bias=false) sn linear(10, bias=false) sn",
       "if",
       {{"surrogate", "atan(2)"}},
       4,
       64,
       128,
       0.1,
       0.9,
       0.0,
       false,
       "sgd",
       "mse",
       "cosine"},
  };
  return kPresets;
}

}  // namespace flexkit::nn
