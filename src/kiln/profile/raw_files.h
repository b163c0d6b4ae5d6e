#pragma once
// The profiler's raw files, from which the report is built (and rebuilt by `kiln report`):
//   trace.json    Chrome trace event format (Perfetto and chrome://tracing open it): steps,
//                 their phases and the op launches inside them as nested complete events (each
//                 with its kernel, shapes, threads, FLOPs and bytes), one track per thread; the
//                 allocator's events as instant events "[memory]" naming the op they happened
//                 in; counters for the bytes in use and each pipeline stage. Under mpirun the
//                 process is the rank (pid = rank), so the ranks' traces load side by side.
//   profile.json  what is not a timed event: the run's settings, compiled graphs with their
//                 reports and memory plans, the pipeline's statistics and verdicts, the
//                 allocator's peak, the machine's peaks, measured comparisons of settings.
#include <string>
#include <vector>

#include "kiln/ops/machine_peaks.h"
#include "kiln/profile/collection.h"

namespace kiln::profile {

inline constexpr const char* kTraceFile = "trace.json";
inline constexpr const char* kProfileFile = "profile.json";

// `peaks`: this machine's, the process's thread budget first, then other thread counts (none:
// the report shows rates without ceilings).
void write_raw_files(const Collection& collection, const std::string& dir,
                     const std::vector<ops::MachinePeaks>& peaks = {});

}  // namespace kiln::profile
