// Data-parallel training: the collectives a trainer process needs from its job.
//
// One process per device; every process runs the same training on its shard of each global
// batch, and the gradients are summed over the processes (all-reduced) before the optimizer
// step, so that every process keeps the same weights. The trainer only sees this interface;
// mpi_world() (the flexkit_mpi library) gives one over MPI, for processes launched by
// `mpirun -np N`.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <stdexcept>

namespace flexkit::dist {

// A collective that failed or did not complete in time (a process died or stopped answering).
class DistributedError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The processes of one job. Every process calls the same collectives in the same order; buffers
// are host memory. `what` names the collective in error messages.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The rank among the processes of this host (which GPU to take).
  virtual int local_rank() const = 0;
  // Element-wise sums over the processes, into every process's buffer.
  virtual void all_reduce_sum(float* data, std::size_t count, const std::string& what) = 0;
  virtual void all_reduce_sum(double* data, std::size_t count, const std::string& what) = 0;
  virtual void all_reduce_sum(std::int64_t* data, std::size_t count, const std::string& what) = 0;
  // A collective under way: wait() returns when it is complete (or stops the job past the
  // timeout, as the blocking calls do); progress() lets it advance meanwhile.
  class Pending {
   public:
    virtual ~Pending() = default;
    virtual void progress() = 0;
    virtual void wait() = 0;
  };
  // all_reduce_sum started without waiting: `data` must stay untouched until wait() returns.
  virtual std::unique_ptr<Pending> start_all_reduce_sum(float* data, std::size_t count,
                                                        const std::string& what) = 0;
  virtual std::unique_ptr<Pending> start_all_reduce_sum(std::int64_t* data, std::size_t count,
                                                        const std::string& what) = 0;
  // Every process's `bytes` bytes, in rank order, into `all` (size() * bytes).
  virtual void all_gather(const void* mine, void* all, std::size_t bytes,
                          const std::string& what) = 0;
  // Rank `root`'s bytes into every process's buffer.
  virtual void broadcast(void* data, std::size_t bytes, int root, const std::string& what) = 0;
  // Stops every process of the job (after a process's error, so that the others do not wait
  // for it in a collective). Does not return.
  [[noreturn]] virtual void abort(int code) = 0;
};

// Whether this process was started by an MPI launcher (mpirun / mpiexec of Open MPI or MPICH).
bool launched_by_mpi();

}  // namespace flexkit::dist
