// profile/graph_phases.h: a compiled step's graph_step phase split by what its launches compute.
#include "kiln/profile/graph_phases.h"

#include <gtest/gtest.h>

#include <vector>

namespace kiln::profile::graph_phases_test {
namespace {

using train::StepPhase;

// A batch-split step: thread 0 (the training loop's) runs its slice's forward and backward and
// one update launch; thread 1, a phase ahead, starts its backward while thread 0 is still in
// its forward, and runs three update launches (more launches than thread 0).
Collection batch_split_step() {
  Collection c;
  c.signatures = {{.name = "conv2d", .mode = "graph", .phase = StepPhase::forward},
                  {.name = "conv2d_backward", .mode = "graph", .phase = StepPhase::backward},
                  {.name = "momentum_update", .mode = "graph", .phase = StepPhase::update}};
  c.phases = {{StepPhase::graph_step, 0, 100}};
  c.ops = {{0, 0, 0, 40}, {1, 0, 40, 70}, {2, 0, 70, 90},  // thread 0
           {0, 1, 0, 20}, {1, 1, 20, 50}, {2, 1, 50, 60}, {2, 1, 60, 70}, {2, 1, 70, 80}};
  return c;
}

TEST(GraphPhases, BatchSlicesFollowTheTrainingLoopsThread) {
  Collection c = batch_split_step();
  split_graph_steps(c);
  ASSERT_EQ(c.phases.size(), 3u);
  EXPECT_EQ(c.phases[0].phase, StepPhase::forward);
  EXPECT_EQ(c.phases[0].begin_ns, 0);
  EXPECT_EQ(c.phases[0].end_ns, 40) << "thread 0's forward launch runs until 40";
  EXPECT_EQ(c.phases[1].phase, StepPhase::backward);
  EXPECT_EQ(c.phases[1].end_ns, 70);
  EXPECT_EQ(c.phases[2].phase, StepPhase::update);
  EXPECT_EQ(c.phases[2].end_ns, 100);
}

TEST(GraphPhases, WithoutTheTrainingLoopsLaunchesTheBusiestThreadIsFollowed) {
  Collection c = batch_split_step();
  for (OpEvent& e : c.ops) e.thread += 1;  // threads 1 and 2; thread 2 launched the most
  split_graph_steps(c);
  ASSERT_EQ(c.phases.size(), 3u);
  EXPECT_EQ(c.phases[0].end_ns, 20);
  EXPECT_EQ(c.phases[1].end_ns, 50);
}

}  // namespace
}  // namespace kiln::profile::graph_phases_test
