#include "kiln/cli/tune_command.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "kiln/cli/option_checks.h"
#include "kiln/core/error.h"

namespace kiln::cli {
namespace {

constexpr double kMaxBudgetS = 7 * 24 * 3600.0;

std::string percent(double share) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f %%", 100 * share);
  return buf;
}

void print_table(const TuneResult& r, std::ostream& out) {
  out << "\n  option         value    images/s   vs baseline   vs best then   kept\n";
  for (const TuneTrial& t : r.trials) {
    char line[160];
    if (t.images_per_sec > 0) {
      std::snprintf(line, sizeof line, "  %-14s %-8s %9.0f   %11s   %12s   %s\n", t.option.c_str(),
                    t.value.c_str(), t.images_per_sec, percent(t.vs_baseline).c_str(),
                    t.option == "baseline" ? "" : percent(t.vs_best).c_str(), t.kept ? "yes" : "");
    } else {
      std::snprintf(line, sizeof line, "  %-14s %-8s %9s   %s\n", t.option.c_str(), t.value.c_str(),
                    "-", t.note.c_str());
    }
    out << line;
  }
  double load[1] = {0};
  getloadavg(load, 1);
  char summary[240];
  std::snprintf(summary, sizeof summary,
                "best: %.0f images/s against %.0f for the baseline (%s), in %.1f s; load average "
                "%.2f%s\n",
                r.best_images_per_sec, r.baseline_images_per_sec,
                percent(r.best_images_per_sec / r.baseline_images_per_sec - 1).c_str(), r.elapsed_s,
                load[0],
                load[0] > 1.5 ? " (other work shares the cores: trials this short are noisy)" : "");
  out << summary;
}

void write_yaml(const std::string& path, const std::string& text) {
  std::ofstream file(path, std::ios::trunc);
  file << text;
  file.flush();
  if (!file) {
    throw FileError("kiln tune: cannot write --output " + path + ": " + std::strerror(errno));
  }
}

}  // namespace

TuneResult run_tune(const TuneConfig& config, std::ostream& out) {
  if (config.output.empty()) throw Error("kiln tune: --output is empty");
  for (const std::string& option : config.only) {
    if (std::find(kTuneOptions.begin(), kTuneOptions.end(), option) == kTuneOptions.end()) {
      std::string names;
      for (const std::string& n : kTuneOptions) names += (names.empty() ? "" : ", ") + n;
      throw Error("kiln tune: --only names '" + option +
                  "', which is not an option; give some of " + names);
    }
  }
  TuneResult r = run_tune_trials(config, out);
  print_table(r, out);
  write_yaml(config.output, tune_yaml(config, r));
  r.output = config.output;
  out << "wrote " << config.output << " (kiln train --config " << config.output << ")\n";
  return r;
}

double parse_budget(const std::string& text) {
  double scale = 1;
  std::string number = text;
  if (!number.empty() && (number.back() == 's' || number.back() == 'm' || number.back() == 'h')) {
    scale = number.back() == 'm' ? 60 : number.back() == 'h' ? 3600 : 1;
    number.pop_back();
  }
  try {
    size_t used = 0;
    const double v = std::stod(number, &used);
    if (used == number.size() && std::isfinite(v) && v > 0 && v * scale <= kMaxBudgetS) {
      return v * scale;
    }
  } catch (const std::exception&) {
  }
  throw Error(
      "kiln tune: --budget must be a time above 0 and at most a week, such as 60s, 2m "
      "or 90 (seconds), got '" +
      text + "'");
}

std::string tune_yaml(const TuneConfig& config, const TuneResult& r) {
  const TrainConfig& b = r.best;
  std::ostringstream y;
  char line[200];
  std::snprintf(line, sizeof line,
                "# kiln tune --model %s --batch-size %lld: %.0f images/s against %.0f for the "
                "baseline\n",
                config.model.c_str(), static_cast<long long>(config.batch_size),
                r.best_images_per_sec, r.baseline_images_per_sec);
  y << line << "# kiln train --config FILE trains with these settings (flags given there win)\n";
  y << "model: " << b.model << "\n";
  y << "batch-size: " << b.batch_size << "\n";
  if (!config.data.empty()) y << "data: \"" << config.data << "\"\n";
  if (!config.data_dir.empty()) y << "data-dir: \"" << config.data_dir << "\"\n";
  if (config.threads > 0) y << "threads: " << config.threads << "\n";
  y << "mode: " << b.mode << "\n";
  // Written in eager mode too: kiln train's default is on, which would not be what was timed.
  y << "graph-kernel: " << (b.graph_kernel ? "on" : "off") << "\n";
  y << "amp-level: " << b.amp_level << "\n";
  y << "workers: " << b.workers << "\n";
  y << "prefetch: " << b.prefetch << "\n";
  if (b.mode == "graph") y << "micro-batches: " << b.micro_batches << "\n";
  if (b.sink_size != 0) y << "sink-size: " << b.sink_size << "\n";
  return y.str();
}

void add_tune_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "tune",
      "Time each optimisation on this machine and data (mode, fusion, AMP, workers, prefetch, "
      "micro-batches, sink size) and write the fastest as a kiln train --config file");
  auto c = std::make_shared<TuneConfig>();
  auto budget = std::make_shared<std::string>("60s");
  cmd->add_option("--model", c->model, "lenet | resnet20 | mlp")
      ->check(CLI::IsMember({"lenet", "resnet20", "mlp"}));
  cmd->add_option("--batch-size", c->batch_size, "Batch size (default 64)")
      ->check(integer_in(1, 1 << 20));
  cmd->add_option("--data", c->data, "Training data, as kiln train --data (default fashion-mnist)");
  cmd->add_option("--data-dir", c->data_dir, "Folder with the Fashion-MNIST IDX files");
  cmd->add_option("--threads", c->threads, "Kernel threads (default: all available cores)")
      ->check(integer_in(0, kMaxThreads));
  cmd->add_option("--budget", *budget,
                  "Wall-clock time for the whole run, setup included: 60s, 2m, 90 (default 60s)");
  cmd->add_option("--output", c->output, "The YAML file to write (default kiln-tune.yaml)");
  cmd->add_option("--seed", c->seed, "Seed of initialization and shuffling")
      ->check(unsigned_integer());
  cmd->add_option("--only", c->only,
                  "Try only these options, comma-separated (default: all): mode, fusion, "
                  "amp-level, workers, prefetch, micro-batches, sink-size")
      ->delimiter(',')
      ->check(CLI::IsMember(kTuneOptions));
  cmd->callback([c, budget] {
    c->budget_s = parse_budget(*budget);
    run_tune(*c, std::cout);
  });
}

}  // namespace kiln::cli
