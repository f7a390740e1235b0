// The Communicator of a job launched by `mpirun -np N` (link flexkit::flexkit_mpi; present when
// MPI was found at build time).
#pragma once
#include <memory>

#include "flexkit/distributed.hpp"

namespace flexkit::dist {

// MPI's world: initialises MPI on the first call (and finalises it at exit). A collective that
// has not completed after `timeout_seconds` (a process died or hangs) prints which collective
// and stops the whole job (MPI_Abort) rather than waiting for ever.
std::shared_ptr<Communicator> mpi_world(double timeout_seconds);

}  // namespace flexkit::dist
