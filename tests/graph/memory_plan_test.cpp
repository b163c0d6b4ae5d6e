#include "kiln/graph/memory_plan.h"

#include "graph_test_util.h"

namespace kiln::graph {
namespace {
using namespace testing;

TEST(MemoryPlan, CheckerRejectsOverlappingLiveBuffers) {
  MemoryPlan plan;
  plan.buffers.resize(2);
  plan.buffers[0] = {.offset = 0, .bytes = 128, .first = 0, .last = 3, .values = {1}};
  plan.buffers[1] = {.offset = 64, .bytes = 128, .first = 2, .last = 5, .values = {2}};
  plan.arena_bytes = 192;
  EXPECT_THROW(check_memory_plan(plan), Error);
  plan.buffers[1].first = 4;  // no longer live together: sharing memory is fine
  EXPECT_NO_THROW(check_memory_plan(plan));
  plan.buffers[1].offset = 128;  // beyond the arena
  EXPECT_THROW(check_memory_plan(plan), Error);
}

TEST(MemoryPlan, ReusesMemoryAndWritesInPlace) {
  // A long chain: each value dies at its consumer, so two buffers serve every step.
  GraphFn fn = [](const std::vector<Tensor>& in) {
    Tensor x = in[0];
    for (int i = 0; i < 10; ++i) x = ops::matmul(ops::tanh(x), in[1]);
    return std::vector<Tensor>{x};
  };
  std::vector<Tensor> in{random_tensor({32, 32}, 1, -0.2f, 0.2f),
                         random_tensor({32, 32}, 2, -0.2f, 0.2f)};
  Compiled c = compile_and_run(fn, in, {.fusion = false});
  const MemoryPlan& plan = c.exe->plan();
  check_memory_plan(plan);
  const int64_t one = 32 * 32 * 4;
  EXPECT_EQ(plan.total_bytes, 2 * one + 20 * one - plan.inplace_reuses * one);
  EXPECT_GT(plan.inplace_reuses, 0);  // tanh writes over the matmul result it consumes
  EXPECT_LE(plan.arena_bytes, 3 * one);
  expect_all_close(c.outputs, fn(in), 1e-5, 1e-5, "chain");
}

TEST(MemoryPlan, ViewsKeepTheirBaseAlive) {
  GraphFn fn = [](const std::vector<Tensor>& in) {
    Tensor t = ops::transpose(ops::exp(in[0]), {1, 0});  // a view of exp's buffer
    Tensor u = ops::neg(in[0]);                          // must not land on exp's buffer
    return std::vector<Tensor>{ops::matmul(t, u)};
  };
  std::vector<Tensor> in{random_tensor({6, 6}, 1)};
  Compiled c = compile_and_run(fn, in, {});
  check_memory_plan(c.exe->plan());
  expect_all_close(c.outputs, fn(in), 1e-5, 1e-5, "views");
}

TEST(MemoryPlan, ReshapeOfChannelsLastCopiesCorrectly) {
  GraphFn fn = [](const std::vector<Tensor>& in) {
    Tensor y = ops::conv2d(in[0], in[1], Tensor(), {});  // channels-last
    return std::vector<Tensor>{ops::relu(ops::reshape(y, Shape{2, -1}))};
  };
  std::vector<Tensor> in{random_tensor({2, 3, 5, 5}, 1), random_tensor({4, 3, 3, 3}, 2)};
  Compiled c = compile_and_run(fn, in, {});
  expect_all_close(c.outputs, fn(in), 1e-5, 1e-5, "reshape of channels-last");
}

}  // namespace
}  // namespace kiln::graph
