// What the trainer adds to a step when it is one process of a data-parallel job: the checks
// that every process trains the same thing, the broadcasts that start them alike, and, for
// flex16, the exact gradient sums and the exponent agreement that make N processes give one
// process's weights bit for bit.
#pragma once
#include <cstdint>
#include <string>

#include "flexkit/autoflex.hpp"
#include "flexkit/distributed.hpp"
#include "flexkit/nn.hpp"

namespace flexkit::nn {

// Their resolved options and models are compared before the first step; a mismatch is a
// ValueError naming the ranks that differ from rank 0.
void check_same_configuration(dist::Communicator& comm, const std::string& text,
                              std::uint64_t model);

// The processes start from rank 0's values of every parameter (or only of the buffers: the
// BatchNorm running estimates before a test pass).
void broadcast_parameters(Sequential& net, dist::Communicator& comm, bool buffers_only);

// Every layer leaves exact integer gradient sums (Layer::set_gradient_sums); a layer that
// cannot is a ValueError that names it and says why.
void leave_exact_gradient_sums(Sequential& net);

// The processes' flex16 writes agree on their exponents (ShardedWrites) through the job.
class ExponentAgreement final : public ShardAgreement {
 public:
  explicit ExponentAgreement(dist::Communicator& comm) : comm_(comm) {}
  void all_gather(const void* mine, void* all, std::size_t bytes) override;
  int processes() const override { return comm_.size(); }

 private:
  dist::Communicator& comm_;
};

}  // namespace flexkit::nn
