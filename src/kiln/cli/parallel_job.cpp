#include "kiln/cli/parallel_job.h"

#include <algorithm>
#include <ostream>
#include <thread>

#include "kiln/comm/communicator.h"
#include "kiln/core/error.h"
#include "kiln/core/parallel_context.h"
#include "kiln/core/threads.h"

namespace kiln::cli {

int default_threads_per_rank(int local_ranks) {
  const int cores = available_cores();
  const int machine = int(std::max(1u, std::thread::hardware_concurrency()));
  // A rank bound to fewer cores than the machine has (mpirun --bind-to core, kiln launch) owns
  // them; otherwise the ranks of this host share its cores.
  if (cores < machine) return std::max(1, cores);
  return std::max(1, cores / std::max(1, local_ranks));
}

ParallelJob join_parallel_job(const ParallelFlags& flags, std::ostream& out) {
  const ParallelMode mode = parse_parallel_mode(flags.parallel_mode);
  ParallelJob job;
  if (mode == ParallelMode::STAND_ALONE) {
    if (comm::launched_by_mpirun()) {
      out << "note: started by mpirun, but --parallel-mode is stand_alone: each rank trains on "
             "its own (use --parallel-mode data for data parallelism)\n";
    }
    return job;
  }
  if (mode == ParallelMode::SEMI_AUTO_PARALLEL) {
    throw Error("kiln train: --parallel-mode " + flags.parallel_mode +
                " is not available from the command line (stand_alone, data_parallel or "
                "auto_parallel); semi_auto_parallel takes its strategies from code "
                "(nn::Dense::matmul().shard)");
  }
  comm::init();
  job.rank = comm::rank();
  job.ranks = comm::size();
  if (flags.threads == 0) set_num_threads(default_threads_per_rank(comm::local_size()));
  const char* name = mode == ParallelMode::DATA_PARALLEL ? "data parallel" : "auto parallel";
  if (job.ranks == 1) {
    out << name << ": a job of one rank (start it with mpirun or kiln launch for more); "
        << "training as stand_alone\n";
    return job;
  }
  job.data_parallel = mode == ParallelMode::DATA_PARALLEL;
  job.auto_parallel = mode == ParallelMode::AUTO_PARALLEL;
  set_auto_parallel_context({.parallel_mode = mode,
                             .gradients_mean = true,
                             .device_num = job.ranks,
                             .bucket_cap_mb = flags.bucket_cap_mb,
                             .search_mode = flags.search_mode,
                             .memory_limit_mb = flags.memory_limit_mb,
                             .op_times = flags.op_times});
  return job;
}

}  // namespace kiln::cli
