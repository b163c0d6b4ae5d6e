// The profiler's collectors: every launch seen once, phases that make up the step, the
// allocator's own peak, compiled graphs and recompiles, and the rules of the recommendations.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kiln/core/allocator.h"
#include "kiln/core/error.h"
#include "kiln/ops/functional.h"
#include "kiln/profile/recommendations.h"
#include "kiln/train/compiled_step.h"
#include "profile/profile_testing.h"

namespace kiln::profile {
namespace {

using testing::lenet_dataset;
using testing::lenet_model;

ProfilerOptions collect_only() {
  return {.output_path = "unused", .profile_memory = true, .start_profile = true};
}

TEST(ProfilerCollects, OneEventPerEagerKernelWithTheOpsCost) {
  Tensor a = Tensor::ones({8, 16});
  Tensor b = Tensor::ones({16, 4});
  Profiler profiler(collect_only());
  ops::add(a, a);
  ops::matmul(a, b);
  ops::mul(a, a);
  profiler.stop();
  ops::add(a, a);  // after stop: not seen
  const Collection& c = profiler.collection();
  ASSERT_EQ(c.ops.size(), 3u);
  EXPECT_EQ(c.signatures[c.ops[0].signature].name, "add");
  const OpSignature& matmul = c.signatures[c.ops[1].signature];
  EXPECT_EQ(matmul.name, "matmul");
  EXPECT_EQ(matmul.mode, "eager");
  EXPECT_DOUBLE_EQ(matmul.flops, 2.0 * 8 * 16 * 4);
  EXPECT_NE(matmul.shapes.find("f32[8, 16]"), std::string::npos) << matmul.shapes;
  for (const OpEvent& e : c.ops) EXPECT_LE(e.begin_ns, e.end_ns);
}

TEST(ProfilerCollects, OnlyOneProfilerAtATime) {
  Profiler first(collect_only());
  EXPECT_THROW(Profiler second(collect_only()), Error);
  first.stop();
  Profiler third(collect_only());  // the first stopped: allowed
}

TEST(ProfilerCollects, GraphLaunchesEqualTheExecutedLaunches) {
  auto model = lenet_model();
  train::CompiledTrainStep step(model->network(), model->loss_fn(), model->optimizer());
  step.set_verbose(false);
  Tensor x = train::testing::batch_images(8, 1), y = train::testing::batch_labels(8, 2);
  step.run(x, y);  // compiled before profiling
  Profiler profiler(collect_only());
  constexpr int kSteps = 3;
  for (int i = 0; i < kSteps; ++i) step.run(x, y);
  profiler.stop();
  const Collection& c = profiler.collection();
  const size_t launches = step.executable().num_launches();
  ASSERT_GT(launches, 10u);
  size_t graph_events = 0;
  for (const OpEvent& e : c.ops) graph_events += c.signatures[e.signature].mode == "graph";
  EXPECT_EQ(graph_events, kSteps * launches);
  // Each launch's signature names its node; a convolution's flops are counted.
  bool conv_with_flops = false;
  for (const OpSignature& s : c.signatures) {
    if (s.mode != "graph") continue;
    EXPECT_GE(s.node, 0);
    EXPECT_EQ(s.graph, step.executable().id());
    conv_with_flops = conv_with_flops || (s.name == "conv2d" && s.flops > 0);
  }
  EXPECT_TRUE(conv_with_flops);
}

// The steady steps' phases (and the short bookkeeping between them) make up the step.
void expect_phases_make_up_the_steps(ExecutionMode mode, train::StepPhase compute) {
  testing::ModeGuard guard(mode);
  auto model = lenet_model();
  auto recorder = std::make_shared<train::testing::LossRecorder>();
  Profiler profiler(collect_only());
  model->train(1, lenet_dataset(96, 16), {recorder});
  profiler.stop();
  const Collection& c = profiler.collection();
  ASSERT_EQ(c.steps.size(), 6u);
  // Summed over the steady steps, so one preemption between two phases on a busy machine does
  // not decide the test.
  bool saw_compute = false;
  int64_t phases = 0, steps = 0;
  for (size_t s = 1; s < c.steps.size(); ++s) {
    const StepEvent& step = c.steps[s];
    steps += step.end_ns - step.begin_ns;
    for (const PhaseEvent& p : c.phases) {
      if (p.begin_ns >= step.begin_ns && p.end_ns <= step.end_ns) {
        phases += p.end_ns - p.begin_ns;
        saw_compute = saw_compute || p.phase == compute;
      }
    }
  }
  EXPECT_NEAR(double(phases), double(steps), 0.05 * double(steps));
  EXPECT_TRUE(saw_compute);
}

TEST(ProfilerCollects, EagerPhasesAddUpToTheStep) {
  expect_phases_make_up_the_steps(PYNATIVE_MODE, train::StepPhase::backward);
}

TEST(ProfilerCollects, GraphPhasesAddUpToTheStep) {
  expect_phases_make_up_the_steps(GRAPH_MODE, train::StepPhase::graph_step);
}

TEST(ProfilerCollects, PeakIsTheAllocatorsOwnCounter) {
  Profiler profiler(collect_only());
  constexpr int64_t kBytes = 48 << 20;
  {
    Tensor big = Tensor::ones({kBytes / 4});  // written by a kernel: sampled after it
    ops::add(big, big);
  }
  profiler.stop();
  const Collection& c = profiler.collection();
  EXPECT_EQ(c.allocator_peak_bytes, allocator::stats().peak_bytes);
  EXPECT_GE(c.allocator_peak_bytes, 2 * kBytes);
  int64_t sampled = 0;
  for (const MemorySample& m : c.memory) sampled = std::max(sampled, m.in_use_bytes);
  EXPECT_GE(sampled, 2 * kBytes);
  EXPECT_LE(sampled, c.allocator_peak_bytes);
}

TEST(ProfilerCollects, RecompilesAndPipelineStatistics) {
  testing::ModeGuard guard(GRAPH_MODE);
  auto model = lenet_model();
  Profiler profiler(collect_only());
  model->train(1, lenet_dataset(40, 16, /*drop_remainder=*/false));  // 16, 16, then 8
  profiler.stop();
  const Collection& c = profiler.collection();
  ASSERT_EQ(c.compiles.size(), 2u);
  EXPECT_EQ(c.compiles[0].reason, "first step");
  EXPECT_NE(c.compiles[1].reason.find("[8, 1, 28, 28]"), std::string::npos) << c.compiles[1].reason;
  EXPECT_GT(c.compiles[0].counts.at("arena_bytes"), 0);
  EXPECT_NE(c.compiles[0].graph_dot.find("digraph"), std::string::npos);
  ASSERT_FALSE(c.pipeline.empty());
  EXPECT_EQ(c.pipeline.back().stats.rows_consumed, 3);
  EXPECT_FALSE(c.pipeline.back().stats.bottleneck.empty());
}

ProfileData steps_with_data_wait(double wait_share) {
  ProfileData data;
  for (int i = 0; i < 3; ++i) {
    StepRow row;
    row.global_step = i + 1;
    row.batch_size = 32;
    row.duration_us = 1000;
    row.phase_us[size_t(train::StepPhase::data_wait)] = 1000 * wait_share;
    row.phase_us[size_t(train::StepPhase::graph_step)] = 1000 * (1 - wait_share);
    data.steps.push_back(row);
  }
  data.graph = true;
  data.profile = {{"compiles", nlohmann::json::array({{{"compiles", 1}}})}};
  return data;
}

bool mentions(const std::vector<Recommendation>& advice, const std::string& word) {
  return std::any_of(advice.begin(), advice.end(), [&](const Recommendation& r) {
    return r.title.find(word) != std::string::npos;
  });
}

TEST(Recommendations, DataWaitOverTenPercentOfTheStep) {
  EXPECT_TRUE(mentions(recommend(steps_with_data_wait(0.2)), "num_parallel_workers"));
  EXPECT_FALSE(mentions(recommend(steps_with_data_wait(0.05)), "num_parallel_workers"));
}

TEST(Recommendations, RecompilesAskForDropRemainder) {
  ProfileData data = steps_with_data_wait(0);
  EXPECT_FALSE(mentions(recommend(data), "drop_remainder"));
  data.profile["compiles"].push_back({{"compiles", 2}, {"reason", "new input shape"}});
  EXPECT_TRUE(mentions(recommend(data), "drop_remainder"));
}

TEST(Recommendations, EagerRunsAreToldOfGraphMode) {
  ProfileData data = steps_with_data_wait(0);
  EXPECT_FALSE(mentions(recommend(data), "GRAPH_MODE"));
  data.graph = false;
  data.eager = true;
  EXPECT_TRUE(mentions(recommend(data), "GRAPH_MODE"));
}

}  // namespace
}  // namespace kiln::profile
