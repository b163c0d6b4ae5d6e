#include "kiln/core/threads.h"

#include <omp.h>
#include <sched.h>

#include <atomic>

namespace kiln {
namespace {

// 0 until set or first read: then OpenMP's own default (OMP_NUM_THREADS or the cores), read
// before any launch has narrowed this thread's team.
std::atomic<int> g_budget{0};

}  // namespace

void set_num_threads(int n) {
  const int threads = n > 0 ? n : available_cores();
  g_budget.store(threads);
  omp_set_num_threads(threads);
}

int num_threads() {
  int budget = g_budget.load(std::memory_order_relaxed);
  if (budget > 0) return budget;
  int expected = 0;
  g_budget.compare_exchange_strong(expected, omp_get_max_threads());
  return g_budget.load();
}

ScopedThreadBudget::ScopedThreadBudget(int threads) : previous_(num_threads()) {
  set_num_threads(threads);
}

ScopedThreadBudget::~ScopedThreadBudget() {
  set_num_threads(previous_);
}

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return omp_get_num_procs();
}

}  // namespace kiln
