#pragma once
// The communicator: the job's processes (ranks) and the collectives that move buffers between
// them, over OpenMPI. MindSpore's names live in kiln::communication (below).
//
//   kiln::communication::init();   // joins the job mpirun started; alone, a job of one
//   int rank = kiln::communication::get_rank(), size = kiln::communication::get_group_size();
//
// MPI calls are made one at a time, in the order the program asked for them, which is the same
// order on every rank, so collectives always match. A collective started asynchronously
// (all_reduce_async) runs on the communicator's thread while the caller computes; a blocking one
// runs on the caller's thread when the communicator's thread is idle, else queues behind it.
// With one rank every collective is a copy or nothing.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/dtype.h"
#include "kiln/core/error.h"

namespace kiln::comm {

// An error every rank raises at the same point, having found it together (the ranks disagree
// on the model, say): each rank reports it and the job ends normally, with no rank left
// waiting. Any other error on one rank ends the job through abort_job.
class CollectiveError : public Error {
 public:
  using Error::Error;
};

enum class ReduceOp : uint8_t { sum, max, min };

// Joins the job (MPI_Init_thread) when this process was started by mpirun, else makes a
// single-process job. Idempotent. MPI is finalized at exit.
void init();
bool initialized();
// This process's rank and the number of ranks (0 and 1 before init and without a launcher).
int rank();
int size();
// Ranks on this host (OpenMPI's local size), to share its cores.
int local_size();
// Whether this process was started by a launcher (mpirun) as part of a job.
bool launched_by_mpirun();

// A collective started by an *_async call; wait() returns when its buffers are final and
// rethrows its error, if any. Destroying an unwaited Work waits.
class Work {
 public:
  struct State;
  Work() = default;
  explicit Work(std::shared_ptr<State> state) : state_(std::move(state)) {}
  Work(Work&&) noexcept = default;
  Work& operator=(Work&& other) noexcept;
  ~Work();
  void wait();
  bool pending() const { return state_ != nullptr; }

 private:
  std::shared_ptr<State> state_;
};

// The ranks a collective runs among, ascending; every rank of a group calls it with the same
// group, each rank with its own (tensor parallelism reduces over one device-matrix axis at a
// time). Empty: every rank. A group's MPI communicator is made on first use and kept.
using Group = std::vector<int64_t>;

// In place: every rank's `data` (count elements) becomes the reduction over ranks.
Work all_reduce_async(void* data, int64_t count, DType dtype, ReduceOp op = ReduceOp::sum);
void all_reduce(void* data, int64_t count, DType dtype, ReduceOp op = ReduceOp::sum,
                const Group& group = {});
// Root's `data` is copied to every rank's.
void broadcast(void* data, int64_t count, DType dtype, int root);
// `recv` (group size * count elements) holds every rank's `send` (count elements), in the
// group's order.
void all_gather(const void* send, void* recv, int64_t count, DType dtype, const Group& group = {});
// `send` holds one block of count elements per rank of the group; `recv` gets this rank's
// block (by its place in the group) of their reduction.
void reduce_scatter(const void* send, void* recv, int64_t count, DType dtype,
                    ReduceOp op = ReduceOp::sum, const Group& group = {});
// `send` holds one block of count elements per rank of the group, in the group's order; `recv`
// gets, in the same order, each rank's block for this rank (by its place in the group).
void all_to_all(const void* send, void* recv, int64_t count, DType dtype, const Group& group = {});
// The number of ranks in `group` (size() when empty); throws Error naming the group when this
// rank is not in it or it is not ascending within [0, size()).
int group_size(const Group& group);
// This rank's place in `group` (rank() when empty).
int group_rank(const Group& group);
void barrier();

// What the communicator's thread has done since the last reset: collectives run, the time it
// spent in them, and how long callers were blocked waiting for one (Work::wait). The share of
// communication hidden behind computation is 1 - waited / busy.
struct Stats {
  int64_t collectives = 0;
  int64_t bytes = 0;
  int64_t busy_ns = 0;
  int64_t waited_ns = 0;
};
Stats stats();
void reset_stats();

// Ends the whole job after printing `message` (a rank's error) on stderr: MPI_Abort, so the
// launcher stops every other rank instead of leaving them waiting in a collective.
[[noreturn]] void abort_job(const std::string& message, int exit_code);

}  // namespace kiln::comm

namespace kiln::communication {
// MindSpore's names (mindspore.communication).
inline void init() {
  comm::init();
}
inline int get_rank() {
  return comm::rank();
}
inline int get_group_size() {
  return comm::size();
}
inline int get_local_rank_size() {
  return comm::local_size();
}
}  // namespace kiln::communication
