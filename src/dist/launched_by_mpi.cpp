#include <cstdlib>

#include "flexkit/distributed.hpp"

namespace flexkit::dist {

bool launched_by_mpi() {
  // Open MPI's launcher, then PMI / PMIx ones (MPICH's Hydra, Slurm's srun).
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(name)) return true;
  return false;
}

}  // namespace flexkit::dist
