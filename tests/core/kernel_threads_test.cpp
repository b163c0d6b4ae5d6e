// The per-launch thread choice (core/kernel_threads.h): its decisions on fixed costs under a
// fixed model (not the measured one), and the scope that hands a launch its team.
#include <gtest/gtest.h>
#include <omp.h>

#include "kiln/core/kernel_threads.h"
#include "kiln/core/threads.h"

namespace kiln::kernel_threads_test {
namespace {

// One thread does 10 GFLOP/s and streams 10 GB/s; the memory system gives 20 GB/s in all; a
// fork/join of 2 costs 5 us.
ThreadCostModel fixed_model() {
  return {.flops_per_second = 10e9,
          .bytes_per_second = 10e9,
          .bandwidth_per_second = 20e9,
          .fork_join_seconds = 5e-6,
          .parallel_efficiency = 0.8};
}

TEST(KernelThreads, ModelPredictsFromItsParameters) {
  const ThreadCostModel m = fixed_model();
  // 1 ms of compute on one thread; on 2: 1 ms / (2 * 0.8) + 5 us.
  EXPECT_NEAR(m.seconds({.flops = 1e7}, 1), 1e-3, 1e-12);
  EXPECT_NEAR(m.seconds({.flops = 1e7}, 2), 1e-3 / 1.6 + 5e-6, 1e-12);
  // Memory-bound: 4 threads get the memory system's 20 GB/s, not 40.
  EXPECT_NEAR(m.seconds({.bytes = 2e7}, 4), 2e7 / (20e9 * 0.8) + 2 * 5e-6, 1e-12);
}

TEST(KernelThreads, SmallKernelsRunOnOneThread) {
  const ThreadCostModel m = fixed_model();
  // 2 us of work cannot carry a 5 us fork/join.
  EXPECT_EQ(threads_for({.flops = 2e4, .bytes = 1e3}, 2, m), 1);
  EXPECT_EQ(threads_for({.flops = 2e4, .bytes = 1e3}, 64, m), 1);
  // Nothing at all (a launch whose cost is not counted) stays on one thread too.
  EXPECT_EQ(threads_for({}, 8, m), 1);
}

TEST(KernelThreads, LargeKernelsTakeTheBudget) {
  const ThreadCostModel m = fixed_model();
  // 100 ms of compute: every thread pays.
  EXPECT_EQ(threads_for({.flops = 1e9}, 2, m), 2);
  EXPECT_EQ(threads_for({.flops = 1e9}, 16, m), 16);
  // A budget of one is one, whatever the work.
  EXPECT_EQ(threads_for({.flops = 1e12}, 1, m), 1);
}

TEST(KernelThreads, MemoryBoundKernelsStopAtTheBandwidth) {
  const ThreadCostModel m = fixed_model();
  // 10 ms of streaming: 2 threads reach the memory system's limit; more only add fork/joins.
  EXPECT_EQ(threads_for({.flops = 1e3, .bytes = 1e8}, 16, m), 2);
}

TEST(KernelThreads, ChoiceGrowsWithTheWork) {
  const ThreadCostModel m = fixed_model();
  int previous = 1;
  for (double flops = 1e3; flops < 1e11; flops *= 2) {
    const int n = threads_for({.flops = flops}, 32, m);
    EXPECT_GE(n, previous) << flops << " flops";
    // Never predicted slower than one thread.
    EXPECT_LE(m.seconds({.flops = flops}, n), m.seconds({.flops = flops}, 1)) << flops;
    previous = n;
  }
  EXPECT_EQ(previous, 32);
}

TEST(KernelThreads, ScopeSetsTheTeamAndRestoresIt) {
  const int before = omp_get_max_threads();
  {
    KernelThreads one(1);
    EXPECT_EQ(current_kernel_threads(), 1);
    int team = 0;
#pragma omp parallel
    {
#pragma omp single
      team = omp_get_num_threads();
    }
    EXPECT_EQ(team, 1);
    {
      KernelThreads three(3);
      EXPECT_EQ(current_kernel_threads(), 3);
    }
    EXPECT_EQ(current_kernel_threads(), 1);
  }
  EXPECT_EQ(omp_get_max_threads(), before);
}

TEST(KernelThreads, BudgetIsNotTheLaunchTeam) {
  const int budget = num_threads();
  KernelThreads one(1);
  EXPECT_EQ(num_threads(), budget);
}

TEST(KernelThreads, MeasuredForkJoinIsPositive) {
  // A real fork/join takes at least tens of nanoseconds (a compiled-away region takes ~1 ns).
  EXPECT_GT(measure_fork_join_seconds(2, 40), 20e-9);
  EXPECT_EQ(measure_fork_join_seconds(1), 0.0);
  EXPECT_GE(machine_thread_model().fork_join_seconds, 0.5e-6);
}

}  // namespace
}  // namespace kiln::kernel_threads_test
