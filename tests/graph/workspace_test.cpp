// Kernels' workspaces (SpecialKernel::workspace_bytes): scratch that lives only while its kernel
// runs, placed by the memory plan in the gaps the tensors leave at that kernel's position.
#include <cmath>

#include "graph_test_util.h"
#include "kiln/graph/memory_plan.h"
#include "testing/cpu_features.h"

namespace kiln::graph::workspace_test {
namespace {
using namespace testing;

TEST(Workspace, GoesIntoTheSmallestGapAtItsPosition) {
  MemoryPlan plan;
  plan.buffers.resize(3);
  plan.buffers[0] = {.offset = 0, .bytes = 128, .first = 0, .last = 3, .values = {1}};
  plan.buffers[1] = {.offset = 192, .bytes = 128, .first = 2, .last = 5, .values = {2}};
  plan.buffers[2] = {.offset = 384, .bytes = 64, .first = 0, .last = 5, .values = {3}};
  plan.arena_bytes = 512;
  // Live at position 2: [0, 128), [192, 320), [384, 448). Gaps: 64 bytes, 64 bytes, 64 bytes.
  EXPECT_EQ(place_workspace(plan, 2, 128), MemoryPlan::kNone);
  EXPECT_EQ(place_workspace(plan, 2, 64), 128);
  EXPECT_EQ(place_workspace(plan, 2, 64), 320) << "the first workspace there is taken";
  // At position 1 buffer 1 is not live yet: the gap [128, 384) holds 256 bytes.
  EXPECT_EQ(place_workspace(plan, 1, 256), 128);
  EXPECT_EQ(place_workspace(plan, 1, 64), 448) << "the gap at the arena's end fits best";
  EXPECT_EQ(plan.workspaces.size(), 4u);
  EXPECT_NO_THROW(check_memory_plan(plan));
  // The checker refuses a workspace over a buffer live at its position, or past the arena.
  plan.workspaces.push_back({.offset = 200, .bytes = 64, .position = 4});
  EXPECT_THROW(check_memory_plan(plan), Error);
  plan.workspaces.back() = {.offset = 480, .bytes = 64, .position = 0};
  EXPECT_THROW(check_memory_plan(plan), Error);
}

// Workspaces whose sizes are known are packed with the tensors, each live at its position
// alone: the arena holds the largest sum of tensors and workspace live at one position.
TEST(Workspace, PlanPacksKnownWorkspacesWithTheTensors) {
  GraphFn fn = [](const std::vector<Tensor>& in) {
    Tensor a = ops::exp(in[0]);                            // position 0
    Tensor b = ops::tanh(a);                               // 1
    return std::vector<Tensor>{ops::add(ops::neg(a), b)};  // 2, 3
  };
  Graph g = trace(fn, {random_tensor({16, 16}, 1)});
  const std::vector<bool> no_views(g.num_nodes(), false);
  const int64_t one = 16 * 16 * 4;
  MemoryPlan plain = plan_memory(g, no_views, {.inplace = false, .inputs_in_place = {true}});
  MemoryPlan packed = plan_memory(
      g, no_views, {.inplace = false, .inputs_in_place = {true}, .workspace_bytes = {0, 3 * one}});
  ASSERT_EQ(packed.workspaces.size(), 1u);
  EXPECT_TRUE(packed.workspaces[0].reserved);
  EXPECT_EQ(packed.workspaces[0].position, 1);
  EXPECT_EQ(packed.workspaces[0].bytes, 3 * one);
  EXPECT_NO_THROW(check_memory_plan(packed));
  // At position 1, a and b are live beside the workspace.
  EXPECT_EQ(plain.arena_bytes, 3 * one);
  EXPECT_EQ(packed.arena_bytes, 5 * one);
  EXPECT_EQ(packed.live_bytes_peak, 5 * one);
}

// graph_test_util.h's conv net, trained with SGD. With a 3-channel NCHW batch, the first
// convolution's fused kernel stages it channels-last in its workspace; with one channel, the
// first layer runs as conv_relu_pool (its rows staged and expanded in the workspace) and its
// backward as pooled_conv_grad over an expanded image. The second layer's backward is
// pooled_conv_grad with dx either way.
struct Trained {
  std::vector<float> losses;
  std::vector<Tensor> params;
  CompileReport report;
  size_t workspaces_in_arena = 0;
  int pooled_conv_grads = 0, epilogues = 0, conv_relu_pools = 0;
};

Trained train(int64_t channels, const CompileOptions& options) {
  std::vector<Tensor> params = conv_net_params(channels);
  Tensor x = random_tensor({4, channels, 20, 20}, 7), labels = random_labels(4, 10, 8);
  Tensor lr = Tensor::scalar(0.05);
  Executable exe(trace_step(conv_net_loss, params, x, labels, lr), options);
  Trained t;
  for (int step = 0; step < 3; ++step) {
    t.losses.push_back(exe.run(std::vector<Tensor>{x, labels})[0].item<float>());
  }
  t.params = params;
  t.report = exe.report();
  t.workspaces_in_arena = exe.plan().workspaces.size();
  t.pooled_conv_grads = count_nodes(exe.graph(), NodeType::pooled_conv_grad);
  t.epilogues = count_nodes(exe.graph(), NodeType::epilogue);
  t.conv_relu_pools = count_nodes(exe.graph(), NodeType::conv_relu_pool);
  check_memory_plan(exe.plan());
  return t;
}

// The workspace holds whatever the tensors or kernels before left there. Filled with NaN
// before every kernel, it must not change a single bit of the result: a kernel that read a
// padding border or a lane it had not cleared this run would spread the NaN.
class WorkspaceOfConvNet : public ::testing::TestWithParam<int64_t> {};

TEST_P(WorkspaceOfConvNet, KernelsDoNotReadScratchTheyDidNotWriteThisRun) {
  const int64_t channels = GetParam();
  Trained clean = train(channels, {.fusion = true});
  Trained poisoned = train(channels, {.fusion = true, .poison_workspaces = true});
  EXPECT_GE(clean.epilogues, 1);
  if (kiln::testing::avx512_kernels_run()) {  // the pooled-conv kernels are the scratch users
    EXPECT_EQ(clean.pooled_conv_grads, channels == 1 ? 2 : 1);
    EXPECT_EQ(clean.conv_relu_pools, channels == 1 ? 1 : 0);
    EXPECT_GT(clean.report.workspace_bytes, 0);
    EXPECT_GT(clean.workspaces_in_arena, 0u);
    EXPECT_EQ(clean.report.workspace_outside_arena, 0) << "packed with the tensors if no gap";
  }
  for (size_t s = 0; s < clean.losses.size(); ++s) {
    EXPECT_TRUE(std::isfinite(poisoned.losses[s])) << "step " << s;
    EXPECT_EQ(poisoned.losses[s], clean.losses[s]) << "step " << s;
  }
  for (size_t i = 0; i < clean.params.size(); ++i) {
    EXPECT_EQ(poisoned.params[i].to_vector<float>(), clean.params[i].to_vector<float>())
        << "parameter " << i;
  }
  // Fused training with its workspaces still matches unfused training.
  Trained unfused = train(channels, {.fusion = false});
  for (size_t s = 0; s < clean.losses.size(); ++s) {
    EXPECT_NEAR(clean.losses[s], unfused.losses[s], 1e-5) << "step " << s;
  }
  expect_all_close(clean.params, unfused.params, 1e-5, 1e-4, "fused vs unfused");
}

INSTANTIATE_TEST_SUITE_P(InputChannels, WorkspaceOfConvNet, ::testing::Values(1, 3));

}  // namespace
}  // namespace kiln::graph::workspace_test
