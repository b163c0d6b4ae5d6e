#pragma once
// How `kiln train` joins a parallel job: the communicator, the auto-parallel context, one
// kernel thread pool per rank sized to the cores the rank may use, and the lines that say so.
#include <iosfwd>
#include <string>

namespace kiln::cli {

struct ParallelJob {
  bool data_parallel = false;
  int rank = 0;
  int ranks = 1;
};

// `parallel_mode` is --parallel-mode; `threads` is --threads (0: choose per rank). Under
// DATA_PARALLEL with one rank only it runs as stand_alone and says so on `out`.
ParallelJob join_parallel_job(const std::string& parallel_mode, int threads, double bucket_cap_mb,
                              std::ostream& out);

// The kernel threads a rank uses when --threads is not given: the cores it may run on, shared
// with the other ranks of its host unless the launcher already bound each rank to its own.
int default_threads_per_rank(int local_ranks);

}  // namespace kiln::cli
