// The device half of test_autoflex: one thread replays the writes through the manager, as a
// kernel that updates a tensor's exponent after its write would.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "autoflex_device.hpp"

namespace autoflex_test {
namespace {

__global__ void replay(const Write* writes, int count, flexkit::portable::AutoflexState* states) {
  flexkit::portable::AutoflexState s = flexkit::portable::autoflex_initial();
  for (int i = 0; i < count; ++i) {
    flexkit::portable::autoflex_record(s, writes[i].iwl, writes[i].max_abs_m, writes[i].saturated,
                                       0);
    states[i] = s;
  }
}

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

}  // namespace

std::vector<flexkit::portable::AutoflexState> record_on_device(const std::vector<Write>& writes) {
  using flexkit::portable::AutoflexState;
  std::vector<AutoflexState> states(writes.size());
  Write* d_writes = nullptr;
  AutoflexState* d_states = nullptr;
  check(cudaMalloc(&d_writes, writes.size() * sizeof(Write)), "cudaMalloc");
  check(cudaMalloc(&d_states, states.size() * sizeof(AutoflexState)), "cudaMalloc");
  check(cudaMemcpy(d_writes, writes.data(), writes.size() * sizeof(Write), cudaMemcpyHostToDevice),
        "cudaMemcpy");
  replay<<<1, 1>>>(d_writes, static_cast<int>(writes.size()), d_states);
  check(cudaGetLastError(), "replay launch");
  check(cudaMemcpy(states.data(), d_states, states.size() * sizeof(AutoflexState),
                   cudaMemcpyDeviceToHost),
        "cudaMemcpy");
  cudaFree(d_writes);
  cudaFree(d_states);
  return states;
}

}  // namespace autoflex_test
