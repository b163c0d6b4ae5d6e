// The profiler's collectors: every launch seen once, phases that make up the step, the
// allocator's own peak, compiled graphs and recompiles, and the rules of the recommendations.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>

#include "kiln/core/allocator.h"
#include "kiln/core/error.h"
#include "kiln/nn/activation.h"
#include "kiln/nn/basic.h"
#include "kiln/nn/container.h"
#include "kiln/nn/conv.h"
#include "kiln/nn/dense.h"
#include "kiln/ops/functional.h"
#include "kiln/profile/files.h"
#include "kiln/profile/raw_files.h"
#include "kiln/profile/recommendations.h"
#include "kiln/profile/report.h"
#include "kiln/profile/step_comparison.h"
#include "kiln/train/compiled_step.h"
#include "profile/profile_testing.h"

namespace kiln::profile::profiler_test {
namespace {

using testing::lenet_dataset;
using testing::lenet_model;

ProfilerOptions collect_only() {
  return {.output_path = "unused",
          .profile_memory = true,
          .start_profile = true,
          .machine_peaks = false};
}

// The trace's "[memory]" events of a profile written to `dir`.
std::vector<nlohmann::json> memory_events(const std::string& dir) {
  std::vector<nlohmann::json> events;
  const nlohmann::json trace = nlohmann::json::parse(read_file(dir + "/trace.json"));
  for (const nlohmann::json& e : trace.at("traceEvents")) {
    if (e.value("cat", "") == "memory") events.push_back(e);
  }
  return events;
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

// Each launch names the kernel that ran: oneDNN's implementation for a matmul, Kiln's own for
// an elementwise add (no primitive noted itself), with the launch's threads and dtype.
TEST(ProfilerCollects, EagerLaunchesNameTheirKernel) {
  Tensor a = Tensor::ones({64, 128});
  Tensor b = Tensor::ones({128, 32});
  Profiler profiler(collect_only());
  ops::matmul(a, b);
  ops::add(a, a);
  profiler.stop();
  const Collection& c = profiler.collection();
  ASSERT_EQ(c.ops.size(), 2u);
  const OpSignature& matmul = c.signatures[c.ops[0].signature];
  const OpSignature& add = c.signatures[c.ops[1].signature];
  EXPECT_FALSE(matmul.kernel.empty());
  EXPECT_EQ(matmul.kernel.rfind("kiln:", 0), std::string::npos) << matmul.kernel;
  EXPECT_EQ(add.kernel, "kiln:add");
  EXPECT_EQ(matmul.dtype, "f32");
  EXPECT_GE(matmul.threads, 1);
}

// Each launch records its tensors' layouts: a convolution reads NCHW and writes channels last
// (NHWC), and a launch on an NHWC input is a kind of its own. The layout reaches the trace,
// ops.csv, the text summary and the report's top-ops table.
TEST(ProfilerCollects, LaunchesRecordEachTensorsLayout) {
  Tensor x = Tensor::ones({2, 3, 8, 8});
  Tensor w1 = Tensor::ones({4, 3, 3, 3}), b1 = Tensor::ones({4});
  Tensor w2 = Tensor::ones({5, 4, 3, 3}), b2 = Tensor::ones({5});
  testing::TempDir dir("kiln-profile-layout");
  Profiler profiler({.output_path = dir.str(), .machine_peaks = false});
  Tensor y = ops::conv2d(x, w1, b1);
  ops::conv2d(y, w2, b2);
  ops::matmul(Tensor::ones({4, 8}), Tensor::ones({8, 2}));
  profiler.stop();
  const Collection& c = profiler.collection();
  ASSERT_EQ(c.ops.size(), 3u);
  EXPECT_EQ(c.signatures[c.ops[0].signature].layout, "nchw nchw - -> nhwc");
  EXPECT_EQ(c.signatures[c.ops[1].signature].layout, "nhwc nchw - -> nhwc");
  EXPECT_EQ(c.signatures[c.ops[2].signature].layout, "") << "no 4-D tensor: nothing to say";

  profiler.analyse();
  const std::string csv = read_file(dir.str() + "/ops.csv");
  EXPECT_NE(csv.find(",layout,"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",nchw nchw - -> nhwc,"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",nhwc nchw - -> nhwc,"), std::string::npos) << csv;
  EXPECT_NE(text_summary(dir.str()).find("(nhwc nchw - -> nhwc)"), std::string::npos);
  const std::string html = read_file(dir.str() + "/report.html");
  EXPECT_NE(html.find("<th>layout</th>"), std::string::npos);
  EXPECT_NE(html.find("<td class=layout>nchw nchw - -&gt; nhwc</td>"), std::string::npos);
}

// Graph mode: a compiled LeNet's convolutions carry the layouts its layout pass chose.
TEST(ProfilerCollects, GraphLaunchesRecordTheirLayouts) {
  auto model = lenet_model();
  train::CompiledTrainStep step(model->network(), model->loss_fn(), model->optimizer());
  step.set_verbose(false);
  Tensor x = train::testing::batch_images(8, 1), y = train::testing::batch_labels(8, 2);
  Profiler profiler(collect_only());
  step.run(x, y);
  profiler.stop();
  const Collection& c = profiler.collection();
  int convolutions = 0;
  for (const OpSignature& s : c.signatures) {
    if (s.mode != "graph" || s.name != "conv2d") continue;
    ++convolutions;
    EXPECT_NE(s.layout.find("-> nhwc"), std::string::npos) << s.shapes << ": " << s.layout;
  }
  EXPECT_GT(convolutions, 0);
}

// With activations kept in oneDNN's blocked layout (forced here; on by default where it pays),
// a launch names them nChw16c rather than the channels-last order their metas give.
TEST(ProfilerCollects, GraphLaunchesNameTheBlockedLayout) {
  // Three 32-channel convolutions (fewer channels are the same bytes either way): enough for the
  // pass to keep activations blocked, small enough for oneDNN's reference kernels of a CPU where
  // that layout does not pay.
  auto net = std::make_shared<nn::SequentialCell>(std::vector<std::shared_ptr<nn::Cell>>{
      std::make_shared<nn::Conv2d>(1, 32, 3), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Conv2d>(32, 32, 3), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Conv2d>(32, 32, 3), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Dense>(32 * 8 * 8, 10)});
  auto loss = std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean");
  auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), optim::constant_lr(0.01));
  train::CompiledTrainStep step(*net, *loss, *opt, {.fusion = true, .block_layout = true});
  step.set_verbose(false);
  Tensor x = Tensor::ones({1, 1, 8, 8}), y = train::testing::batch_labels(1, 2);
  Profiler profiler(collect_only());
  step.run(x, y);
  profiler.stop();
  int blocked = 0;
  for (const OpSignature& s : profiler.collection().signatures) {
    blocked += s.layout.find("nChw16c") != std::string::npos;
  }
  EXPECT_GT(blocked, 0);
  EXPECT_GT(step.executable().report().blocked_values, 0);
}

TEST(ProfilerCollects, OnlyOneProfilerAtATime) {
  Profiler first(collect_only());
  EXPECT_THROW(Profiler second(collect_only()), Error);
  first.stop();
  Profiler third(collect_only());  // the first stopped: allowed
}

TEST(ProfilerCollects, GraphLaunchesEqualTheExecutedLaunches) {
  // The whole batch's graph runs every step (on a busy machine batch slices side by side may
  // win the thread strategies' race, and run graphs of their own).
  testing::PerKernelThreads per_kernel;
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
  // Every launch names its kernel: some oneDNN primitives (the convolutions, the matmuls), some
  // of Kiln's own (the pointwise ops).
  int onednn = 0, own = 0;
  for (const OpSignature& s : c.signatures) {
    ASSERT_FALSE(s.kernel.empty()) << s.name;
    (s.kernel.rfind("kiln:", 0) == 0 ? own : onednn) += 1;
    if (s.name == "conv2d") {
      EXPECT_NE(s.kernel, "kiln:conv2d") << "the primitive noted itself";
    }
  }
  EXPECT_GT(onednn, 0);
  EXPECT_GT(own, 0);
}

// The steady steps' phases (and the short bookkeeping between them) make up the step.
// Returns the collection for further checks.
Collection expect_phases_make_up_the_steps(ExecutionMode mode,
                                           const std::vector<train::StepPhase>& compute) {
  testing::ModeGuard guard(mode);
  auto model = lenet_model();
  auto recorder = std::make_shared<train::testing::LossRecorder>();
  Profiler profiler(collect_only());
  model->train(1, lenet_dataset(96, 16), {recorder});
  profiler.stop();
  const Collection& c = profiler.collection();
  EXPECT_EQ(c.steps.size(), 6u);
  // Summed over the steady steps, so one preemption between two phases on a busy machine does
  // not decide the test.
  std::set<train::StepPhase> seen;
  int64_t phases = 0, steps = 0;
  for (size_t s = 1; s < c.steps.size(); ++s) {
    const StepEvent& step = c.steps[s];
    steps += step.end_ns - step.begin_ns;
    for (const PhaseEvent& p : c.phases) {
      if (p.begin_ns >= step.begin_ns && p.end_ns <= step.end_ns) {
        phases += p.end_ns - p.begin_ns;
        seen.insert(p.phase);
      }
    }
  }
  EXPECT_NEAR(double(phases), double(steps), 0.05 * double(steps));
  for (train::StepPhase phase : compute) {
    EXPECT_TRUE(seen.count(phase)) << train::step_phase_name(phase);
  }
  return c;
}

TEST(ProfilerCollects, EagerPhasesAddUpToTheStep) {
  expect_phases_make_up_the_steps(PYNATIVE_MODE, {train::StepPhase::backward});
}

// Graph mode's compiled step is split into forward, backward and optimizer update by what each
// launched node computes: every launch lies in a phase of its own kind, and the phases, no
// longer one compiled step, still make up the step.
TEST(ProfilerCollects, GraphPhasesAddUpToTheStep) {
  using train::StepPhase;
  // One thread launches every node (batch slices side by side would interleave the phases).
  testing::PerKernelThreads per_kernel;
  const Collection c = expect_phases_make_up_the_steps(
      GRAPH_MODE, {StepPhase::forward, StepPhase::backward, StepPhase::update});
  int checked = 0;
  std::map<StepPhase, std::set<std::string>> ops_of;
  for (const OpEvent& e : c.ops) {
    const OpSignature& s = c.signatures[e.signature];
    if (s.mode != "graph" || e.begin_ns < c.steps.at(1).begin_ns) continue;
    ASSERT_NE(s.phase, StepPhase::graph_step) << s.name << ": every launched node has a phase";
    ops_of[s.phase].insert(s.name);
    const auto holds = [&](const PhaseEvent& p) {
      return p.begin_ns <= e.begin_ns && e.end_ns <= p.end_ns;
    };
    const auto p = std::find_if(c.phases.begin(), c.phases.end(), holds);
    ASSERT_NE(p, c.phases.end()) << s.name;
    EXPECT_EQ(p->phase, s.phase) << s.name << " lies in " << train::step_phase_name(p->phase);
    ++checked;
  }
  EXPECT_GT(checked, 100);
  for (const PhaseEvent& p : c.phases) EXPECT_NE(p.phase, StepPhase::graph_step);
  // LeNet's convolutions run forward, their gradients backward, Momentum's updates last.
  EXPECT_TRUE(ops_of[StepPhase::forward].count("conv2d"));
  EXPECT_TRUE(ops_of[StepPhase::backward].count("conv2d_backward_data"));
  EXPECT_FALSE(ops_of[StepPhase::update].empty());
  for (const std::string& name : ops_of[StepPhase::update]) {
    EXPECT_NE(name.find("momentum"), std::string::npos) << name;
  }
}

TEST(ProfilerCollects, PeakIsTheAllocatorsOwnCounter) {
  Profiler profiler(collect_only());
  constexpr int64_t kBytes = 48 << 20;
  {
    Tensor big = Tensor::ones({kBytes / 4});  // allocated while profiling: an event
    ops::add(big, big);
  }
  profiler.stop();
  const Collection& c = profiler.collection();
  EXPECT_EQ(c.allocator_peak_bytes, allocator::stats().peak_bytes);
  EXPECT_GE(c.allocator_peak_bytes, 2 * kBytes);
  int64_t recorded = 0;
  for (const AllocationEvent& e : c.allocations) recorded = std::max(recorded, e.in_use_bytes);
  EXPECT_GE(recorded, 2 * kBytes);
  EXPECT_LE(recorded, c.allocator_peak_bytes);
}

// Every allocation and release is an event; together they account for the bytes in use, the
// largest in use is the allocator's own peak, and each names the op it happened in.
TEST(ProfilerCollects, AllocatorEventsAddUpAndNameTheirOp) {
  testing::TempDir dir("kiln-profile-allocations");
  ProfilerOptions options = collect_only();
  options.output_path = dir.str();
  const int64_t before = allocator::stats().in_use_bytes;
  constexpr int64_t kElements = 3 << 20;
  Profiler profiler(options);
  Tensor kept;
  {
    Tensor big = Tensor::ones({kElements});
    kept = ops::add(big, big);
  }
  profiler.stop();
  const Collection& c = profiler.collection();
  int64_t sum = 0, largest = before;
  for (const AllocationEvent& e : c.allocations) {
    sum += e.bytes;
    largest = std::max(largest, e.in_use_bytes);
  }
  EXPECT_EQ(before + sum, allocator::stats().in_use_bytes);
  EXPECT_EQ(largest, c.allocator_peak_bytes);

  write_raw_files(c, dir.str());
  const int64_t add_output = int64_t(allocator::size_class(size_t(kElements) * 4));
  bool found = false;
  for (const nlohmann::json& e : memory_events(dir.str())) {
    if (e["args"]["bytes"] == add_output && e["args"]["op"] == "add") found = true;
    EXPECT_FALSE(e["args"]["op"].get<std::string>().empty());
  }
  EXPECT_TRUE(found) << "add's output allocation, named after add";
}

// A compiled step's memory plan: its buffers inside the arena, each with the node that writes
// it, and the schedule positions of the launched nodes.
TEST(ProfilerCollects, CompiledGraphsCarryTheirMemoryPlan) {
  testing::ModeGuard guard(GRAPH_MODE);
  auto model = lenet_model();
  Profiler profiler(collect_only());
  model->train(1, lenet_dataset(32, 16));
  profiler.stop();
  const Collection& c = profiler.collection();
  ASSERT_EQ(c.compiles.size(), 1u);
  const CompileEvent& ce = c.compiles[0];
  ASSERT_FALSE(ce.buffers.empty());
  for (const PlanBuffer& b : ce.buffers) {
    EXPECT_GE(b.offset, 0);
    EXPECT_LE(b.offset + b.bytes, int64_t(ce.counts.at("arena_bytes"))) << b.holds;
    EXPECT_LE(b.first, b.last) << b.holds;
    EXPECT_FALSE(b.holds.empty());
  }
  EXPECT_FALSE(ce.node_positions.empty());
  // The pipeline's queues are sampled with their depth.
  ASSERT_FALSE(c.pipeline.empty());
  for (const data::StageStats& st : c.pipeline.back().stats.stages) {
    EXPECT_GT(st.queue_capacity, 0) << st.name;
    EXPECT_LE(st.queue_blocks, st.queue_capacity) << st.name;
  }
}

// The graph before the passes is kept beside the compiled one while a profiler runs (and only
// then), and the report shows both.
TEST(ProfilerCollects, CompiledGraphsCarryTheGraphBeforeThePasses) {
  testing::ModeGuard guard(GRAPH_MODE);
  {
    auto model = lenet_model();
    model->train(1, lenet_dataset(16, 16));
    ASSERT_NE(model->compiled_step(), nullptr);
    EXPECT_EQ(model->compiled_step()->executable().traced_graph(), nullptr)
        << "no profiler: no copy of the traced graph";
  }
  testing::TempDir dir("kiln-profile-traced-graph");
  auto model = lenet_model();
  Profiler profiler({.output_path = dir.str(), .machine_peaks = false});
  model->train(1, lenet_dataset(32, 16));
  const std::string report = profiler.analyse();
  const Collection& c = profiler.collection();
  ASSERT_EQ(c.compiles.size(), 1u);
  const CompileEvent& ce = c.compiles[0];
  ASSERT_FALSE(ce.traced_text.empty());
  EXPECT_NE(ce.traced_text, ce.graph_text) << "the passes changed nothing?";
  EXPECT_NE(ce.traced_dot.find("digraph"), std::string::npos);
  const graph::Graph* traced = model->compiled_step()->executable().traced_graph();
  ASSERT_NE(traced, nullptr);
  EXPECT_EQ(ce.traced_text, traced->str());
  EXPECT_EQ(traced->num_live_nodes(), size_t(ce.counts.at("nodes_traced")));

  const std::string html = read_file(report);
  const size_t before = html.find("<h3 id=graph-traced>");
  const size_t after = html.find("<h3 id=graph-compiled>");
  ASSERT_NE(before, std::string::npos);
  ASSERT_NE(after, std::string::npos);
  EXPECT_LT(before, after);
  // Each figure's text is its own graph's (the first IR line is enough to tell them apart).
  const std::string traced_first = ce.traced_text.substr(0, ce.traced_text.find('\n'));
  const std::string compiled_first = ce.graph_text.substr(0, ce.graph_text.find('\n'));
  EXPECT_NE(html.find("<pre id=graph-traced-text>" + traced_first), std::string::npos)
      << traced_first;
  EXPECT_NE(html.find("<pre id=graph-compiled-text>" + compiled_first), std::string::npos)
      << compiled_first;
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

ProfileData with_comparisons(std::vector<std::pair<std::string, double>> timings) {
  ProfileData data = steps_with_data_wait(0);
  nlohmann::json list = nlohmann::json::array();
  for (const auto& [setting, ms] : timings) {
    list.push_back({{"setting", setting}, {"ms", ms}, {"profiled", setting == kProfiledSetting}});
  }
  data.profile["comparisons"] = list;
  return data;
}

const Recommendation* find(const std::vector<Recommendation>& advice, const std::string& word) {
  for (const Recommendation& r : advice) {
    if (r.title.find(word) != std::string::npos) return &r;
  }
  return nullptr;
}

TEST(Recommendations, EagerRunsGetTheMeasuredGainOfGraphMode) {
  ProfileData data = with_comparisons(
      {{kProfiledSetting, 10.0}, {kGraphSetting, 4.0}, {kGraphFusionSetting, 2.5}});
  data.graph = false;
  data.eager = true;
  const std::vector<Recommendation> advice = recommend(data);
  const Recommendation* r = find(advice, "GRAPH_MODE");
  ASSERT_NE(r, nullptr);
  EXPECT_NE(r->title.find("4.00x faster"), std::string::npos) << r->title;
  EXPECT_NE(r->title.find("--graph-kernel on"), std::string::npos) << r->title;
  EXPECT_NE(r->reason.find("10.00 ms"), std::string::npos) << r->reason;
  // Graph mode measured slower: no advice to switch.
  ProfileData slower = with_comparisons({{kProfiledSetting, 10.0}, {kGraphSetting, 12.0}});
  slower.graph = false;
  slower.eager = true;
  EXPECT_FALSE(mentions(recommend(slower), "GRAPH_MODE"));
}

TEST(Recommendations, MixedPrecisionSlowerThanO0IsSaid) {
  ProfileData data = with_comparisons({{kProfiledSetting, 8.0}, {kAmpO0Setting, 6.0}});
  data.profile["annotations"] = {{"amp level", "O2"}};
  const std::vector<Recommendation> advice = recommend(data);
  const Recommendation* r = find(advice, "slower than O0");
  ASSERT_NE(r, nullptr);
  EXPECT_NE(r->title.find("O2"), std::string::npos) << r->title;
  EXPECT_FALSE(
      mentions(recommend(with_comparisons({{kProfiledSetting, 6.0}, {kAmpO0Setting, 8.0}})),
               "slower than O0"));
  // Graph mode's own race kept fp32.
  ProfileData raced = steps_with_data_wait(0);
  raced.profile["amp_race"] = {
      {{"setting", "bf16 where it pays"}, {"ms", 5.0}, {"profiled", false}},
      {{"setting", "float32"}, {"ms", 4.0}, {"profiled", true}}};
  EXPECT_TRUE(mentions(recommend(raced), "bf16 is slower than fp32"));
}

TEST(Recommendations, FusionAndO2WhenMeasuredFaster) {
  EXPECT_TRUE(mentions(
      recommend(with_comparisons({{kProfiledSetting, 10.0}, {kFusionSetting, 7.0}})), "fusion"));
  EXPECT_FALSE(mentions(
      recommend(with_comparisons({{kProfiledSetting, 10.0}, {kFusionSetting, 9.9}})), "fusion"));
  EXPECT_TRUE(mentions(
      recommend(with_comparisons({{kProfiledSetting, 10.0}, {kAmpO2Setting, 6.0}})), "O2"));
}

// The profiled step timed in the other settings on the same batch, with every parameter and the
// optimizer's step put back as they were.
TEST(StepComparison, TimesTheOtherSettingsAndRestoresTheState) {
  testing::ModeGuard guard(PYNATIVE_MODE);
  auto net = models::create("lenet");
  auto loss = std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean");
  auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), optim::constant_lr(0.01));
  Tensor x = train::testing::batch_images(16, 1), y = train::testing::batch_labels(16, 2);
  std::vector<Tensor> before;
  for (const auto& [name, t] : net->state_and_names()) before.push_back(t.clone());
  const std::vector<StepTiming> timings =
      compare_step_settings({net, loss, opt, {}}, x, y, {.warmup_steps = 1, .rounds = 2});
  ASSERT_GE(timings.size(), 3u);
  EXPECT_EQ(timings[0].setting, kProfiledSetting);
  EXPECT_TRUE(timings[0].profiled);
  EXPECT_EQ(timings[1].setting, kGraphSetting);
  EXPECT_EQ(timings[2].setting, kGraphFusionSetting);
  for (const StepTiming& t : timings) EXPECT_GT(t.ms, 0) << t.setting;
  EXPECT_EQ(opt->global_step(), 0);
  EXPECT_EQ(get_context().mode, PYNATIVE_MODE);
  size_t i = 0;
  for (const auto& [name, t] : net->state_and_names()) {
    EXPECT_EQ(t.to_vector<float>(), before[i++].to_vector<float>()) << name;
  }
}

TEST(Recommendations, EagerRunsAreToldOfGraphMode) {
  ProfileData data = steps_with_data_wait(0);
  EXPECT_FALSE(mentions(recommend(data), "GRAPH_MODE"));
  data.graph = false;
  data.eager = true;
  EXPECT_TRUE(mentions(recommend(data), "GRAPH_MODE"));
}

}  // namespace
}  // namespace kiln::profile::profiler_test
