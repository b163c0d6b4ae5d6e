#include "kiln/comm/communicator.h"

// MPI's C API only: the deprecated C++ bindings would need their own library.
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>
#include <sys/prctl.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "kiln/core/error.h"

namespace kiln::comm {

struct Work::State {
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  std::exception_ptr error;
  std::atomic<bool> waited_for{false};  // the caller blocks in wait(): nothing else to overlap
};

namespace {

struct Job {
  std::function<void(const Work::State&)> run;
  std::shared_ptr<Work::State> state;
  int64_t bytes = 0;
};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Counters {
  std::atomic<int64_t> collectives{0}, bytes{0}, busy_ns{0}, waited_ns{0};
};
Counters& counters() {
  static Counters c;
  return c;
}

// The communicator's thread. Jobs run in submission order, which is program order on every
// rank, so collectives always match; run_here lets a blocking caller make its call itself when
// nothing is queued. Either way one thread at a time is in MPI (MPI_THREAD_SERIALIZED).
class CommThread {
 public:
  CommThread() : thread_([this] { loop(); }) {}
  ~CommThread() { stop(); }

  std::shared_ptr<Work::State> submit(std::function<void(const Work::State&)> run, int64_t bytes) {
    auto state = std::make_shared<Work::State>();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      jobs_.push_back({std::move(run), state, bytes});
    }
    cv_.notify_one();
    return state;
  }

  // Runs a blocking collective on the calling thread when nothing is queued or running, so a
  // caller that waits anyway pays no hand-over to the thread: the order stays the submission
  // order and MPI still sees one thread at a time. Returns false (and runs nothing) otherwise.
  bool run_here(const std::function<void()>& run) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!jobs_.empty() || running_) return false;
      running_ = true;
    }
    std::exception_ptr error;
    try {
      run();
    } catch (...) {
      error = std::current_exception();
    }
    bool queued = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      running_ = false;
      queued = !jobs_.empty() || stopping_;
    }
    if (queued) cv_.notify_one();  // a job came meanwhile (another thread's)
    if (error) std::rethrow_exception(error);
    return true;
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) return;
      stopping_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void loop() {
    // Sleeps between polls of a collective in flight are short (see complete()): ask the kernel
    // for microsecond timer precision instead of its default 50 us slack.
    prctl(PR_SET_TIMERSLACK, 1000UL);
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock,
                 [this] { return (stopping_ && !running_) || (!jobs_.empty() && !running_); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
        running_ = true;
      }
      std::exception_ptr error;
      const int64_t begin = now_ns();
      try {
        job.run(*job.state);
      } catch (...) {
        error = std::current_exception();
      }
      Counters& c = counters();
      c.busy_ns += now_ns() - begin;
      c.bytes += job.bytes;
      ++c.collectives;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        running_ = false;
      }
      {
        std::lock_guard<std::mutex> lock(job.state->mutex);
        job.state->error = error;
        job.state->done = true;
      }
      job.state->done_cv.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  bool running_ = false;  // a collective is in MPI (on this thread or a run_here caller's)
  bool stopping_ = false;
  std::thread thread_;
};

struct Membership {
  bool initialized = false;
  bool mpi = false;  // MPI_Init_thread ran (launched by mpirun)
  int rank = 0;
  int size = 1;
  std::unique_ptr<CommThread> thread;
};

Membership& membership() {
  static Membership j;
  return j;
}

std::mutex& init_mutex() {
  static std::mutex m;
  return m;
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

std::string where() {
  return detail::concat("rank ", membership().rank, " of ", membership().size);
}

void check(int code, const std::string& what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw Error(detail::concat("communication: ", what, " failed on ", where(), ": ",
                             std::string(text, size_t(length))));
}

MPI_Datatype mpi_type(DType dtype, const char* what) {
  switch (dtype) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::i32:
      return MPI_INT32_T;
    case DType::i64:
      return MPI_INT64_T;
    case DType::u8:
    case DType::boolean:
      return MPI_UINT8_T;
    default:
      break;
  }
  throw Error(
      detail::concat("communication: ", what, " of ", dtype_name(dtype),
                     " data is not supported (f32, i32, i64, u8 and bool are); cast first"));
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return MPI_SUM;
    case ReduceOp::max:
      return MPI_MAX;
    case ReduceOp::min:
      return MPI_MIN;
  }
  return MPI_SUM;
}

void finalize_at_exit() {
  Membership& j = membership();
  if (j.thread) j.thread->stop();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (j.mpi && !finalized) MPI_Finalize();
}

void check_count(int64_t count, const char* what) {
  if (count < 0) throw Error(detail::concat("communication: ", what, ": negative count ", count));
}

// What the collectives of one block per rank check first. False for a group of this rank alone,
// whose result is its own block, copied into place.
bool needs_peers(const void* send, void* recv, int64_t count, DType dtype, const Group& group,
                 const char* what) {
  check_count(count, what);
  if (group_size(group) == 1) {
    if (count > 0 && send != recv) std::memmove(recv, send, size_t(count) * dtype_size(dtype));
    return false;
  }
  if (count > INT_MAX) {
    throw Error(detail::concat("communication: ", what, " of more than 2^31 elements"));
  }
  return true;
}

// Large all-reduces go in chunks of 4 MiB: OpenMPI's ring all-reduce allocates scratch of the
// message's size on every call, and above glibc's mmap threshold each call faults it in anew
// (measured here: 64 MiB at 0.26 GB/s in one call, 6–7 GB/s in 4 MiB pieces). Chunks also keep
// MPI's int counts in range.
constexpr int64_t kChunkBytes = int64_t(4) << 20;

std::shared_ptr<Work::State> submit(std::function<void(const Work::State&)> run,
                                    int64_t bytes = 0) {
  return membership().thread->submit(std::move(run), bytes);
}

// Polls a nonblocking collective to completion. While the caller computes (overlap), the
// thread sleeps between polls: a spinning wait would take the core from the computation that
// the communication is meant to hide behind. Once the caller waits for it, it spins.
int complete(MPI_Request& request, const Work::State& state) {
  const int64_t spin_until = now_ns() + 20'000;
  for (;;) {
    int done = 0;
    const int code = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (code != MPI_SUCCESS || done) return code;
    if (!state.waited_for.load(std::memory_order_relaxed) && now_ns() > spin_until) {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

// A collective the caller waits for: on the caller's thread when the communicator's thread is
// idle, else queued behind what is in flight.
void run_blocking(const std::function<void(const Work::State&)>& run, int64_t bytes) {
  CommThread& thread = *membership().thread;
  const int64_t begin = now_ns();
  static Work::State caller_waits;  // the caller blocks: nothing to overlap, poll without pause
  caller_waits.waited_for = true;
  if (thread.run_here([&] { run(caller_waits); })) {
    Counters& c = counters();
    const int64_t spent = now_ns() - begin;
    c.busy_ns += spent;
    c.waited_ns += spent;
    c.bytes += bytes;
    ++c.collectives;
    return;
  }
  Work(submit(run, bytes)).wait();
}

std::shared_ptr<Work::State> completed() {
  auto s = std::make_shared<Work::State>();
  s->done = true;
  return s;
}

}  // namespace

bool launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr;
}

void init() {
  std::lock_guard<std::mutex> lock(init_mutex());
  Membership& j = membership();
  if (j.initialized) return;
  if (launched_by_mpirun()) {
    int already = 0;
    MPI_Initialized(&already);
    if (!already) {
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
      if (provided < MPI_THREAD_SERIALIZED) {
        throw Error("communication: this MPI library gives no thread support above level " +
                    std::to_string(provided) + "; Kiln needs MPI_THREAD_SERIALIZED");
      }
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &j.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &j.size);
    j.mpi = true;
    j.thread = std::make_unique<CommThread>();
    std::atexit(finalize_at_exit);
  }
  j.initialized = true;
}

bool initialized() {
  return membership().initialized;
}
int rank() {
  return membership().rank;
}
int size() {
  return membership().size;
}
int local_size() {
  return membership().mpi ? env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1) : 1;
}

Work& Work::operator=(Work&& other) noexcept {
  if (this != &other) {
    if (state_) {
      try {
        wait();
      } catch (...) {
      }
    }
    state_ = std::move(other.state_);
  }
  return *this;
}

Work::~Work() {
  if (!state_) return;
  try {
    wait();
  } catch (...) {
    // An error nobody waited for: the job cannot go on consistently.
    // Status 2, as for any error that stops a run (docs/errors.md; 1 is a check's finding).
    abort_job("communication failed in a collective whose result was never waited for", 2);
  }
}

void Work::wait() {
  if (!state_) return;
  std::shared_ptr<State> s = std::move(state_);
  s->waited_for = true;
  std::unique_lock<std::mutex> lock(s->mutex);
  if (!s->done) {
    const int64_t begin = now_ns();
    s->done_cv.wait(lock, [&] { return s->done; });
    counters().waited_ns += now_ns() - begin;
  }
  if (s->error) std::rethrow_exception(s->error);
}

namespace {

// In place, chunk by chunk. A collective the caller waits for is OpenMPI's blocking
// MPI_Allreduce, its fastest at every size. One started for overlap is MPI_Iallreduce, polled
// with pauses while the caller computes (complete()). Blocking and nonblocking collectives never
// match each other in MPI, so the choice follows the API the program called (the same on every
// rank), never timing.
void all_reduce_in_chunks(void* data, int64_t count, DType dtype, ReduceOp op, bool blocking,
                          const Work::State& state, MPI_Comm comm = MPI_COMM_WORLD) {
  const MPI_Datatype type = mpi_type(dtype, "all_reduce");
  const size_t element = dtype_size(dtype);
  const int64_t chunk = kChunkBytes / int64_t(element);
  for (int64_t done = 0; done < count; done += chunk) {
    const int n = int(std::min(chunk, count - done));
    void* part = static_cast<char*>(data) + size_t(done) * element;
    int code;
    if (blocking) {
      code = MPI_Allreduce(MPI_IN_PLACE, part, n, type, mpi_op(op), comm);
    } else {
      MPI_Request request;
      code = MPI_Iallreduce(MPI_IN_PLACE, part, n, type, mpi_op(op), MPI_COMM_WORLD, &request);
      if (code == MPI_SUCCESS) code = complete(request, state);
    }
    if (code != MPI_SUCCESS) {
      check(code, detail::concat("all_reduce of ", count, " ", dtype_name(dtype), " elements"));
    }
  }
}

// The communicator of a group, made once (MPI_Comm_create_group: collective over the group's
// members only, which all reach the same collective together). Called on the thread that makes
// MPI calls, one at a time.
MPI_Comm communicator_of(const Group& group) {
  if (group.empty() || int64_t(group.size()) == int64_t(size())) return MPI_COMM_WORLD;
  static std::mutex mutex;
  static std::map<Group, MPI_Comm> made;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = made.find(group);
  if (it != made.end()) return it->second;
  MPI_Group world_group, sub_group;
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  std::vector<int> ranks(group.begin(), group.end());
  MPI_Group_incl(world_group, int(ranks.size()), ranks.data(), &sub_group);
  MPI_Comm comm;
  check(MPI_Comm_create_group(MPI_COMM_WORLD, sub_group, int(group.front()), &comm),
        "creating the communicator of a rank group");
  MPI_Group_free(&sub_group);
  MPI_Group_free(&world_group);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  made.emplace(group, comm);
  return comm;
}

std::string group_str(const Group& group) {
  std::string s = "[";
  for (size_t i = 0; i < group.size(); ++i) s += (i ? ", " : "") + std::to_string(group[i]);
  return s + "]";
}

}  // namespace

int group_size(const Group& group) {
  if (group.empty()) return size();
  group_rank(group);
  return int(group.size());
}

int group_rank(const Group& group) {
  if (group.empty()) return rank();
  int place = -1;
  for (size_t i = 0; i < group.size(); ++i) {
    if (group[i] < 0 || group[i] >= size() || (i > 0 && group[i] <= group[i - 1])) {
      throw Error("communication: group " + group_str(group) +
                  " is not ascending ranks of a job of " + std::to_string(size()));
    }
    if (group[i] == rank()) place = int(i);
  }
  if (place < 0) {
    throw Error("communication: rank " + std::to_string(rank()) + " is not in group " +
                group_str(group));
  }
  return place;
}

Work all_reduce_async(void* data, int64_t count, DType dtype, ReduceOp op) {
  check_count(count, "all_reduce");
  if (size() == 1 || count == 0) return Work(completed());
  mpi_type(dtype, "all_reduce");  // an unsupported dtype fails here, not on the thread
  return Work(submit(
      [=](const Work::State& state) { all_reduce_in_chunks(data, count, dtype, op, false, state); },
      count * int64_t(dtype_size(dtype))));
}

void all_reduce(void* data, int64_t count, DType dtype, ReduceOp op, const Group& group) {
  check_count(count, "all_reduce");
  if (group_size(group) == 1 || count == 0) return;
  mpi_type(dtype, "all_reduce");
  run_blocking(
      [=](const Work::State& state) {
        all_reduce_in_chunks(data, count, dtype, op, true, state, communicator_of(group));
      },
      count * int64_t(dtype_size(dtype)));
}

void broadcast(void* data, int64_t count, DType dtype, int root) {
  check_count(count, "broadcast");
  if (root < 0 || root >= size()) {
    throw Error(detail::concat("communication: broadcast from rank ", root, " in a job of ", size(),
                               " ranks"));
  }
  if (size() == 1 || count == 0) return;
  MPI_Datatype type = mpi_type(dtype, "broadcast");
  const size_t element = dtype_size(dtype);
  run_blocking(
      [=](const Work::State&) {
        const int64_t chunk = kChunkBytes / int64_t(element);
        for (int64_t done = 0; done < count; done += chunk) {
          const int n = int(std::min(chunk, count - done));
          check(MPI_Bcast(static_cast<char*>(data) + size_t(done) * element, n, type, root,
                          MPI_COMM_WORLD),
                detail::concat("broadcast of ", count, " ", dtype_name(dtype), " elements"));
        }
      },
      0);
}

void all_gather(const void* send, void* recv, int64_t count, DType dtype, const Group& group) {
  if (!needs_peers(send, recv, count, dtype, group, "all_gather")) return;
  MPI_Datatype type = mpi_type(dtype, "all_gather");
  run_blocking(
      [=](const Work::State&) {
        check(
            MPI_Allgather(send, int(count), type, recv, int(count), type, communicator_of(group)),
            detail::concat("all_gather of ", count, " ", dtype_name(dtype), " elements per rank"));
      },
      0);
}

void reduce_scatter(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                    const Group& group) {
  if (!needs_peers(send, recv, count, dtype, group, "reduce_scatter")) return;
  MPI_Datatype type = mpi_type(dtype, "reduce_scatter");
  run_blocking(
      [=](const Work::State&) {
        check(MPI_Reduce_scatter_block(send, recv, int(count), type, mpi_op(op),
                                       communicator_of(group)),
              detail::concat("reduce_scatter of ", count, " ", dtype_name(dtype),
                             " elements per rank"));
      },
      0);
}

void all_to_all(const void* send, void* recv, int64_t count, DType dtype, const Group& group) {
  if (!needs_peers(send, recv, count, dtype, group, "all_to_all")) return;
  MPI_Datatype type = mpi_type(dtype, "all_to_all");
  run_blocking(
      [=](const Work::State&) {
        check(MPI_Alltoall(send, int(count), type, recv, int(count), type, communicator_of(group)),
              detail::concat("all_to_all of ", count, " ", dtype_name(dtype),
                             " elements per rank pair"));
      },
      0);
}

void barrier() {
  if (size() == 1) return;
  run_blocking([](const Work::State&) { check(MPI_Barrier(MPI_COMM_WORLD), "barrier"); }, 0);
}

Stats stats() {
  Counters& c = counters();
  return {c.collectives.load(), c.bytes.load(), c.busy_ns.load(), c.waited_ns.load()};
}

void reset_stats() {
  Counters& c = counters();
  c.collectives = 0;
  c.bytes = 0;
  c.busy_ns = 0;
  c.waited_ns = 0;
}

void abort_job(const std::string& message, int exit_code) {
  std::fprintf(stderr, "kiln: %s: %s\n", where().c_str(), message.c_str());
  std::fflush(stderr);
  if (membership().mpi) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

}  // namespace kiln::comm
