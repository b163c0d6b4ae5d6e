#pragma once
// `kiln tune --model M [--batch-size N] [--data ...] [--budget 60s] [--output FILE]`: short
// timed trials of each optimisation MindSpore's performance guide names, on this machine and
// this data, then the fastest combination as a YAML file for `kiln train --config FILE`.
//
// The options, tried in this order, each on top of the best found so far (a greedy search, one
// option at a time): eager vs graph mode, graph-kernel fusion, AMP O2 and O3 (bf16), the data
// pipeline's map workers (1, 2, 4, ... up to the cores), its prefetch depth, micro-batches
// (graph mode) and dataset sink sizes (each cut to fit its trial's window). A trial trains the
// model on the data for a short window; its first steps (compilation, the AMP and thread races, the
// pipeline filling) are left out of its images/s. A choice is kept only when it beats the best so
// far by kTuneMinGain, the noise of a short window. The whole run, setup included, stays within
// --budget: each window is sized from the time left and the trials still to run, a trial that would
// not fit is left out (and the table says so), and a trial still running at the budget's end is
// stopped.
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "kiln/cli/train_command.h"

namespace CLI {
class App;
}

namespace kiln::cli {

// A choice must beat the best so far by this much to be kept.
inline constexpr double kTuneMinGain = 0.03;

struct TuneConfig {
  std::string model = "lenet";
  int64_t batch_size = 64;
  std::string data;      // as kiln train's --data (empty: fashion-mnist)
  std::string data_dir;  // as kiln train's --data-dir
  int threads = 0;       // kernel threads (0: every available core)
  double budget_s = 60;  // wall-clock seconds for the whole run
  std::string output = "kiln-tune.yaml";
  uint64_t seed = 1;
  // Options to try (kTuneOptions' names); empty: all of them. The baseline always runs.
  std::vector<std::string> only;
};

// The options kiln tune tries, in its order.
inline const std::vector<std::string> kTuneOptions = {
    "mode", "fusion", "amp-level", "workers", "prefetch", "micro-batches", "sink-size"};

struct TuneTrial {
  std::string option;         // "baseline", "mode", "fusion", "amp-level", "workers", ...
  std::string value;          // "graph", "on", "O2", "4", ...
  double images_per_sec = 0;  // 0: not measured (see note)
  double vs_baseline = 0;     // images_per_sec / the baseline's - 1
  double vs_best = 0;         // against the best combination when the trial ran
  bool kept = false;          // part of the best combination since
  double seconds = 0;         // the trial's wall time, warm-up included
  std::string note;           // why it was not measured, or what it measured
};

struct TuneResult {
  std::vector<TuneTrial> trials;
  TrainConfig best;  // the fastest combination (what the YAML file holds)
  double baseline_images_per_sec = 0, best_images_per_sec = 0;
  double elapsed_s = 0;
  std::string output;  // the YAML file written
};

// "60s", "2m", "1.5m", "90" (seconds) -> seconds; Error naming --budget otherwise, or when it is
// not above 0.
double parse_budget(const std::string& text);

// Runs the trials and writes the YAML file; the progress and the table go to `out`.
TuneResult run_tune(const TuneConfig& config, std::ostream& out);
// The trials alone (tune_trials.cpp): the table's rows and the best combination.
TuneResult run_tune_trials(const TuneConfig& config, std::ostream& out);
// The best combination as a `kiln train --config` file (keys are kiln train's long flags).
std::string tune_yaml(const TuneConfig& config, const TuneResult& result);

void add_tune_command(CLI::App& app);

}  // namespace kiln::cli

using kiln::cli::add_tune_command;
