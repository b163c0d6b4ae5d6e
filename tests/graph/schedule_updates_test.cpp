#include "graph_test_util.h"
#include "kiln/graph/detail/passes.h"

namespace kiln::graph::schedule_updates_test {
namespace {
using namespace testing;

TEST(ScheduleUpdates, EachUpdateRunsRightAfterItsGradientAndMemoryShrinks) {
  std::vector<Tensor> p = mlp_params(256, 512, 256, 1);
  Tensor lr = Tensor::scalar(0.01);
  Tensor x = random_tensor({32, 256}, 2);
  Tensor y = random_labels(32, 256, 3);
  Graph g = trace_step(mlp_loss, p, x, y, lr);
  Graph late = g;
  EXPECT_EQ(passes::schedule_updates_early(g), 3);  // all but the last update move
  g.verify();
  // Every update now follows its gradient's producer directly (or another update).
  std::vector<NodeId> order = g.schedule();
  for (size_t i = 0; i < order.size(); ++i) {
    const Node& n = g.node(order[i]);
    if (n.op != ops::OpKind::sgd_update) continue;
    NodeId grad_producer = g.value(n.inputs[1]).producer;
    size_t k = i;
    while (k > 0 && g.node(order[k - 1]).op == ops::OpKind::sgd_update) --k;
    EXPECT_EQ(order[k - 1], grad_producer);
  }
  std::vector<bool> aliases(g.num_nodes(), true);
  MemoryPlan early_plan = plan_memory(g, aliases);
  std::vector<bool> aliases_late(late.num_nodes(), true);
  MemoryPlan late_plan = plan_memory(late, aliases_late);
  check_memory_plan(early_plan);
  EXPECT_LT(early_plan.arena_bytes, late_plan.arena_bytes);
}

TEST(ScheduleUpdates, UpdateWaitsForEveryEarlierReaderOfItsParameter) {
  // The parameter is read again late in backward (matmul(g, w) for the input gradient): the
  // update of w must come after that read even though w's gradient is ready earlier.
  std::vector<Tensor> p = mlp_params(8, 6, 4, 1);
  Tensor lr = Tensor::scalar(0.5);
  Tensor x = random_tensor({5, 8}, 2);
  Tensor y = random_labels(5, 4, 3);
  std::vector<Tensor> pe = clone_all(p), pg = clone_all(p);
  Tensor lre = Tensor::scalar(0.5);
  Executable exe(trace_step(mlp_loss, pg, x, y, lr), {});
  for (int s = 0; s < 3; ++s) {
    float le = eager_step(mlp_loss, pe, x, y, lre);
    EXPECT_NEAR(exe.run(std::vector<Tensor>{x, y})[0].item<float>(), le, 1e-5);
  }
  expect_all_close(pg, pe, 1e-5, 1e-4, "parameters");
}

}  // namespace
}  // namespace kiln::graph::schedule_updates_test
