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

}  // namespace kiln
