#include "nn/train/data_parallel.hpp"

#include <vector>

#include "core/text.hpp"
#include "flexkit/error.hpp"
#include "nn/train/checkpoint.hpp"

namespace flexkit::nn {

using detail::cat;

// Every process of a data-parallel run must train the same thing: their resolved options and
// models are compared before the first step.
void check_same_configuration(dist::Communicator& comm, const std::string& text,
                              std::uint64_t model) {
  const std::uint64_t mine = fnv1a(text.data(), text.size()) ^ model;
  std::vector<std::uint64_t> all(static_cast<std::size_t>(comm.size()));
  comm.all_gather(&mine, all.data(), sizeof mine, "the configuration check");
  std::string differ;
  for (std::size_t r = 0; r < all.size(); ++r)
    if (all[r] != all[0]) differ += cat(differ.empty() ? "" : ", ", r);
  if (!differ.empty())
    throw ValueError(cat("--distributed: rank(s) ", differ,
                         " were started with other options or another model than rank 0; "
                         "every process of the job needs the same options"));
}

// The processes start from rank 0's values of every parameter and buffer (the same seed makes
// them equal already; this makes it so whatever the initialisation).
void broadcast_parameters(Sequential& net, dist::Communicator& comm, bool buffers_only) {
  for (auto& [name, p] : net.named_parameters()) {
    if (buffers_only && p->trainable) continue;
    std::vector<float> v = p->value.to_floats();
    comm.broadcast(v.data(), v.size() * sizeof(float), 0, cat("the broadcast of ", name));
    p->value.assign_floats(v);
  }
}

void leave_exact_gradient_sums(Sequential& net) {
  for (std::size_t i = 0; i < net.size(); ++i) {
    try {
      net[i].set_gradient_sums(true);
    } catch (const UnsupportedError& e) {
      throw ValueError(cat("--distributed with --precision flex16: layer ", i + 1, ", ", e.what(),
                           "; train this model in f32 over several processes, or in ",
                           "flex16 in one"));
    }
  }
}

void ExponentAgreement::all_gather(const void* mine, void* all, std::size_t bytes) {
  comm_.all_gather(mine, all, bytes, "the flex16 exponent agreement");
}

}  // namespace flexkit::nn
