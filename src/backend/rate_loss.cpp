// The fused rate loss: the backend that runs it.
#include "backend/rate_loss.hpp"

namespace flexkit::backend {

void run_rate_loss(const portable::RateLossArgs& args, Device device) {
  if (device.is_cuda())
    run_rate_loss_cuda(args, device.index);
  else
    run_rate_loss_cpu(args);
}

}  // namespace flexkit::backend
