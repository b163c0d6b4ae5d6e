#pragma once
// The profiler's raw files, from which the report is built (and rebuilt by `kiln report`):
//   trace.json    Chrome trace event format (Perfetto and chrome://tracing open it): steps,
//                 their phases and the op launches inside them as nested complete events, one
//                 track per thread, and counters for memory and the data pipeline.
//   profile.json  what is not a timed event: the run's settings, compiled graphs with their
//                 reports, the pipeline's statistics and verdicts, the allocator's peak.
#include <string>

#include "kiln/profile/collection.h"

namespace kiln::profile {

inline constexpr const char* kTraceFile = "trace.json";
inline constexpr const char* kProfileFile = "profile.json";

void write_raw_files(const Collection& collection, const std::string& dir);

}  // namespace kiln::profile
