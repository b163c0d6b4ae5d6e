#pragma once
// `kiln report DIR [--text]`: rebuilds DIR/report.html (and ops.csv, steps.csv) from a profile's
// raw files (trace.json, profile.json) and prints its path; --text prints the summary instead.
namespace CLI {
class App;
}

namespace kiln::cli {

void add_report_command(CLI::App& app);

}  // namespace kiln::cli

using kiln::cli::add_report_command;
