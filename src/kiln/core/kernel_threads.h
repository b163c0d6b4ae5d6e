#pragma once
// How many threads one kernel launch uses. The process has a budget (set_num_threads); each
// launch takes as many of them as its work pays for: a kernel too small to carry a fork/join
// and the cache traffic of a split runs on one thread. Kiln's kernels (`#pragma omp parallel`
// without a num_threads clause) and oneDNN's primitives both size their teams from the calling
// thread's OpenMP nthreads-var, so a launch's choice is made by setting that for the launch
// (KernelThreads). oneDNN reads it twice: some primitives (matmul) fix their thread count when
// they are created, others (the direct convolutions) when they run, so a primitive must be
// created and run under the same choice, and the count is part of its cache key
// (ops/dnnl/context.h).
//
// Graph mode chooses once per launch when it binds (graph/arena_binding.cpp); eager mode per
// call (ops/dispatch.cpp).

namespace kiln {

// What one launch costs, from the op table (OpDef::cost) or a fused kernel's own count.
struct KernelWork {
  double flops = 0;
  double bytes = 0;  // read and written
};

// What the choice knows about the machine. The defaults are one core of this kind of CPU
// (AVX-512 fp32 at a realistic fraction of peak, one core's share of memory bandwidth) and the
// fork/join of libgomp's 2-thread team measured on an idle core here (bench/README.md).
struct ThreadCostModel {
  double flops_per_second = 40e9;      // one thread
  double bytes_per_second = 12e9;      // one thread streaming alone
  double bandwidth_per_second = 24e9;  // all threads together (the memory system's limit)
  double fork_join_seconds = 2e-6;     // entering and leaving one parallel region of 2 threads
  // Work split n ways takes 1/(n * efficiency) of the time: imbalance, cache lines shared at
  // the slices' edges, the threads' warm-up.
  double parallel_efficiency = 0.85;
  // A team of n threads pays fork_join_seconds * log2(n) (libgomp's barrier, on a tree).
  double fork_join(int threads) const;
  // Seconds the launch takes on `threads` threads.
  double seconds(const KernelWork& work, int threads) const;
};

// The model the launches use: the defaults, with the fork/join cost from KILN_FORK_JOIN_US
// (microseconds) when set. Fixed, not measured per run: a team decides how a kernel splits its
// work, so a choice that moved with a measurement would move result bits run to run.
// Thread-safe.
const ThreadCostModel& machine_thread_model();
// Median seconds of one empty parallel region of `threads` threads, over `regions` regions.
double measure_fork_join_seconds(int threads, int regions = 400);

// The team for a launch: the count from 1 to `budget` the model predicts fastest (the fewer on a
// tie), or 1 when that is not at least 5% faster than one thread. Small kernels get 1.
int threads_for(const KernelWork& work, int budget, const ThreadCostModel& model);
// The same with this machine's model and launch_budget().
int threads_for(const KernelWork& work);
// The most threads a launch from this thread may take: the process's budget, or 1 inside a
// parallel region (a batch slice's thread: its kernels run on it alone).
int launch_budget();

// Within its scope, the kernels this thread launches use `threads` threads (OpenMP's
// nthreads-var of the calling thread; restored on exit). Costs a few nanoseconds.
class KernelThreads {
 public:
  explicit KernelThreads(int threads);
  ~KernelThreads();
  KernelThreads(const KernelThreads&) = delete;
  KernelThreads& operator=(const KernelThreads&) = delete;

 private:
  int previous_;
};

// The team the next parallel region of this thread gets (1 inside a parallel region).
int current_kernel_threads();

}  // namespace kiln
