#pragma once

namespace kiln {

// Kernel threads: one OpenMP pool, shared with oneDNN (both use libgomp). set_num_threads sets
// the process's budget: the most threads any one kernel launch may use (each launch takes what
// its work pays for, see core/kernel_threads.h). 0: every available core.
void set_num_threads(int n);
// The budget (not the team of the kernel running now, which may be smaller).
int num_threads();
// Cores the process may run on (sched_getaffinity).
int available_cores();

// Within its scope the process's budget is `threads` (as set_num_threads); the budget before it
// is put back on exit. Timings of one setting, and tests whose bits depend on how a team splits
// the work, hold the budget this way.
class ScopedThreadBudget {
 public:
  explicit ScopedThreadBudget(int threads);
  ~ScopedThreadBudget();
  ScopedThreadBudget(const ScopedThreadBudget&) = delete;
  ScopedThreadBudget& operator=(const ScopedThreadBudget&) = delete;

 private:
  int previous_;
};

}  // namespace kiln
