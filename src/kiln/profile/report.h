#pragma once
// The profiler's report, built from its raw files (raw_files.h), so `kiln report DIR` rebuilds
// it without rerunning the job.
#include <string>

namespace kiln::profile {

// Writes DIR/ops.csv, DIR/steps.csv and DIR/report.html (one self-contained page: inline CSS,
// JS and SVG) and returns the report's path. The compiled graph is drawn with Graphviz `dot`
// when it is installed, shown as text otherwise.
std::string write_report(const std::string& dir);
// The report's summary as text, for a terminal.
std::string text_summary(const std::string& dir);

}  // namespace kiln::profile
