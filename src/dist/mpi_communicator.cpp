// The Communicator over MPI. Every collective is started non-blocking and then polled against a
// deadline: MPI itself would wait for ever for a process that hangs, and a process that died is
// usually reported by the launcher, but not by every launcher.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "flexkit/distributed_mpi.hpp"

namespace flexkit::dist {

namespace {

std::string mpi_message(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, static_cast<std::size_t>(length));
}

class MpiWorld final : public Communicator {
 public:
  explicit MpiWorld(double timeout) : timeout_(timeout) {
    int initialised = 0;
    MPI_Initialized(&initialised);
    if (!initialised) {
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
      owns_ = true;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
    MPI_Comm node;
    check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node),
          "MPI_Comm_split_type");
    check(MPI_Comm_rank(node, &local_rank_), "MPI_Comm_rank (node)");
    MPI_Comm_free(&node);
  }
  ~MpiWorld() override {
    int finalised = 0;
    MPI_Finalized(&finalised);
    if (owns_ && !finalised) MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }

  void all_reduce_sum(float* data, std::size_t count, const std::string& what) override {
    reduce(data, count, MPI_FLOAT, what);
  }
  void all_reduce_sum(double* data, std::size_t count, const std::string& what) override {
    reduce(data, count, MPI_DOUBLE, what);
  }
  void all_reduce_sum(std::int64_t* data, std::size_t count, const std::string& what) override {
    reduce(data, count, MPI_INT64_T, what);
  }
  std::unique_ptr<Pending> start_all_reduce_sum(float* data, std::size_t count,
                                                const std::string& what) override {
    return start_reduce(data, count, MPI_FLOAT, what);
  }
  std::unique_ptr<Pending> start_all_reduce_sum(std::int64_t* data, std::size_t count,
                                                const std::string& what) override {
    return start_reduce(data, count, MPI_INT64_T, what);
  }
  void all_gather(const void* mine, void* all, std::size_t bytes,
                  const std::string& what) override {
    MPI_Request request;
    check(MPI_Iallgather(mine, as_int(bytes, what), MPI_BYTE, all, as_int(bytes, what), MPI_BYTE,
                         MPI_COMM_WORLD, &request),
          what);
    wait(request, what);
  }
  void broadcast(void* data, std::size_t bytes, int root, const std::string& what) override {
    MPI_Request request;
    check(MPI_Ibcast(data, as_int(bytes, what), MPI_BYTE, root, MPI_COMM_WORLD, &request), what);
    wait(request, what);
  }
  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }

 private:
  struct MpiPending final : Pending {
    MpiPending(MpiWorld& world, std::string what) : world(world), what(std::move(what)) {}
    ~MpiPending() override {
      try {
        if (!done) wait();  // MPI must see every request completed
      } catch (...) {
      }
    }
    void progress() override {
      int flag = 0;
      if (!done) world.check(MPI_Test(&request, &flag, MPI_STATUS_IGNORE), what);
      done = done || flag;
    }
    void wait() override {
      if (!done) world.wait(request, what);
      done = true;
    }
    MpiWorld& world;
    std::string what;
    MPI_Request request = MPI_REQUEST_NULL;
    bool done = false;
  };

  void check(int code, const std::string& what) const {
    if (code != MPI_SUCCESS)
      throw DistributedError("rank " + std::to_string(rank_) + ": " + what +
                             " failed: " + mpi_message(code));
  }
  int as_int(std::size_t count, const std::string& what) const {
    if (count > static_cast<std::size_t>(2147483647))
      throw DistributedError(what + ": " + std::to_string(count) +
                             " elements are more than one MPI call takes");
    return static_cast<int>(count);
  }
  std::unique_ptr<Pending> start_reduce(void* data, std::size_t count, MPI_Datatype type,
                                        const std::string& what) {
    auto pending = std::make_unique<MpiPending>(*this, what);
    check(MPI_Iallreduce(MPI_IN_PLACE, data, as_int(count, what), type, MPI_SUM, MPI_COMM_WORLD,
                         &pending->request),
          what);
    return pending;
  }
  void reduce(void* data, std::size_t count, MPI_Datatype type, const std::string& what) {
    MPI_Request request;
    check(MPI_Iallreduce(MPI_IN_PLACE, data, as_int(count, what), type, MPI_SUM, MPI_COMM_WORLD,
                         &request),
          what);
    wait(request, what);
  }
  // Polls until done; past the deadline, says which collective and stops the job.
  void wait(MPI_Request& request, const std::string& what) {
    const auto start = std::chrono::steady_clock::now();
    for (int polls = 0;; ++polls) {
      int done = 0;
      check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what);
      if (done) return;
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (waited > timeout_) {
        std::fprintf(stderr,
                     "flexkit: rank %d of %d: %s did not complete within %g s: another process "
                     "of the job died or stopped answering; stopping the job\n",
                     rank_, size_, what.c_str(), timeout_);
        std::fflush(stderr);
        abort(1);
      }
      // Spin briefly (a collective between busy processes completes in microseconds), then
      // leave the core to the others: ranks may share cores.
      if (polls > 1000) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  double timeout_;
  bool owns_ = false;
  int rank_ = 0, size_ = 1, local_rank_ = 0;
};

}  // namespace

std::shared_ptr<Communicator> mpi_world(double timeout_seconds) {
  static std::mutex mutex;
  static std::shared_ptr<Communicator> world;
  std::lock_guard<std::mutex> lock(mutex);
  if (!world) world = std::make_shared<MpiWorld>(timeout_seconds);
  return world;
}

}  // namespace flexkit::dist
