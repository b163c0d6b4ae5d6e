#include "kiln/cli/bench_comm_command.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <memory>
#include <vector>

#include "kiln/cli/launch_command.h"
#include "kiln/cli/option_checks.h"
#include "kiln/comm/communicator.h"
#include "kiln/core/error.h"
#include "kiln/parallel/comm_cost.h"
#include "kiln/train/machine_model_file.h"

namespace kiln::cli {
namespace {

struct BenchCommOptions {
  int ranks = 2;
  bool tcp = false;
  int repeats = 10;
  int64_t largest_mb = 64;  // the largest buffer timed
  bool save = true;
};

// The median of `repeats` timings of f on every rank together (a barrier before each; the
// slowest rank's time counts, as a step waits for it).
template <typename F>
double median_seconds(int repeats, F&& f) {
  f();  // warm-up: the transport's first use of these buffers
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    comm::barrier();
    const auto start = std::chrono::steady_clock::now();
    f();
    float s =
        float(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    comm::all_reduce(&s, 1, DType::f32, comm::ReduceOp::max);
    t.push_back(double(s));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void run_on_ranks(const BenchCommOptions& o) {
  comm::init();
  const int n = comm::size();
  if (n < 2) throw Error("kiln bench comm: a job of one rank has no collectives to measure");
  std::vector<parallel::CollectiveTiming> timings;
  const int64_t largest = o.largest_mb << 20;
  std::vector<float> buffer(size_t(largest / 4), 1.0f), gathered(size_t(largest / 4));
  if (comm::rank() == 0) {
    std::printf("kiln bench comm: %d ranks over %s, median of %d\n", n,
                o.tcp ? "TCP" : "the default transport (shared memory on one host)", o.repeats);
    std::printf("%12s %14s %10s %14s %10s\n", "bytes", "all_reduce ms", "GB/s", "all_gather ms",
                "GB/s");
  }
  for (int64_t bytes = 4096; bytes <= largest; bytes *= 4) {
    const int64_t count = bytes / 4;
    const double reduce =
        median_seconds(o.repeats, [&] { comm::all_reduce(buffer.data(), count, DType::f32); });
    // all_gather: each rank sends bytes / n and ends with `bytes`.
    const int64_t share = count / n;
    const double gather = median_seconds(
        o.repeats, [&] { comm::all_gather(buffer.data(), gathered.data(), share, DType::f32); });
    timings.push_back({parallel::CollectiveTiming::Kind::all_reduce, double(bytes), n, reduce});
    timings.push_back(
        {parallel::CollectiveTiming::Kind::all_gather, double(share * n * 4), n, gather});
    if (comm::rank() == 0) {
      std::printf("%12lld %14.3f %10.2f %14.3f %10.2f\n", static_cast<long long>(bytes),
                  reduce * 1e3, double(bytes) / reduce / 1e9, gather * 1e3,
                  double(share * n * 4) / gather / 1e9);
    }
  }
  const parallel::CommCostModel model = parallel::fit_comm_cost_model(timings);
  if (comm::rank() != 0) return;
  std::printf("alpha %.2f us per message round, beta %.3f ns per byte (%.2f GB/s)\n",
              model.alpha_s * 1e6, model.beta_s_per_byte * 1e9,
              model.beta_s_per_byte > 0 ? 1e-9 / model.beta_s_per_byte : 0.0);
  double worst = 0;
  for (const auto& t : timings) {
    const double predicted = t.kind == parallel::CollectiveTiming::Kind::all_reduce
                                 ? model.all_reduce(t.bytes, t.ranks)
                                 : model.all_gather(t.bytes, t.ranks);
    worst = std::max(worst, std::abs(predicted - t.seconds) / t.seconds);
  }
  std::printf("the model's largest error on these timings: %.0f%%\n", worst * 100);
  if (!o.save) return;
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  const std::string description =
      std::to_string(n) + " ranks over " + (o.tcp ? "TCP" : "shared memory") + ", " + date;
  train::save_comm_model(model, description);
  std::printf("saved to %s (kiln plan and kiln train --parallel-mode auto plan with it)\n",
              train::comm_model_path().c_str());
}

}  // namespace

void add_bench_command(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Measure this machine for the planners");
  bench->require_subcommand(1);
  CLI::App* cmd = bench->add_subcommand(
      "comm", "Time the collectives, fit and save the alpha-beta model AUTO_PARALLEL plans with");
  auto o = std::make_shared<BenchCommOptions>();
  cmd->add_option("-n,--ranks", o->ranks, "Ranks to measure with (started through mpirun)")
      ->check(integer_in(2, 1024));
  cmd->add_flag("--tcp", o->tcp, "Talk over TCP only, as ranks on different hosts do");
  cmd->add_option("--repeats", o->repeats, "Timings per size (the median counts)")
      ->check(integer_in(1, 1000));
  cmd->add_option("--largest-mb", o->largest_mb, "The largest buffer timed, in MiB (default 64)")
      ->check(integer_in(1, 4096));
  cmd->add_flag("!--no-save", o->save, "Print the model without saving it");
  cmd->callback([o] {
    if (comm::launched_by_mpirun()) {
      run_on_ranks(*o);
      return;
    }
    // Run this same command as an N-rank job.
    LaunchOptions launch{.ranks = o->ranks, .tcp = o->tcp, .threads_per_rank = 1};
    launch.command = {"bench",        "comm",
                      "--repeats",    std::to_string(o->repeats),
                      "--largest-mb", std::to_string(o->largest_mb)};
    if (o->tcp) launch.command.push_back("--tcp");
    if (!o->save) launch.command.push_back("--no-save");
    exec_launch(plan_launch(launch, this_kiln_binary()), "kiln bench comm");
  });
}

}  // namespace kiln::cli
