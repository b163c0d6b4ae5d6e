#pragma once
// How `kiln train` joins a parallel job: the communicator, the auto-parallel context, one
// kernel thread pool per rank sized to the cores the rank may use, and the lines that say so.
#include <iosfwd>
#include <string>

namespace kiln::cli {

struct ParallelJob {
  bool data_parallel = false;  // each rank trains on its shard of the data
  bool auto_parallel = false;  // each rank runs its part of every op on the whole batch
  int rank = 0;
  int ranks = 1;
};

struct ParallelFlags {
  std::string parallel_mode = "stand_alone";  // --parallel-mode
  int threads = 0;                            // --threads (0: choose per rank)
  double bucket_cap_mb = 25.0;
  std::string search_mode = "dynamic_programming";  // AUTO_PARALLEL's --search-mode
  double memory_limit_mb = 0;                       // AUTO_PARALLEL's --memory-limit-mb
  std::string op_times = "measured";                // AUTO_PARALLEL's --op-times
};

// Under DATA_PARALLEL or AUTO_PARALLEL with one rank only it runs as stand_alone and says so on
// `out`. SEMI_AUTO_PARALLEL needs strategies in code and is refused with where to set them.
ParallelJob join_parallel_job(const ParallelFlags& flags, std::ostream& out);

// The kernel threads a rank uses when --threads is not given: the cores it may run on, shared
// with the other ranks of its host unless the launcher already bound each rank to its own.
int default_threads_per_rank(int local_ranks);

}  // namespace kiln::cli
