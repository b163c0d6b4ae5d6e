#include "kiln/core/kernel_threads.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "kiln/core/threads.h"

namespace kiln {

double ThreadCostModel::fork_join(int threads) const {
  return threads <= 1 ? 0.0 : fork_join_seconds * std::log2(double(threads));
}

double ThreadCostModel::seconds(const KernelWork& work, int threads) const {
  const double n = std::max(1, threads);
  const double efficiency = threads > 1 ? parallel_efficiency : 1.0;
  const double compute = work.flops / (flops_per_second * n * efficiency);
  const double memory =
      work.bytes / (std::min(bytes_per_second * n, bandwidth_per_second) * efficiency);
  return std::max(compute, memory) + fork_join(threads);
}

namespace {

// Each thread of a team gets at least this much of the work (one thread's time): below it the
// cache lines the slices share and the threads' warm-up, which the linear model does not see,
// eat the gain (the reason a LeNet step got slower on 2 threads).
constexpr double kMinSecondsPerThread = 5e-6;

}  // namespace

int threads_for(const KernelWork& work, int budget, const ThreadCostModel& model) {
  if (budget <= 1) return 1;
  const double one = model.seconds(work, 1);
  budget = int(std::min<double>(budget, std::max(1.0, std::floor(one / kMinSecondsPerThread))));
  int best = 1;
  double best_seconds = one;
  for (int n = 2; n <= budget; ++n) {
    const double t = model.seconds(work, n);
    if (t < best_seconds) best = n, best_seconds = t;
  }
  // A split that buys less than 5% is not worth the threads: they serve the rest of the machine
  // better (and a model this coarse cannot see a smaller gain).
  return best_seconds < one * 0.95 ? best : 1;
}

double measure_fork_join_seconds(int threads, int regions) {
  if (threads <= 1) return 0.0;
  std::atomic<int> regions_entered{0};
  const int batch = 20;
  auto one_batch = [&] {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < batch; ++i) {
#pragma omp parallel num_threads(threads)
      {
        // Next to nothing (an empty region may be compiled away): the region's fork and join
        // barrier are what is measured.
        regions_entered.fetch_add(1, std::memory_order_relaxed);
      }
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / batch;
  };
  one_batch();  // starts the pool's threads
  std::vector<double> samples;
  for (int i = 0; i < std::max(1, regions / batch); ++i) samples.push_back(one_batch());
  std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
  return samples[samples.size() / 2];
}

const ThreadCostModel& machine_thread_model() {
  // The fork/join cost is a fixed figure, not measured at each start: a launch's team decides
  // how its work is split, so a choice that moved with one run's measurement would move the last
  // bits of the results run to run (docs/numerics.md). KILN_FORK_JOIN_US sets it for another
  // machine; measure_fork_join_seconds() (`kiln info`) says what this one shows now.
  static const ThreadCostModel model = [] {
    ThreadCostModel m;
    if (const char* us = std::getenv("KILN_FORK_JOIN_US")) {
      m.fork_join_seconds = std::clamp(std::atof(us), 0.0, 1e6) * 1e-6;
    }
    return m;
  }();
  return model;
}

int launch_budget() {
  return omp_in_parallel() ? 1 : num_threads();
}

int threads_for(const KernelWork& work) {
  const int budget = launch_budget();
  if (budget <= 1) return 1;
  return threads_for(work, budget, machine_thread_model());
}

KernelThreads::KernelThreads(int threads) : previous_(omp_get_max_threads()) {
  if (threads != previous_) omp_set_num_threads(std::max(1, threads));
}

KernelThreads::~KernelThreads() {
  if (omp_get_max_threads() != previous_) omp_set_num_threads(previous_);
}

int current_kernel_threads() {
  return omp_in_parallel() ? 1 : omp_get_max_threads();
}

}  // namespace kiln
