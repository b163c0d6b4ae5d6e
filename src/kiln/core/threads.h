#pragma once

namespace kiln {

// Kernel threads: one OpenMP pool, shared with oneDNN (both use libgomp).
void set_num_threads(int n);
int num_threads();
// Cores the process may run on (sched_getaffinity).
int available_cores();

}  // namespace kiln
